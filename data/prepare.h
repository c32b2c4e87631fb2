// Turns a corpus into the on-disk layout the trainer reads: <out>/train_NNN.bin,
// <out>/val_NNN.bin, their loss masks <out>/train_NNN.mask, <out>/val_NNN.mask when the input
// holds instruction data, and <out>/meta.json (tokenizer, vocabulary, token counts, the
// parameters used and, for synthetic data, the entropy floor). Re-running with the same
// parameters reuses the directory, so scripts can call it unconditionally.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace feast {

// How far preparation is, for a progress display. Reported from the calling thread.
struct PrepareProgress {
  const char* phase = "";     // "checksumming inputs", "tokenizing"
  int64_t bytes_done = 0;     // input bytes as stored (compressed for .gz inputs)
  int64_t bytes_total = 0;
  int64_t tokens = 0;         // tokens produced so far
  double seconds = 0;         // since the phase began
  bool finished = false;      // the phase's last report
};

struct PrepareOptions {
  std::string out_dir;
  double val_fraction = 0.05;             // taken from the end of the token stream; in (0, 1)
  int64_t max_shard_tokens = 100'000'000;  // larger splits go to several shards (llm.c's size)
  bool force = false;                      // rewrite even if meta.json records these parameters
  bool keep_binary = false;                // tokenize inputs with NUL bytes too (not text-like)
  // A Hugging Face tokenizer folder (see load_tokenizer); "" or "byte": the byte tokenizer.
  std::string tokenizer = "";
  int threads = 0;  // tokenizing threads; 0: every core. The output does not depend on it.
  // --pack: samples placed whole into windows of pack_seq_len + 1 tokens (data/packing.h), for
  // training at training.seq_len = pack_seq_len; 0: the documents one after another.
  int64_t pack_seq_len = 0;
  // Called a few times a second while reading and tokenizing, and once at the end of each phase.
  std::function<void(const PrepareProgress&)> on_progress = nullptr;
};

// What --pack made of both splits.
struct PackingSummary {
  int64_t window = 0;                        // tokens per window: seq_len + 1
  int64_t train_windows = 0, val_windows = 0;
  int64_t documents = 0;                     // samples packed
  int64_t split_documents = 0, pieces = 0;   // samples longer than a window, and the pieces they became
  int64_t padding_tokens = 0;
  // The share of the windows' tokens that are samples' tokens, not padding.
  double efficiency() const {
    const double total = double(train_windows + val_windows) * double(window);
    return total > 0 ? 1.0 - double(padding_tokens) / total : 0.0;
  }
};

struct PreparedData {
  std::vector<std::string> train_shards;  // full paths, in order
  std::vector<std::string> val_shards;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::optional<double> entropy_floor;    // nats/token; synthetic data only
  // What the chain itself scores on the validation split, and the per-token spread of that score
  // (synthetic data with a validation split; absent in directories prepared before it existed).
  std::optional<double> val_floor, val_floor_stddev;
  std::optional<double> unigram_entropy;  // nats/token; synthetic data only
  bool reused = false;                    // out_dir already held this; nothing was written
  // Text inputs: what was tokenized and what was left out, one line per file left out or
  // suspicious ("x.bin: skipped, not text: 1234 NUL bytes").
  int files_kept = 0, files_skipped = 0;
  std::vector<std::string> input_notes;
  // The tokenizer used and what came out.
  std::string tokenizer_kind = "byte";
  std::string tokenizer_folder;           // absolute; "" for the byte tokenizer
  int64_t vocab_size = 256;
  std::optional<int32_t> eos_id;
  int64_t documents = 0;                  // text documents, prompt/completion examples and conversations
  int64_t instruction_examples = 0;       // of which prompt/completion examples or conversations
  bool has_loss_mask = false;             // X.mask beside every shard X.bin
  int64_t masked_tokens = 0;              // mask entries 0 (prompt tokens), over both splits
  std::optional<PackingSummary> packing;  // --pack
};

// The files that command-line arguments name, in order: an argument that names an existing
// file is taken as is; otherwise one with glob characters (* ? [) is expanded with POSIX glob()
// to its regular files, sorted by name. A glob that matches no file throws DataError naming it.
std::vector<std::string> expand_input_patterns(const std::vector<std::string>& args);

// Tokenizes the files as documents, in the given order:
//   - a plain text file (any other name) is one document; a file with NUL bytes is not text
//     and is skipped unless keep_binary; one with much invalid UTF-8 is kept with a note;
//   - a JSON Lines file (name ending .jsonl, or .jsonl.gz) holds one document per non-blank
//     line: an object with a string "text" field, or with string "prompt" and "completion"
//     fields (an instruction example: tokens encode(prompt) + encode(completion) + [eos], of
//     which only the completion and the eos count in the loss), or with a "messages" array of
//     {"role", "content"} (a conversation, rendered by the tokenizer folder's chat template,
//     data/tokenizer/chat_template.h: only its assistant turns count, and no eos follows it).
//     Other fields are ignored. A bad
//     line throws DataError naming file:line and what is wrong;
//   - a name ending .gz is read through zlib, the name without .gz deciding the kind.
// Each document is followed by the tokenizer's end-of-text token (eos_id); the byte tokenizer
// has none, so its documents are concatenated with nothing in between. Documents are tokenized
// on options.threads threads; the output is the same at any thread count. When any example is
// a prompt/completion pair, every shard gets a loss mask (text documents all 1s).
// With options.pack_seq_len, the samples (documents, examples, conversations) are packed whole
// into windows (data/packing.h) after the last round(val_fraction) of them (by tokens) is set
// aside for validation, each split packed on its own; every shard then holds whole windows, and
// meta.json records "packing" (the window, what was split, the padding). Needs a tokenizer with
// an end-of-text token, which ends the samples and pads the windows.
// The output is reused when out_dir was prepared from the same parameters, inputs (the same
// paths, sizes and CRC-32 of their contents) and tokenizer files.
PreparedData prepare_text(const std::vector<std::string>& files, const PrepareOptions& options);

// The most tokens prepare_synthetic makes: its text is generated in memory, a byte per token.
inline constexpr int64_t kMaxSyntheticTokens = 1'000'000'000;

// num_tokens characters of MarkovCorpus(seed) as byte tokens; num_tokens in [2, kMaxSyntheticTokens].
PreparedData prepare_synthetic(int64_t num_tokens, uint64_t seed, const PrepareOptions& options);

}  // namespace feast
