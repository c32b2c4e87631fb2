#include "model/kv_cache_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "core/error.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/swiglu.h"
#include "model/rope.h"
#include "backend/scalar_math.h"

namespace feast {

KvCacheDecoder::KvCacheDecoder(const ModelConfig& config, const WeightSource& weights, int max_positions)
    : config_(config), arch_(decoder_arch(config)), table_(decoder_param_table(config)) {
  FEAST_CHECK(config.n_head % config.kv_heads() == 0, "model.n_head = " << config.n_head
                                                                         << " is not a multiple of model.n_kv_head = "
                                                                         << config.kv_heads());
  params_.assign(table_.total_numel(), 0.0f);
  for (const ParamSpec& s : table_.specs())
    if (s.tied_to < 0) weights(s.name, std::span<const int64_t>(s.shape), params_.data() + s.offset);

  // A name the family lacks resolves to null (a missing bias); the table decides which exist.
  auto find = [&](const std::string& name) -> const float* {
    for (const ParamSpec& s : table_.specs())
      if (s.name == name) return params_.data() + s.offset;
    return nullptr;
  };
  auto norm_of = [&](const std::string& prefix) { return Norm{find(prefix + ".weight"), find(prefix + ".bias")}; };
  wte_ = find("wte.weight");
  wpe_ = find("wpe.weight");
  lm_head_ = find("lm_head.weight");  // a tied head's offset is wte's
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.ln_1 = norm_of(p + "ln_1");
    L.ln_2 = norm_of(p + "ln_2");
    L.qkv_w = find(p + "attn.qkv.weight");
    L.qkv_b = find(p + "attn.qkv.bias");
    L.proj_w = find(p + "attn.proj.weight");
    L.proj_b = find(p + "attn.proj.bias");
    L.fc_w = find(p + "mlp.fc.weight");
    L.fc_b = find(p + "mlp.fc.bias");
    L.out_w = find(p + "mlp.proj.weight");
    L.out_b = find(p + "mlp.proj.bias");
    if (config.moe.is_moe_layer(l)) {
      L.router = find(p + "mlp.router.weight");
      for (int e = 0; e < config.moe.n_experts; ++e) {
        L.expert_fc.push_back(find(p + "mlp.experts." + std::to_string(e) + ".fc.weight"));
        L.expert_proj.push_back(find(p + "mlp.experts." + std::to_string(e) + ".proj.weight"));
      }
      L.shared_fc = find(p + "mlp.shared.fc.weight");
      L.shared_proj = find(p + "mlp.shared.proj.weight");
      L.shared_gate = find(p + "mlp.shared_gate.weight");
    }
    layers_.push_back(L);
  }
  ln_f_ = norm_of("ln_f");

