// Where a stage's parameter gradients accumulate during backward. The stage asks for the
// destination of one contiguous range of its flat buffer (a layer, the final norm, an
// embedding) just before it writes that range's gradients and releases it right after, so a
// ZeRO-2 sink can reduce-scatter each range as soon as backward has produced it and keep only a
// few ranges in memory; the plain sink hands out views of one full gradient buffer.
#pragma once

#include <cstddef>

namespace feast {

// A contiguous range [begin, end) of a stage's flat parameter/gradient buffer.
struct FlatRange {
  size_t begin = 0, end = 0;
};

class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // Memory for the gradients of flat range [begin, end): the stage adds (+=) into it.
  virtual float* acquire(size_t begin, size_t end) = 0;
  // The stage has written all of [begin, end) for the current micro-batch.
  virtual void release(size_t begin, size_t end) = 0;
};

// Every gradient in one full-size flat buffer (ZeRO 0 and 1, and single-rank training).
class FlatGradientSink final : public GradientSink {
 public:
  explicit FlatGradientSink(float* grads) : grads_(grads) {}
  float* acquire(size_t begin, size_t) override { return grads_ + begin; }
  void release(size_t, size_t) override {}

 private:
  float* grads_;
};

}  // namespace feast
