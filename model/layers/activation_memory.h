// Where a stage's layers keep the activations their backward reads, and what activation
// recomputation leaves out of them. Without recomputation every saved tensor has one buffer per
// activation slot (micro-batch in flight). A buffer its block recomputes before the block's
// backward needs no slot of its own: the blocks of a stage that recompute share one set of such
// buffers (one block runs its backward at a time), allocated for the first block that asks and
// handed out again, in the same order, to the next; the blocks of a stage are alike, and a
// request that differs is a bug caught at construction. A stage whose backward is split in two
// (the zero-bubble schedule) also keeps, per slot, the output gradients its weight-gradient
// pass reads (take_output_grads). Legend: N rows.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace feast {

// training.recompute: what a block keeps of its forward for its backward.
enum class Recompute {
  kNone,       // everything
  kSelective,  // the matrix products' outputs and the norms; the attention core and the MLP
               // activation are recomputed (cheap in FLOPs, large: the CPU's attention state is T x T)
  kFull,       // only the block's output (the next block's input); the whole block is recomputed
};
Recompute recompute_from_name(const std::string& name);  // "none", "selective", "full"; throws otherwise
const char* recompute_name(Recompute r);

class ActivationMemory {
 public:
  // split_backward: the layers keep their output gradients for a later weight-gradient pass.
  ActivationMemory(Backend& backend, int slots, bool split_backward = false)
      : backend_(backend), slots_(slots), split_backward_(split_backward) {}
  ActivationMemory(const ActivationMemory&) = delete;
  ActivationMemory& operator=(const ActivationMemory&) = delete;

  // One view per slot of `numel` elements: distinct buffers when `saved`, otherwise the same
  // buffer of the recompute set for every slot.
  std::vector<TensorView> take(bool saved, DType dtype, size_t numel);
  // One saved view per slot of `numel` elements when the backward is split, none otherwise: an
  // output gradient kept from a layer's input-gradient pass to its weight-gradient pass.
  std::vector<TensorView> take_output_grads(DType dtype, size_t numel) {
    return split_backward_ ? take(true, dtype, numel) : std::vector<TensorView>{};
  }
  bool split_backward() const { return split_backward_; }
  // The next block's recomputed buffers start over from the first of the set.
  void begin_block() { cursor_ = 0; }

  Backend& backend() const { return backend_; }
  DType dtype() const { return backend_.compute_dtype(); }  // of activations in the products
  int slots() const { return slots_; }
  size_t saved_bytes() const { return saved_bytes_; }          // over all slots
  size_t recompute_bytes() const;                              // the shared set

 private:
  Backend& backend_;
  int slots_;
  bool split_backward_;
  std::vector<Tensor> saved_, recompute_;
  size_t saved_bytes_ = 0, cursor_ = 0;
};

}  // namespace feast
