#include "model/layers/attention.h"

namespace feast {

SelfAttention::SelfAttention(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer,
                             int tp, int max_batch, int max_seq, ActivationMemory& memory, Recompute recompute, const TensorView& cos,
                             const TensorView& sin, bool ring_attention)
    : C_(config.n_embd),
      n_head_(config.n_head / tp),
      n_kv_head_(config.kv_heads() / tp),
      head_dim_(config.head_dim()),
      qkv_(params, layer, "attn.qkv", arch.qkv_bias, config.n_embd, (n_head_ + 2 * n_kv_head_) * head_dim_),
      proj_(params, layer, "attn.proj", arch.linear_bias, n_head_ * head_dim_, config.n_embd),
      cos_(cos),
      sin_(sin) {
  const AttentionShape max = shape(max_batch, max_seq);
  const bool keep_products = recompute != Recompute::kFull, keep_core = recompute == Recompute::kNone;
  qkv_out_ = memory.take(keep_products, memory.dtype(), max.rows() * size_t(max.qkv_width()));
  const size_t state = ring_attention ? max.head_rows()  // the log-sum-exp
                                      : memory.backend().attention_state_size(max);
  state_ = memory.take(keep_core, DType::kFloat32, state);
  y_ = memory.take(keep_core, memory.dtype(), max.rows() * size_t(max.out_width()));
  dqkv_ = memory.take_output_grads(memory.dtype(), max.rows() * size_t(max.qkv_width()));
}

std::vector<FlatRange> SelfAttention::grad_ranges() const {
  std::vector<FlatRange> out = qkv_.grad_ranges();
  for (const FlatRange& r : proj_.grad_ranges()) out.push_back(r);
  return out;
}

void SelfAttention::core_forward(const LayerContext& ctx, size_t s, const AttentionShape& sh) {
  if (ctx.cp.active())
    ctx.cp.attention_forward(ctx.backend, ctx.scratch.ring, y_[s], state_[s], qkv_out_[s], sh);
  else
    ctx.backend.attention_forward(y_[s], state_[s], qkv_out_[s], sh);
}

void SelfAttention::core_backward(const LayerContext& ctx, size_t s, const TensorView& dqkv,
                                  const AttentionShape& sh) {
  if (ctx.cp.active())
    ctx.cp.attention_backward(ctx.backend, ctx.scratch.ring, dqkv, ctx.scratch.dy, y_[s], state_[s], qkv_out_[s], sh);
  else
    ctx.backend.attention_backward(dqkv, ctx.scratch.dy, qkv_out_[s], y_[s], state_[s], ctx.scratch.attention_workspace,
                                   sh);
}

void SelfAttention::forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int B,
                            int T) {
  const size_t s = size_t(slot);
  const AttentionShape sh = shape(ctx, B, T);
  const int N = B * T;
  qkv_.forward(ctx, qkv_out_[s], x, N);
  if (cos_) ctx.backend.rope_forward(qkv_out_[s], cos_, sin_, sh);
  core_forward(ctx, s, sh);
  proj_.forward(ctx, out, y_[s], N);
}

void SelfAttention::recompute_core(const LayerContext& ctx, int slot, int B, int T) {
  core_forward(ctx, size_t(slot), shape(ctx, B, T));
}

void SelfAttention::backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx,
                             const TensorView& x, int B, int T, GradientSink& sink) {
  const size_t s = size_t(slot);
  const AttentionShape sh = shape(ctx, B, T);
  const int N = B * T;
  const StageScratch& sc = ctx.scratch;
  proj_.backward(ctx, sc.dy, dout, y_[s], N, sink);
  core_backward(ctx, s, sc.dqkv, sh);
  if (cos_) ctx.backend.rope_backward(sc.dqkv, cos_, sin_, sh);
  qkv_.backward(ctx, dx, sc.dqkv, x, N, sink);
}

void SelfAttention::backward_input(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx,
                                   int B, int T) {
  const size_t s = size_t(slot);
  const AttentionShape sh = shape(ctx, B, T);
  const int N = B * T;
  const StageScratch& sc = ctx.scratch;
  proj_.backward_input(ctx, sc.dy, dout, N);
  core_backward(ctx, s, dqkv_[s], sh);
  if (cos_) ctx.backend.rope_backward(dqkv_[s], cos_, sin_, sh);
  qkv_.backward_input(ctx, dx, dqkv_[s], N);
}

void SelfAttention::backward_weight(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& x,
                                    int B, int T, GradientSink& sink) {
  const size_t s = size_t(slot);
  const int N = B * T;
  proj_.backward_weight(ctx, dout, y_[s], N, sink);
  qkv_.backward_weight(ctx, dqkv_[s], x, N, sink);
}

}  // namespace feast
