#include "model/gpt2.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/cpu/attention.h"
#include "model/cpu/cross_entropy.h"
#include "model/cpu/encoder.h"
#include "model/cpu/gelu.h"
#include "model/cpu/layernorm.h"
#include "model/cpu/matmul.h"
#include "model/cpu/residual.h"

namespace feast {

GPT2::GPT2(const ModelConfig& config, int max_batch, int max_seq)
    : config_(config), table_(gpt2_param_table(config)), max_batch_(max_batch), max_seq_(max_seq) {
  FEAST_CHECK(config.n_embd % config.n_head == 0, "model.n_embd must be divisible by model.n_head");
  FEAST_CHECK(max_seq <= config.max_seq_len, "sequence length " << max_seq << " exceeds model.max_seq_len "
                                                                << config.max_seq_len);
  params_ = Buffer<float>(table_.total_numel());
  grads_ = Buffer<float>(table_.total_numel());

  const size_t BT = size_t(max_batch) * max_seq, C = config.n_embd, NH = config.n_head;
  const size_t Vp = config.padded_vocab(), L = config.n_layer;
  const size_t per_layer = BT * (C + 2 + 3 * C + C + C + 2 + 4 * C + 4 * C + C + C) +
                           size_t(max_batch) * NH * max_seq * max_seq;
  acts_ = Buffer<float>(BT * C + L * per_layer + BT * (C + 2) + BT * Vp + BT);
  float* p = acts_.data();
  auto take = [&p](size_t n) {
    float* view = p;
    p += n;
    return view;
  };
  encoded_ = take(BT * C);
  layers_.resize(L);
  for (LayerActs& a : layers_) {
    a.ln1 = take(BT * C);
    a.ln1_mean = take(BT);
    a.ln1_rstd = take(BT);
    a.qkv = take(BT * 3 * C);
    a.atty = take(BT * C);
    a.att = take(size_t(max_batch) * NH * max_seq * max_seq);
    a.res2 = take(BT * C);
    a.ln2 = take(BT * C);
    a.ln2_mean = take(BT);
    a.ln2_rstd = take(BT);
    a.fch = take(BT * 4 * C);
    a.fch_gelu = take(BT * 4 * C);
    a.res3 = take(BT * C);
  }
  lnf_ = take(BT * C);
  lnf_mean_ = take(BT);
  lnf_rstd_ = take(BT);
  logits_ = take(BT * Vp);
  losses_ = take(BT);

  const size_t att_scratch = static_cast<size_t>(cpu::attention_scratch_size(max_seq));
  scratch_ = Buffer<float>(BT * (C + C + 4 * C + 3 * C + C) + att_scratch);
  p = scratch_.data();
  tmp_ = take(BT * C);
  dres_ = take(BT * C);
  dbig_ = take(BT * 4 * C);
  dqkv_ = take(BT * 3 * C);
  dy_ = take(BT * C);
  att_scratch_ = take(att_scratch);
  dln_ = tmp_;  // the forward's temporary is free during the backward

  for (int l = 0; l < config.n_layer; ++l) {
    layer_w_.push_back(layer_params(params_.data(), l));
    layer_g_.push_back(layer_params(grads_.data(), l));
  }
}

GPT2::LayerParams GPT2::layer_params(float* base, int l) const {
  const std::string p = "layers." + std::to_string(l) + ".";
  auto at = [&](const char* name) { return base + table_.at(p + name).offset; };
  return {at("ln_1.weight"),    at("ln_1.bias"),     at("attn.qkv.weight"), at("attn.qkv.bias"),
          at("attn.proj.weight"), at("attn.proj.bias"), at("ln_2.weight"),  at("ln_2.bias"),
          at("mlp.fc.weight"),  at("mlp.fc.bias"),   at("mlp.proj.weight"), at("mlp.proj.bias")};
}

void GPT2::forward(const int32_t* inputs, int B, int T) {
  FEAST_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= max_seq_,
              "micro-batch " << B << "x" << T << " exceeds the allocated " << max_batch_ << "x" << max_seq_);
  const int C = config_.n_embd, NH = config_.n_head, Vp = config_.padded_vocab();
  const int BT = B * T;
  const float* wte = params_.data() + table_.at("wte.weight").offset;
  const float* wpe = params_.data() + table_.at("wpe.weight").offset;
  cpu::encoder_forward(encoded_, inputs, wte, wpe, B, T, C);
  const float* x = encoded_;
  for (int l = 0; l < config_.n_layer; ++l) {
    const LayerParams& w = layer_w_[l];
    LayerActs& a = layers_[l];
    cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, BT, C);
    cpu::matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, BT, C, 3 * C);
    cpu::attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    cpu::matmul_forward(tmp_, a.atty, w.proj_w, w.proj_b, BT, C, C);
    cpu::residual_forward(a.res2, x, tmp_, size_t(BT) * C);
    cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, BT, C);
    cpu::matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, BT, C, 4 * C);
    cpu::gelu_forward(a.fch_gelu, a.fch, size_t(BT) * 4 * C);
    cpu::matmul_forward(tmp_, a.fch_gelu, w.fcproj_w, w.fcproj_b, BT, 4 * C, C);
    cpu::residual_forward(a.res3, a.res2, tmp_, size_t(BT) * C);
    x = a.res3;
  }
  const float* lnf_w = params_.data() + table_.at("ln_f.weight").offset;
  const float* lnf_b = params_.data() + table_.at("ln_f.bias").offset;
  cpu::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, lnf_w, lnf_b, BT, C);
  cpu::matmul_forward(logits_, lnf_, wte, static_cast<const float*>(nullptr), BT, C, Vp);
}

