#include "model/layers/block.h"

#include <string>

#include "core/error.h"

namespace feast {

DecoderBlock::DecoderBlock(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer,
                           int tp, size_t region_rows, int max_batch, int max_seq, ActivationMemory& memory,
                           Recompute recompute, const TensorView& cos, const TensorView& sin, bool ring_attention,
                           MoeRecorder* moe, int moe_layer)
    : C_(config.n_embd),
      recompute_(recompute),
      ln1_(arch.norm, float(config.norm_eps), params.base, "layers." + std::to_string(layer) + ".ln_1", C_,
           region_rows, memory, recompute != Recompute::kFull),
      attn_(config, arch, params, layer, tp, max_batch, max_seq, memory, recompute, cos, sin, ring_attention),
      ln2_(arch.norm, float(config.norm_eps), params.base, "layers." + std::to_string(layer) + ".ln_2", C_,
           region_rows, memory, recompute != Recompute::kFull) {
  // The residual sums before the MLP: a stage's recomputed blocks share their buffers in the
  // order they ask, and an MoE block (which recomputes nothing of its MLP) asks for a prefix of
  // what a dense block asks for.
  const size_t NC = region_rows * size_t(C_);
  res2_ = memory.take(recompute != Recompute::kFull, memory.dtype(), NC);
  res3_ = memory.take(true, memory.dtype(), NC);
  const size_t rows = size_t(max_batch) * size_t(max_seq);
  if (config.moe.is_moe_layer(layer)) {
    FEAST_CHECK(moe, "layer " << layer << " is a mixture-of-experts block, built without a MoeRecorder");
    moe_ = std::make_unique<MoeMlp>(config, arch, params, layer, tp, rows, memory, *moe, moe_layer);
  } else {
    mlp_ = std::make_unique<Mlp>(config, arch, params, layer, tp, rows, memory, recompute, "mlp", config.mlp_width());
  }
  dmlp_out_ = memory.take_output_grads(memory.dtype(), NC);
  dattn_out_ = memory.take_output_grads(memory.dtype(), NC);
  FEAST_CHECK(!memory.split_backward() || recompute == Recompute::kNone,
              "a split backward reads what the forward kept, so its blocks recompute nothing");
}

void DecoderBlock::forward(const LayerContext& ctx, int slot, const TensorView& x, int B, int T) {
  const size_t s = size_t(slot);
  const int N = B * T, Nl = ctx.tp.local_rows(N);
  const size_t NC = size_t(Nl) * size_t(C_);
  const TensorView tmp = ctx.scratch.tmp;
  ln1_.forward(ctx, slot, x, Nl);
  attn_.forward(ctx, slot, ln1_.out(slot), tmp, B, T);
  ctx.backend.add(res2_[s], x, tmp, NC);
  ln2_.forward(ctx, slot, res2_[s], Nl);
  if (moe_)
    moe_->forward(ctx, slot, ln2_.out(slot), tmp, N);
  else
    mlp_->forward(ctx, slot, ln2_.out(slot), tmp, N);
  ctx.backend.add(res3_[s], res2_[s], tmp, NC);
}

void DecoderBlock::recompute_for_backward(const LayerContext& ctx, int slot, const TensorView& x, int B, int T) {
  const int N = B * T;
  if (recompute_ == Recompute::kSelective) {
    attn_.recompute_core(ctx, slot, B, T);
    if (mlp_) mlp_->recompute_activation(ctx, slot, N);
  } else if (recompute_ == Recompute::kFull) {
    // The forward up to the MLP's activation: the MLP's projection and the last residual sum
    // made only the output, which is kept. The same operations on the same inputs: the same bits.
    const int Nl = ctx.tp.local_rows(N);
    const size_t s = size_t(slot), NC = size_t(Nl) * size_t(C_);
    const TensorView tmp = ctx.scratch.tmp;
    ln1_.forward(ctx, slot, x, Nl);
    attn_.forward(ctx, slot, ln1_.out(slot), tmp, B, T);
    ctx.backend.add(res2_[s], x, tmp, NC);
    ln2_.forward(ctx, slot, res2_[s], Nl);
    if (mlp_) mlp_->forward_to_activation(ctx, slot, ln2_.out(slot), N);
  }
}

void DecoderBlock::backward(const LayerContext& ctx, int slot, const TensorView& x, int B, int T, GradientSink& sink) {
  const size_t s = size_t(slot);
  const int N = B * T, Nl = ctx.tp.local_rows(N);
  const StageScratch& sc = ctx.scratch;
  recompute_for_backward(ctx, slot, x, B, T);  // leaves dres alone; tmp is free until dnorm below
  // The residual gradient dres flows past each sub-block unchanged; the sub-block's input
  // gradient (through its norm, into tmp) is added to it by the norm's backward.
  const TensorView dnorm = sc.tmp;  // the forward's temporary is free during the backward
  if (moe_)
    moe_->backward(ctx, slot, sc.dres, dnorm, ln2_.out(slot), N, sink);
  else
    mlp_->backward(ctx, slot, sc.dres, dnorm, ln2_.out(slot), N, sink);
  ln2_.backward(ctx, slot, sc.dres, dnorm, res2_[s], Nl, sink);
  attn_.backward(ctx, slot, sc.dres, dnorm, ln1_.out(slot), B, T, sink);
  ln1_.backward(ctx, slot, sc.dres, dnorm, x, Nl, sink);
}

void DecoderBlock::backward_input(const LayerContext& ctx, int slot, const TensorView& x, int B, int T) {
  const size_t s = size_t(slot);
  const int N = B * T, Nl = ctx.tp.local_rows(N);
  const StageScratch& sc = ctx.scratch;
  const TensorView dnorm = sc.tmp;
  const size_t NC = size_t(Nl) * size_t(C_);
  ctx.backend.copy(dmlp_out_[s].first(NC), sc.dres.first(NC));
  FEAST_CHECK(mlp_, "a mixture-of-experts block has no split backward");
  mlp_->backward_input(ctx, slot, dmlp_out_[s], dnorm, N);
  ln2_.backward_input(ctx, slot, sc.dres, dnorm, res2_[s], Nl);
  ctx.backend.copy(dattn_out_[s].first(NC), sc.dres.first(NC));
  attn_.backward_input(ctx, slot, dattn_out_[s], dnorm, B, T);
  ln1_.backward_input(ctx, slot, sc.dres, dnorm, x, Nl);
}

void DecoderBlock::backward_weight(const LayerContext& ctx, int slot, const TensorView& x, int B, int T,
                                   GradientSink& sink) {
  const size_t s = size_t(slot);
  const int N = B * T, Nl = ctx.tp.local_rows(N);
  FEAST_CHECK(mlp_, "a mixture-of-experts block has no split backward");
  mlp_->backward_weight(ctx, slot, dmlp_out_[s], ln2_.out(slot), N, sink);
  ln2_.backward_weight(ctx, slot, res2_[s], Nl, sink);
  attn_.backward_weight(ctx, slot, dattn_out_[s], ln1_.out(slot), B, T, sink);
  ln1_.backward_weight(ctx, slot, x, Nl, sink);
}

std::vector<FlatRange> DecoderBlock::grad_ranges() const {
  std::vector<FlatRange> out = ln1_.grad_ranges();
  for (const FlatRange& r : attn_.grad_ranges()) out.push_back(r);
  for (const FlatRange& r : ln2_.grad_ranges()) out.push_back(r);
  for (const FlatRange& r : moe_ ? moe_->grad_ranges() : mlp_->grad_ranges()) out.push_back(r);
  return out;
}

}  // namespace feast