  if (!arch_.learned_positions) rope_tables(config, cos_, sin_);
  capacity_ = max_positions > 0 ? std::min(max_positions, config.max_seq_len) : config.max_seq_len;
  const size_t cache = size_t(config.n_layer) * size_t(capacity_) * size_t(config.kv_heads()) *
                       size_t(config.head_dim());
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

void KvCacheDecoder::linear(float* out, const float* inp, const float* w, const float* b, int n, int K,
                            int OC) const {
  if (n > 1) {
    cpu::matmul_forward(out, inp, w, b, n, K, OC);
    return;
  }
  // One token: a matrix-vector product (OpenBLAS 0.3.21's sgemm does not route M = 1 to gemv).
  if (b) std::copy_n(b, OC, out);
  cpu::gemv(OC, K, 1.0f, w, K, inp, b ? 1.0f : 0.0f, out);
}

void KvCacheDecoder::norm(float* out, const float* inp, const Norm& w, int n) {
  const int C = config_.n_embd;
  const float eps = float(config_.norm_eps);
  if (arch_.norm == NormKind::kLayerNorm)
    cpu::layernorm_forward(out, stats_.data(), stats_.data() + n, inp, w.weight, w.bias, n, C, eps);
  else
    cpu::rmsnorm_forward(out, stats_.data(), inp, w.weight, n, C, eps);
}

void KvCacheDecoder::attend(float* y, const float* qkv, int layer, int n) {
  const int NH = config_.n_head, NKV = config_.kv_heads(), hs = config_.head_dim();
  const int W = (NH + 2 * NKV) * hs, KW = NKV * hs, C = NH * hs, group = NH / NKV, P = pos_ + n;
  const float scale = 1.0f / std::sqrt(float(hs));
  const size_t layer_off = size_t(layer) * size_t(capacity_) * size_t(KW);
  const float* keys = k_cache_.data() + layer_off;
  const float* values = v_cache_.data() + layer_off;
  scores_.resize(size_t(NH) * size_t(n) * size_t(P));
  // One query head per iteration, as the training forward: OpenBLAS runs single-threaded inside
  // the parallel region, so the heads' GEMMs run side by side.
#pragma omp parallel for schedule(static)
  for (int h = 0; h < NH; ++h) {
    const int g = h / group;  // grouped-query attention: the kv head this query head reads
    const float* k = keys + g * hs;      // (P, hs), row stride KW
    const float* v = values + g * hs;    // (P, hs), row stride KW
    float* s = scores_.data() + size_t(h) * size_t(n) * size_t(P);  // (n, P)
    cpu::gemm(false, true, n, P, hs, scale, qkv + h * hs, W, k, KW, 0.0f, s, P);
    for (int i = 0; i < n; ++i) {
      // New query i sits at position pos_ + i: it sees the cache and the new tokens up to itself.
      float* row = s + size_t(i) * size_t(P);
      const int last = pos_ + i;
      float mx = row[0];
      for (int j = 1; j <= last; ++j) mx = row[j] > mx ? row[j] : mx;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= last; ++j) {
        row[j] = fast_exp(row[j] - mx);
        sum += row[j];
      }
      const float inv = 1.0f / sum;
      for (int j = 0; j <= last; ++j) row[j] *= inv;
      for (int j = last + 1; j < P; ++j) row[j] = 0.0f;  // causal mask
    }
    cpu::gemm(false, false, n, hs, P, 1.0f, s, P, v, KW, 0.0f, y + h * hs, C);
  }
}

std::vector<float> KvCacheDecoder::forward(std::span<const int32_t> tokens) {
  const ModelConfig& c = config_;
  if (tokens.empty()) throw Error("KvCacheDecoder::forward: no tokens given; pass at least one");
  const int n = int(tokens.size());
  if (int64_t{pos_} + n > capacity_)
    throw Error("generation context of " + std::to_string(int64_t{pos_} + n) + " tokens (" + std::to_string(pos_) +
                " cached + " + std::to_string(n) + " new) exceeds " +
                (capacity_ == c.max_seq_len ? "model.max_seq_len = " + std::to_string(c.max_seq_len)
                                            : "the cache of " + std::to_string(capacity_) + " positions") +
                ": shorten the prompt or generate fewer tokens");
  for (int i = 0; i < n; ++i)
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= c.vocab_size)
      throw Error("token " + std::to_string(tokens[size_t(i)]) + " at prompt index " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab_size) +
                  "): the tokenizer does not match the model");

  const int C = c.n_embd, NH = c.n_head, NKV = c.kv_heads(), hs = c.head_dim(), I = c.mlp_width();
  const int W = (NH + 2 * NKV) * hs, KW = NKV * hs;
  const bool swiglu = arch_.mlp == MlpKind::kSwiGlu;
  const int fc_width = swiglu ? 2 * I : I;
  const size_t N = size_t(n);
  x_.resize(N * size_t(C));
  ln_.resize(N * size_t(C));
  tmp_.resize(N * size_t(C));
  qkv_.resize(N * size_t(W));
  y_.resize(N * size_t(NH * hs));
  fc_.resize(N * size_t(fc_width));
  act_.resize(N * size_t(I));
  stats_.resize(2 * N);

  // Token (+ learned position) embedding, in encoder_forward's order.
  for (size_t i = 0; i < N; ++i) {
    float* o = x_.data() + i * size_t(C);
    std::copy_n(wte_ + size_t(tokens[i]) * size_t(C), C, o);
    if (wpe_) {
      const float* p = wpe_ + (size_t(pos_) + i) * size_t(C);
      for (int k = 0; k < C; ++k) o[k] += p[k];
    }
  }

  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[size_t(l)];
    norm(ln_.data(), x_.data(), L.ln_1, n);
    linear(qkv_.data(), ln_.data(), L.qkv_w, L.qkv_b, n, C, W);
    if (!cos_.empty()) {  // rotate the new q and k heads by their absolute positions
      const size_t off = size_t(pos_) * size_t(hs / 2);
      cpu::rope_forward(qkv_.data(), cos_.data() + off, sin_.data() + off, 1, n, NH, NKV, hs);
    }
    const size_t layer_off = size_t(l) * size_t(capacity_) * size_t(KW);
    for (size_t i = 0; i < N; ++i) {
      const float* row = qkv_.data() + i * size_t(W);
      const size_t at = layer_off + (size_t(pos_) + i) * size_t(KW);
      std::copy_n(row + NH * hs, KW, k_cache_.data() + at);
      std::copy_n(row + NH * hs + KW, KW, v_cache_.data() + at);
    }
    attend(y_.data(), qkv_.data(), l, n);
    linear(tmp_.data(), y_.data(), L.proj_w, L.proj_b, n, NH * hs, C);
    for (size_t k = 0; k < N * size_t(C); ++k) x_[k] += tmp_[k];
    norm(ln_.data(), x_.data(), L.ln_2, n);
    if (L.router) {
      moe(tmp_.data(), ln_.data(), L, n);
      for (size_t k = 0; k < N * size_t(C); ++k) x_[k] += tmp_[k];
      continue;
    }
    linear(fc_.data(), ln_.data(), L.fc_w, L.fc_b, n, C, fc_width);
    if (swiglu)
      cpu::swiglu_forward(act_.data(), fc_.data(), n, I);
    else
      cpu::gelu_forward(act_.data(), fc_.data(), N * size_t(I));
    linear(tmp_.data(), act_.data(), L.out_w, L.out_b, n, I, C);
    for (size_t k = 0; k < N * size_t(C); ++k) x_[k] += tmp_[k];
  }
  pos_ += n;

  // Only the last position's logits are wanted: the final norm and the head on one row, over the
  // real vocabulary rows (padding rows are never valid outputs).
  const float* last = x_.data() + (N - 1) * size_t(C);
  norm(ln_.data(), last, ln_f_, 1);
  std::vector<float> logits(size_t(c.vocab_size));
  linear(logits.data(), ln_.data(), lm_head_, nullptr, 1, C, c.vocab_size);
  return logits;
}

