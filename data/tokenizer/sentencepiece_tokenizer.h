// SentencePiece tokenizers (Llama-2 style `tokenizer.model`) through libsentencepiece, with the
// special tokens written literally in the text split off first as Hugging Face's LlamaTokenizer
// does (legacy mode: every piece between special tokens gets SentencePiece's dummy prefix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace feast {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // `config_json`: the folder's tokenizer_config.json ("" when there is none); its
  // added_tokens_decoder lists the tokens split off literally, else the model's unknown, BOS and
  // EOS pieces (<unk>, <s>, </s>) are, as LlamaTokenizer's defaults. Throws DataError naming the
  // file.
  explicit SentencePieceTokenizer(const std::string& model_path, const std::string& config_json = "");
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer() override;

  std::string kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  // No dummy prefix (legacy=False: no '▁') before the text's first run; runs after a special
  // token are encoded as encode() does. Legacy mode gives every run after a special token a
  // prefix, which decode removes, so there a continuation that starts with a space right after
  // a prompt ending in a special token (" 4" after "...</s>") decodes without that space.
  std::vector<int32_t> encode_continuation(std::string_view text) const override;
  // Decodes the ids between special tokens run by run, so each run's dummy-prefix space is
  // removed exactly where encode added one: decode(encode(t)) == t when the model keeps
  // whitespace (remove_extra_whitespaces off, identity normalization, as Llama's does) and t has
  // no U+2581 ('▁'), which SentencePiece (and HF with legacy=False) reads as a space, so it
  // comes back as ' '.
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> eos_id() const override;
  std::optional<int32_t> bos_id() const override;
  bool is_special(int32_t id) const override;

  // Whether long runs of text are encoded in chunks cut before a '\n' (only when that gives the
  // same ids as one call: identity normalization that keeps whitespace, no piece holding '\n',
  // '\n' not unknown; Llama-2 and Mistral qualify), and the chunk size in bytes (64 KiB), which
  // tests lower to exercise the cuts. A model that does not qualify ignores set_chunk_bytes.
  bool splits_at_newlines() const;
  void set_chunk_bytes(size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace feast
