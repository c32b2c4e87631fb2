// Turns a corpus into the on-disk layout the trainer reads: <out>/train_NNN.bin,
// <out>/val_NNN.bin and <out>/meta.json (tokenizer, vocabulary, token counts, the parameters
// used and, for synthetic data, the entropy floor). Re-running with the same parameters reuses
// the directory, so scripts can call it unconditionally.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace feast {

struct PrepareOptions {
  std::string out_dir;
  double val_fraction = 0.05;             // taken from the end of the token stream; in (0, 1)
  int64_t max_shard_tokens = 100'000'000;  // larger splits go to several shards (llm.c's size)
  bool force = false;                      // rewrite even if meta.json records these parameters
  bool keep_binary = false;                // tokenize inputs with NUL bytes too (not text-like)
};

struct PreparedData {
  std::vector<std::string> train_shards;  // full paths, in order
  std::vector<std::string> val_shards;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::optional<double> entropy_floor;    // nats/token; synthetic data only
  std::optional<double> unigram_entropy;  // nats/token; synthetic data only
  bool reused = false;                    // out_dir already held this; nothing was written
  // Text inputs: what was tokenized and what was left out, one line per file left out or
  // suspicious ("x.bin: skipped, not text: 1234 NUL bytes").
  int files_kept = 0, files_skipped = 0;
  std::vector<std::string> input_notes;
};

// The files' bytes, concatenated in the given order with nothing in between, as byte tokens.
// A file with NUL bytes is not text (an executable, an archive) and is skipped unless
// keep_binary; one with much invalid UTF-8 is kept with a note. The output is reused when out_dir was prepared from the
// same parameters and inputs: the same paths, sizes and CRC-32 of their contents.
PreparedData prepare_text(const std::vector<std::string>& files, const PrepareOptions& options);

// num_tokens characters of MarkovCorpus(seed) as byte tokens.
PreparedData prepare_synthetic(int64_t num_tokens, uint64_t seed, const PrepareOptions& options);

}  // namespace feast