void KvCacheDecoder::moe(float* out, const float* inp, const Layer& L, int n) {
  const ModelConfig& c = config_;
  const int C = c.n_embd, E = c.moe.n_experts, k = c.moe.top_k, Ie = c.expert_width(), Is = c.shared_expert_width();
  const size_t experts = static_cast<size_t>(E), choices = static_cast<size_t>(k), widest = static_cast<size_t>(std::max(Ie, Is));
  std::vector<float> logits(experts), probs(experts), weight(choices), prob_sum(experts), y(static_cast<size_t>(C));
  std::vector<float> fc(2 * widest), act(widest);
  float lse = 0;
  std::vector<int32_t> expert(choices);
  // One SwiGLU MLP of width I on row x, added to o scaled by s.
  auto swiglu_mlp = [&](float* o, const float* x, const float* fc_w, const float* proj_w, int I, float s) {
    linear(fc.data(), x, fc_w, nullptr, 1, C, 2 * I);
    cpu::swiglu_forward(act.data(), fc.data(), 1, I);
    linear(y.data(), act.data(), proj_w, nullptr, 1, I, C);
    for (int i = 0; i < C; ++i) o[i] += s * y[size_t(i)];
  };
  for (int r = 0; r < n; ++r) {
    const float* x = inp + size_t(r) * size_t(C);
    float* o = out + size_t(r) * size_t(C);
    std::fill(o, o + C, 0.0f);
    linear(logits.data(), x, L.router, nullptr, 1, C, E);
    cpu::moe_route(probs.data(), &lse, expert.data(), weight.data(), prob_sum.data(), logits.data(), 1, E, k,
                   c.moe.norm_topk_prob);
    for (int j = 0; j < k; ++j)
      swiglu_mlp(o, x, L.expert_fc[size_t(expert[size_t(j)])], L.expert_proj[size_t(expert[size_t(j)])], Ie,
                 weight[size_t(j)]);
    if (!L.shared_fc) continue;
    float gate = 1.0f;
    if (L.shared_gate) {
      float g = 0;
      linear(&g, x, L.shared_gate, nullptr, 1, C, 1);
      cpu::moe_shared_gate(&gate, &g, 1);
    }
    swiglu_mlp(o, x, L.shared_fc, L.shared_proj, Is, gate);
  }
}

}  // namespace feast
