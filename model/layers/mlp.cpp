#include "model/layers/mlp.h"

namespace feast {

Mlp::Mlp(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer, int tp, size_t rows,
         ActivationMemory& memory, Recompute recompute, const std::string& name, int width)
    : kind_(arch.mlp),
      width_(width / tp),
      fc_width_(arch.mlp == MlpKind::kSwiGlu ? 2 * width_ : width_),
      fc_(params, layer, name + ".fc", arch.linear_bias, config.n_embd, fc_width_),
      proj_(params, layer, name + ".proj", arch.linear_bias, width_, config.n_embd),
      pre_(memory.take(recompute != Recompute::kFull, memory.dtype(), rows * size_t(fc_width_))),
      act_(memory.take(recompute == Recompute::kNone, memory.dtype(), rows * size_t(width_))),
      dpre_(memory.take_output_grads(memory.dtype(), rows * size_t(fc_width_))) {}

std::vector<FlatRange> Mlp::grad_ranges() const {
  std::vector<FlatRange> out = fc_.grad_ranges();
  for (const FlatRange& r : proj_.grad_ranges()) out.push_back(r);
  return out;
}

void Mlp::forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int N) {
  forward_to_activation(ctx, slot, x, N);
  proj_.forward(ctx, out, act_[size_t(slot)], N);
}

void Mlp::forward_to_activation(const LayerContext& ctx, int slot, const TensorView& x, int N) {
  const size_t s = size_t(slot);
  if (kind_ == MlpKind::kGelu) {
    fc_.forward_gelu(ctx, pre_[s], act_[s], x, N);
  } else {
    fc_.forward(ctx, pre_[s], x, N);
    ctx.backend.swiglu_forward(act_[s], pre_[s], N, width_);
  }
}

void Mlp::recompute_activation(const LayerContext& ctx, int slot, int N) {
  const size_t s = size_t(slot);
  // The CPU's fused fc + GELU is the product then this same element-wise GELU, so the
  // recomputed activation is the forward's to the bit.
  if (kind_ == MlpKind::kGelu)
    ctx.backend.gelu_forward(act_[s], pre_[s], size_t(N) * size_t(width_));
  else
    ctx.backend.swiglu_forward(act_[s], pre_[s], N, width_);
}

void Mlp::backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx,
                   const TensorView& x, int N, GradientSink& sink) {
  const size_t s = size_t(slot);
  const StageScratch& sc = ctx.scratch;
  if (kind_ == MlpKind::kGelu) {
    // GELU's gradient is element-wise: d activation becomes d pre-activation in place.
    proj_.backward(ctx, sc.dbig, dout, act_[s], N, sink);
    ctx.backend.gelu_backward(sc.dbig, pre_[s], sc.dbig, size_t(N) * size_t(width_));
  } else {
    proj_.backward(ctx, sc.dact, dout, act_[s], N, sink);
    ctx.backend.swiglu_backward(sc.dbig, pre_[s], sc.dact, N, width_);
  }
  fc_.backward(ctx, dx, sc.dbig, x, N, sink);
}

void Mlp::backward_input(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, int N) {
  const size_t s = size_t(slot);
  const StageScratch& sc = ctx.scratch;
  if (kind_ == MlpKind::kGelu) {
    proj_.backward_input(ctx, sc.dbig, dout, N);
    ctx.backend.gelu_backward(dpre_[s], pre_[s], sc.dbig, size_t(N) * size_t(width_));
  } else {
    proj_.backward_input(ctx, sc.dact, dout, N);
    ctx.backend.swiglu_backward(dpre_[s], pre_[s], sc.dact, N, width_);
  }
  fc_.backward_input(ctx, dx, dpre_[s], N);
}

void Mlp::backward_weight(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& x, int N,
                          GradientSink& sink) {
  const size_t s = size_t(slot);
  proj_.backward_weight(ctx, dout, act_[s], N, sink);
  fc_.backward_weight(ctx, dpre_[s], x, N, sink);
}

}  // namespace feast
