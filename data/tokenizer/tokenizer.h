// The tokenizer interface every text path uses (prepare-data, tokenize, generate, export): text
// to ids and back, plus the special tokens a trainer needs. Implementations: the byte tokenizer
// (no files), byte-level BPE (GPT-2 and Llama-3 `tokenizer.json`, or `vocab.json` +
// `merges.txt`) and SentencePiece (`tokenizer.model`, Llama-2 style). load_tokenizer() picks one
// from a Hugging Face model folder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace feast {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "byte", "bpe" or "sentencepiece": recorded in meta.json by prepare-data.
  virtual std::string kind() const = 0;
  // Ids are < vocab_size() (added tokens included).
  virtual int64_t vocab_size() const = 0;

  // Ids of `text` as Hugging Face's tokenizers give them with add_special_tokens=False: special
  // and added tokens written literally in the text become their ids; no BOS or EOS is added.
  // Throws DataError on invalid UTF-8 (naming the byte offset).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids of `text` as it is tokenized after other text, for a completion that follows its prompt:
  // SentencePiece gives it no dummy-prefix space, so decode(encode(a) + encode_continuation(b))
  // == a + b. The boundary between the two texts is always a token boundary, as in encode(a) +
  // encode(b); byte-level tokenizers, whose pre-tokenizers start afresh there anyway, give
  // encode(text). Throws as encode() does.
  virtual std::vector<int32_t> encode_continuation(std::string_view text) const = 0;
  // The text of `ids` (special tokens included literally), so decode(encode(t)) == t for any
  // UTF-8 text t. Throws DataError naming an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // The token that separates documents in prepared data (GPT-2's <|endoftext|>, Llama-3's
  // <|end_of_text|>, SentencePiece's </s>) and the beginning-of-sequence token, when the
  // tokenizer has them.
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  // Whether `id` is a special token (end-of-text, BOS, chat markers such as <|im_end|>: added
  // tokens marked special, the EOS and BOS tokens, SentencePiece's control and unknown pieces):
  // what Hugging Face's decode(skip_special_tokens=True) leaves out.
  virtual bool is_special(int32_t id) const = 0;
};

// The tokenizer of a Hugging Face model folder (or of a path to one of its files):
//   tokenizer.model                  SentencePiece (its tokenizer.json, if any, is ignored)
//   tokenizer.json                   byte-level BPE (model.type "BPE" with a ByteLevel
//                                    pre-tokenizer step; normalizer none or NFC)
//   vocab.json + merges.txt          byte-level BPE with GPT-2's pre-tokenizer
// "byte" (or an empty string) gives the byte tokenizer. Throws DataError naming the folder and
// what it lacks or what in a file is wrong.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder);

// Whether `folder` holds a tokenizer load_tokenizer reads (tokenizer.model, tokenizer.json or
// vocab.json).
bool has_tokenizer_files(const std::string& folder);

// The tokenizer a model uses: model.tokenizer when set (a folder, a file, or "byte"), else
// model.init_from's folder when it holds a tokenizer, else "" (none known).
std::string tokenizer_folder(const std::string& model_tokenizer, const std::string& init_from);

// --- Shared by the implementations (tokenizer.cpp) ---------------------------------------------

// Throws DataError naming the byte offset of the first invalid UTF-8 sequence in `text`
// (overlong forms, surrogates and code points above U+10FFFF are invalid, as in Rust's str).
// `what` names the text in the message ("tokenizer input").
void check_utf8(std::string_view text, const std::string& what = "tokenizer input");

// A token written literally in the text that becomes its id before any model sees the text
// (Hugging Face's added tokens: <|endoftext|>, <s>, ...), with HF's matching flags.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;      // matched like the others; SentencePiece's legacy=False rule reads it
  bool lstrip = false;       // the match also swallows the whitespace before it
  bool rstrip = false;       // ... and after it
  bool single_word = false;  // matches only when not inside a word (no \w next to it)
  bool normalized = false;   // matched after the normalizer ran, not in the raw text
};

// Hugging Face's added-token split: leftmost-longest, non-overlapping matches of the tokens'
// contents, applying their flags. Pieces cover the whole text in order; empty text gives none.
class AddedTokenSplitter {
 public:
  struct Piece {
    std::string_view text;  // a view into the split text
    int32_t id;             // the added token's id, or -1 for text in between
  };

  AddedTokenSplitter() = default;
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Appends the pieces of `text` to `out`.
  void split(std::string_view text, std::vector<Piece>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  // first byte -> indices into tokens_, longest content first: the first that matches wins.
  std::vector<std::vector<uint32_t>> by_first_byte_;
  // The one byte every token starts with ('<' in most tokenizers), found with memchr; -1 if
  // they start with several.
  int only_first_byte_ = -1;
};

}  // namespace feast
