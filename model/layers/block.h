// One pre-norm transformer block on this rank: x + attention(norm_1(x)), then + mlp(norm_2(.)),
// keeping both residual-stream outputs per activation slot. Under activation recomputation
// (model/layers/activation_memory.h) it keeps less and recomputes the rest at the start of its
// backward: selective, the attention core and the MLP activation; full, everything but its
// output, from its input (the previous block's output), which costs one more forward of the
// block, with its tensor-parallel all-reduce. Under sequence parallelism its input, norms,
// residual sums and output hold this rank's N/tp rows (model/tensor_parallel.h); the attention
// and MLP between them work on all N. region_rows: the rows such a region holds for the largest
// micro-batch. A mixture-of-experts block (model.moe) has a MoeMlp where the others have the
// dense Mlp; it keeps everything its backward reads whatever the recomputation. Legend: N rows,
// C channels.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/attention.h"
#include "model/layers/mlp.h"
#include "model/layers/moe.h"
#include "model/layers/norm.h"

namespace feast {

class DecoderBlock {
 public:
  DecoderBlock(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer, int tp,
               size_t region_rows, int max_batch, int max_seq, ActivationMemory& memory, Recompute recompute,
               const TensorView& cos, const TensorView& sin, bool ring_attention, MoeRecorder* moe = nullptr,
               int moe_layer = 0);

  // output(slot) (N, C) = the block applied to x (N, C) (each this rank's N/tp rows under
  // sequence parallelism).
  void forward(const LayerContext& ctx, int slot, const TensorView& x, int B, int T);
  // On entry scratch.dres holds d loss / d output(slot); on exit d loss / d x. x is the
  // forward's input.
  void backward(const LayerContext& ctx, int slot, const TensorView& x, int B, int T, GradientSink& sink);

  // The halves of backward (a split backward, no recomputation): on entry scratch.dres holds
  // d loss / d output(slot), on exit d loss / d x; later the parameter gradients, in backward's
  // order, from the output gradients the first half kept.
  void backward_input(const LayerContext& ctx, int slot, const TensorView& x, int B, int T);
  void backward_weight(const LayerContext& ctx, int slot, const TensorView& x, int B, int T, GradientSink& sink);

  const TensorView& output(int slot) const { return res3_[size_t(slot)]; }
  // The ranges of its gradients in flat-buffer order: ln_1, qkv, proj, ln_2, fc, mlp proj.
  std::vector<FlatRange> grad_ranges() const;

 private:
  // What the backward needs that the forward did not keep.
  void recompute_for_backward(const LayerContext& ctx, int slot, const TensorView& x, int B, int T);

  int C_;
  Recompute recompute_;
  Norm ln1_;
  SelfAttention attn_;
  Norm ln2_;
  std::unique_ptr<Mlp> mlp_;     // a dense block's
  std::unique_ptr<MoeMlp> moe_;  // a mixture-of-experts block's
  std::vector<TensorView> res2_, res3_;  // per slot (N, C): after attention, after the MLP
  // Per slot (N, C), a split backward only: the residual gradient at the MLP's output and at the
  // attention's, which the weight pass reads again.
  std::vector<TensorView> dmlp_out_, dattn_out_;
};

}  // namespace feast
