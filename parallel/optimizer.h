// AdamW over the flat parameter and gradient buffers, with global gradient-norm clipping.
// It owns the optimizer state (both moments) for the range of the flat buffer it updates; today
// that is the whole buffer (one rank). ZeRO sharding narrows the range to the rank's shard and
// adds the gradient reduce-scatter and parameter all-gather around step().
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
  AdamW(const ParamTable& table, const AdamWConfig& config);

  // One update at step t (1-based: the bias corrections use it) with learning rate lr.
  // Returns the global gradient norm before clipping.
  double step(float* params, const float* grads, int64_t t, double lr);

  size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }

 private:
  // A contiguous range of the flat buffer that shares one weight-decay value.
  struct Run {
    size_t begin, end;
    float weight_decay;
  };
  AdamWConfig config_;
  size_t numel_;
  std::vector<Run> runs_;
  Buffer<float> m_, v_;
};

}  // namespace feast
