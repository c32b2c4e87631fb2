// Which token windows make up a batch. Invariant: the data of training step s is a function of
// (seed, s) alone, never of the run's history or of how the batch is split over ranks, so a
// resumed or re-sharded run sees exactly the same sequences. With loss masks, a target whose
// mask entry is 0 reads -1 (Hugging Face's -100 role): cross-entropy skips it, and the loss is
// normalised by the global count of counted targets (counted_targets). With document masks
// (document_eos >= 0) a target whose input is that end-of-text token (the next document's first
// token, which no document predicts on its own) reads -1 too; packed data's recorded document
// starts (Dataset::document_starts) take the end-of-text token's place there, since a chat
// template may end every turn with it. Packed data (Dataset::packed_window) is read in its whole
// windows only, so no window cuts a sample.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace feast {

// Random windows for training. Every position p with p + T + 1 <= shard length is a valid start
// (a shard of L tokens has L - T of them); of packed data, every multiple of its window. The
// starts of all shards form one flat index space.
class TrainSampler {
 public:
  // Throws DataError naming the pattern, seq_len and the longest shard when no shard holds
  // seq_len + 1 tokens, and when packed data's window is not seq_len + 1. Keeps a reference to
  // dataset.
  TrainSampler(const Dataset& dataset, uint64_t seed, int seq_len, int32_t document_eos = -1);

  // Fills rows j = first_sequence .. first_sequence + count - 1 of step `step`'s global batch:
  // inputs and targets are (count, T) row-major; targets are the inputs shifted by one token.
  // Row j's start is uniform_index(seed, hash_combine(step, tag), j, num_starts()), so a rank
  // can fill its slice alone and get the rows the full batch would have. When the dataset has
  // loss masks, target i of the window starting at p is -1 where the mask of token p + 1 + i
  // is 0. positions (count, T), when given under document masks: each token's place in its
  // document (what the model's attention and positions read).
  void fill(int64_t step, int64_t first_sequence, int count, int32_t* inputs, int32_t* targets,
            int32_t* positions = nullptr) const;

  // How many targets of those rows count in the loss (are not -1): count * T without masks.
  // Reads only mask bytes (and, with document masks, the recorded document starts, or without
  // them the row's tokens), so every rank can count
  // a whole global step (the loss's denominator) for the cost of a window per row.
  int64_t counted_targets(int64_t step, int64_t first_sequence, int count) const;

  int64_t num_starts() const { return num_starts_; }
  int seq_len() const { return seq_len_; }

 private:
  // (shard, start) of row j of `step`.
  std::pair<size_t, int64_t> window(int64_t step, int64_t j) const;

  const Dataset& dataset_;
  uint64_t seed_;
  int seq_len_;
  int32_t document_eos_;
  int64_t stride_;  // between consecutive starts: 1, or packed data's window
  std::vector<int64_t> first_start_;  // (num_shards + 1) prefix sums of valid starts
  int64_t num_starts_ = 0;
};

// Fixed validation windows: window k covers tokens [k T, k T + T] of its shard (of packed data:
// its k-th packed window), so consecutive windows predict disjoint targets. Windows are numbered across the split and wrap around when
// it is exhausted. A validation batch of G sequences (the global batch) holds windows b*G ..
// b*G + G - 1, its rows dealt to the ranks like a training batch's, so every evaluation scores
// the same tokens at any layout and val_loss is comparable across a run and across layouts.
class ValSampler {
 public:
  // Throws DataError (like TrainSampler) when no shard holds seq_len + 1 tokens.
  ValSampler(const Dataset& dataset, int seq_len, int32_t document_eos = -1);

  // Windows first_window .. first_window + count - 1 into inputs, targets: (count, T) row-major.
  // Masked targets read -1, and positions are filled, as in TrainSampler::fill.
  void fill(int64_t first_window, int count, int32_t* inputs, int32_t* targets, int32_t* positions = nullptr) const;

  // How many targets of those windows count in the loss: count * T without masks.
  int64_t counted_targets(int64_t first_window, int count) const;

  int64_t num_windows() const { return num_windows_; }
  int seq_len() const { return seq_len_; }

 private:
  // (shard, start) of window number `window` (wrapped).
  std::pair<size_t, int64_t> window(int64_t window) const;

  const Dataset& dataset_;
  int seq_len_;
  int32_t document_eos_;
  int64_t stride_;  // between consecutive windows: seq_len, or packed data's window
  std::vector<int64_t> first_window_;  // (num_shards + 1) prefix sums of windows per shard
  int64_t num_windows_ = 0;
};

}  // namespace feast
