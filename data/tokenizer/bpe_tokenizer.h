// Byte-level BPE as Hugging Face's `tokenizers` runs it (GPT-2, Llama-3, Qwen2): added tokens
// split off first, NFC if the normalizer asks for it, then the pre-tokenizer's regexes (PCRE2)
// cut the text into pieces, each piece's bytes map to GPT-2's printable alphabet, and the merges
// join them by rank. Loaded from
// a `tokenizer.json` or from GPT-2's `vocab.json` + `merges.txt`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace feast {

class BpeTokenizer final : public Tokenizer {
 public:
  // From a tokenizer.json; `config_json` is the folder's tokenizer_config.json ("" when there is
  // none), which names the eos and bos tokens (else <|endoftext|> / <|end_of_text|> and
  // <|begin_of_text|> when the vocabulary has them). Throws DataError naming the file and the
  // field that is malformed or that this implementation does not support.
  explicit BpeTokenizer(const std::string& tokenizer_json, const std::string& config_json = "");
  // From GPT-2's two files: GPT-2's pre-tokenizer, no normalizer; the added tokens are those of
  // tokenizer_config.json (and added_tokens.json beside vocab.json), else <|endoftext|>.
  static BpeTokenizer from_vocab_and_merges(const std::string& vocab_json,
                                            const std::string& merges_txt,
                                            const std::string& config_json = "");
  BpeTokenizer(BpeTokenizer&&) noexcept;
  ~BpeTokenizer() override;

  std::string kind() const override { return "bpe"; }
  int64_t vocab_size() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  // encode(text): no pre-tokenizer piece spans the boundary before `text`. (A ByteLevel step with
  // add_prefix_space adds its space here too, as HF does to every text it encodes.)
  std::vector<int32_t> encode_continuation(std::string_view text) const override { return encode(text); }
  // Ids in range that no token has (gaps in a vocabulary) decode to nothing, as in HF. With the
  // NFC normalizer, decode(encode(t)) is NFC(t).
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> eos_id() const override;
  std::optional<int32_t> bos_id() const override;
  bool is_special(int32_t id) const override;

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace feast
