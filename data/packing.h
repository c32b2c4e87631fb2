// `prepare-data --pack`: whole samples placed into windows of seq_len + 1 tokens by first-fit
// decreasing, so that no window cuts a sample that fits one, with the room left at a window's
// end padded by end-of-text tokens that do not count in the loss. Trained with
// data.document_mask, a packed window computes exactly what each of its samples alone would.
// Internal to data/ (prepare.cpp); first_fit_decreasing is public for its tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "data/shard_stream.h"

namespace feast::prepare_data {

// Items of `lengths` (each in [1, capacity]) placed by first-fit decreasing: the longest first
// (the earlier on a tie), each into the first window with room for it, a new window when none
// has. Returns each window's item indices in the order they were placed. O(n log n).
std::vector<std::vector<size_t>> first_fit_decreasing(const std::vector<int64_t>& lengths, int64_t capacity);

// What packing one split made.
struct PackedSplit {
  int64_t windows = 0;
  int64_t documents = 0;         // samples packed (before splitting)
  int64_t split_documents = 0;   // samples longer than a window, cut into pieces
  int64_t pieces = 0;            // the pieces those became
  int64_t padding_tokens = 0;
};

// Collects the tokenized samples in memory (4 bytes per token and a mask byte), then packs each
// split's samples on its own into windows written to a ShardStream.
class DocumentPacker final : public DocumentSink {
 public:
  explicit DocumentPacker(int64_t window) : window_(window) {}

  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  // One sample: its tokens and, when not every token counts in the loss, a mask entry per token.
  void append(std::span<const int32_t> tokens, std::span<const uint8_t> counted = {}) override;
  size_t documents() const { return starts_.size(); }

  // Packs samples [first, last) into windows appended to `stream`, each padded to the window
  // with `pad` (mask 0). A sample longer than the window is cut into pieces of the window (the
  // last shorter), each placed as a sample of its own. Appends to `starts` a byte per token
  // written: 1 where a sample, a piece or the padding begins (the data's document starts).
  PackedSplit write(ShardStream& stream, size_t first, size_t last, int32_t pad, std::vector<uint8_t>& starts) const;

 private:
  int64_t window_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> counted_;
  std::vector<int64_t> starts_;  // each sample's first token
};

}  // namespace feast::prepare_data
