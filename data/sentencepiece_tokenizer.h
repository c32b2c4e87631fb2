// SentencePiece tokenizers (Llama-2 style `tokenizer.model`) through libsentencepiece, with the
// special tokens written literally in the text split off first as Hugging Face's LlamaTokenizer
// does (legacy mode: every piece between special tokens gets SentencePiece's dummy prefix).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace feast {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // `config_json`: the folder's tokenizer_config.json ("" when there is none); its
  // added_tokens_decoder lists the tokens split off literally, else the model's control and
  // unknown pieces (<s>, </s>, <unk>) are. Throws DataError naming the file.
  explicit SentencePieceTokenizer(const std::string& model_path, const std::string& config_json = "");
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer() override;

  std::string kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  // Decodes the ids between special tokens run by run, so each run's dummy-prefix space is
  // removed exactly where encode added one: decode(encode(t)) == t when the model keeps
  // whitespace (remove_extra_whitespaces off, identity normalization, as Llama's does).
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> eos_id() const override;
  std::optional<int32_t> bos_id() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace feast
