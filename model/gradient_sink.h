// Where a stage's parameter gradients accumulate during backward. The stage asks for the
// destination of one contiguous range of its flat buffer (a layer's op, the final norm, a chunk
// of an embedding) just before it writes that range's gradients and releases it right after, so
// a ZeRO-2 sink can reduce-scatter each range as soon as backward has produced it and keep only
// a few ranges in memory; the plain sink hands out views of one full gradient buffer.
// Gradients are float32 on the backend's device.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace feast {

// A contiguous range [begin, end) of a stage's flat parameter/gradient buffer.
struct FlatRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // Memory for the gradients of flat range [begin, end): the stage adds (+=) into it.
  virtual TensorView acquire(size_t begin, size_t end) = 0;
  // The stage has written all of [begin, end) for the current micro-batch.
  virtual void release(size_t begin, size_t end) = 0;
};

// Every gradient in one full-size flat buffer (single-rank training, benchmarks, tests).
class FlatGradientSink final : public GradientSink {
 public:
  explicit FlatGradientSink(const TensorView& grads) : grads_(grads) {}
  TensorView acquire(size_t begin, size_t end) override { return grads_.slice(begin, end - begin); }
  void release(size_t, size_t) override {}

 private:
  TensorView grads_;
};

}  // namespace feast
