// AdamW over one contiguous range of a stage's flat buffer: the whole buffer (ZeRO 0) or this
// data-parallel rank's shard (ZeRO 1 and 2). It owns the two moments for that range only, so
// sharding divides optimizer memory by dp. Weight decay follows the parameter table (matrices
// only); clipping uses the global norm the caller computes across ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/parameters.h"

namespace feast {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to tensors the table marks for decay (matrices)
  double grad_clip = 1.0;     // max global gradient norm; 0 disables clipping
};

class AdamW {
 public:
  // Updates flat elements [begin, end) of a stage laid out by `table`.
  AdamW(const LocalTable& table, size_t begin, size_t end, const AdamWConfig& config);

  // One update at step t (1-based: the bias corrections use it) with learning rate lr, given
  // the global gradient norm (before clipping). params and grads point at element `begin`.
  void step(float* params, const float* grads, int64_t t, double lr, double grad_norm);

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }

 private:
  // A contiguous piece of the range that shares one weight-decay value.
  struct Run {
    size_t begin, end;  // relative to begin_
    float weight_decay;
  };
  AdamWConfig config_;
  size_t begin_, end_;
  std::vector<Run> runs_;
  Buffer<float> m_, v_;
};

// Sum of squared gradients over flat elements [begin, end) of tensors whose
// LocalParam::counts_in_norm is set, so that summing it over all ranks of the job counts every
// logical element once. grads points at element `begin`.
double counted_sum_of_squares(const LocalTable& table, const float* grads, size_t begin, size_t end);

// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6) when the norm exceeds it.
float clip_factor(double norm, double max_norm);

}  // namespace feast
