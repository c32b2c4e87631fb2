// Causal self-attention of one block on this rank: the fused QKV projection (column-parallel:
// this rank's query heads and key/value heads), rotary embeddings when the family uses them,
// the attention core (grouped-query when there are fewer key/value heads than query heads) and
// the output projection (row-parallel, its partial outputs summed over the tensor-parallel
// group). Legend: N = B*T rows, C channels, NHl / NKVl this rank's query / key-value heads,
// hs head size, Wl = (NHl + 2 NKVl) hs, Cq = NHl hs.
// It keeps the QKV output (after the rotary embedding), the core's state and its output y per
// slot; under selective recomputation the core's state and y are recomputed from the QKV
// output (recompute_core), under full recomputation the block reruns the whole forward.
#pragma once

#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/layers/activation_memory.h"
#include "model/layers/linear.h"

namespace feast {

class SelfAttention {
 public:
  // cos and sin: the rotary tables (maxT, hs/2), empty views for learned positions.
  // ring_attention: the core runs as context parallelism's ring (model/context_parallel.h),
  // keeping each row's log-sum-exp as its state.
  SelfAttention(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer, int tp,
                int max_batch, int max_seq, ActivationMemory& memory,
                Recompute recompute, const TensorView& cos, const TensorView& sin, bool ring_attention);

  // out (N, C) = attention(x) summed over the tensor-parallel group.
  void forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int B, int T);
  // The core's state and y of `slot` again from its QKV output (selective recomputation).
  void recompute_core(const LayerContext& ctx, int slot, int B, int T);
  // dx (N, C) = d loss / d x (summed over the group) from dout (N, C); adds parameter gradients.
  void backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, const TensorView& x,
                int B, int T, GradientSink& sink);

  // The halves of backward (a split backward): dx from dout, keeping the QKV output's gradient;
  // later the parameter gradients, from the same dout (the caller keeps it) and that gradient.
  void backward_input(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, int B, int T);
  void backward_weight(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& x, int B, int T,
                       GradientSink& sink);

  std::vector<FlatRange> grad_ranges() const;
  AttentionShape shape(int B, int T) const { return {B, T, n_head_, n_kv_head_, head_dim_}; }
  // The shape of a call on a micro-batch: with its document positions under document masks.
  AttentionShape shape(const LayerContext& ctx, int B, int T) const {
    AttentionShape s = shape(B, T);
    if (ctx.positions) s.positions = ctx.positions.first(s.rows());
    return s;
  }

 private:
  // The core: y and state of `slot` from its QKV output; its input gradient into dqkv.
  void core_forward(const LayerContext& ctx, size_t slot, const AttentionShape& sh);
  void core_backward(const LayerContext& ctx, size_t slot, const TensorView& dqkv, const AttentionShape& sh);

  int C_, n_head_, n_kv_head_, head_dim_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  TensorView cos_, sin_;
  std::vector<TensorView> qkv_out_, state_, y_;  // per slot: (N, Wl), backend's attention state, (N, Cq)
  std::vector<TensorView> dqkv_;                 // per slot (N, Wl), a split backward only
};

}  // namespace feast