namespace {
float mean_of(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += x[i];
  return static_cast<float>(s / n);
}
}  // namespace

float GPT2::evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) {
  forward(inputs, B, T);
  cpu::cross_entropy_forward(losses_, logits_, targets, B * T, config_.vocab_size,
                             config_.padded_vocab());
  return mean_of(losses_, B * T);
}

float GPT2::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                             float loss_scale) {
  forward(inputs, B, T);
  const int C = config_.n_embd, NH = config_.n_head, Vp = config_.padded_vocab();
  const int BT = B * T;
  float* dlogits = logits_;
  cpu::cross_entropy_forward_backward(dlogits, losses_, targets, BT, config_.vocab_size, Vp, loss_scale);
  const float loss = mean_of(losses_, BT);

  float* P = params_.data();
  float* G = grads_.data();
  const ParamSpec& wte = table_.at("wte.weight");
  const ParamSpec& lnf_w = table_.at("ln_f.weight");
  const ParamSpec& lnf_b = table_.at("ln_f.bias");
  const float* x_last = config_.n_layer > 0 ? layers_.back().res3 : encoded_;

  // LM head (tied): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf.
  cpu::matmul_backward(dln_, G + wte.offset, static_cast<float*>(nullptr), dlogits, lnf_, P + wte.offset, BT, C, Vp);
  std::fill(dres_, dres_ + size_t(BT) * C, 0.0f);
  cpu::layernorm_backward(dres_, G + lnf_w.offset, G + lnf_b.offset, dln_, x_last, P + lnf_w.offset,
                          lnf_mean_, lnf_rstd_, BT, C);
  // dres_ carries d loss / d (residual stream) backwards through the blocks.
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const LayerParams& w = layer_w_[l];
    const LayerParams& g = layer_g_[l];
    const LayerActs& a = layers_[l];
    const float* x = l > 0 ? layers_[l - 1].res3 : encoded_;
    // MLP branch: the residual gradient is also the gradient of the MLP's output.
    cpu::matmul_backward(dbig_, g.fcproj_w, g.fcproj_b, dres_, a.fch_gelu, w.fcproj_w, BT, 4 * C, C);
    cpu::gelu_backward(dbig_, a.fch, dbig_, size_t(BT) * 4 * C);
    cpu::matmul_backward(dln_, g.fc_w, g.fc_b, dbig_, a.ln2, w.fc_w, BT, C, 4 * C);
    cpu::layernorm_backward(dres_, g.ln2_w, g.ln2_b, dln_, a.res2, w.ln2_w, a.ln2_mean, a.ln2_rstd, BT, C);
    // Attention branch.
    cpu::matmul_backward(dy_, g.proj_w, g.proj_b, dres_, a.atty, w.proj_w, BT, C, C);
    cpu::attention_backward(dqkv_, dy_, a.qkv, a.att, B, T, C, NH, att_scratch_);
    cpu::matmul_backward(dln_, g.qkv_w, g.qkv_b, dqkv_, a.ln1, w.qkv_w, BT, C, 3 * C);
    cpu::layernorm_backward(dres_, g.ln1_w, g.ln1_b, dln_, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, BT, C);
  }
  cpu::encoder_backward(G + wte.offset, G + table_.at("wpe.weight").offset, dres_, inputs, B, T, C);
  return loss;
}

}  // namespace feast
