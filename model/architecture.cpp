#include "model/architecture.h"

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace feast {

DecoderArch decoder_arch(const ModelConfig& c) {
  DecoderArch a;
  if (c.moe.enabled() && c.arch != "llama")
    throw ConfigError("model.moe.n_experts = " + std::to_string(c.moe.n_experts) +
                      ": mixture-of-experts blocks have SwiGLU experts (model.arch = \"llama\"), but model.arch = \"" +
                      c.arch + "\"");
  if (c.arch == "gpt2") {
    a.tied = c.tied();
    return a;
  }
  if (c.arch == "llama") {
    a.learned_positions = false;
    a.norm = NormKind::kRmsNorm;
    a.mlp = MlpKind::kSwiGlu;
    a.qkv_bias = c.qkv_bias;
    a.linear_bias = false;
    a.tied = c.tied();
    return a;
  }
  throw ConfigError("model.arch = \"" + c.arch + "\": expected \"gpt2\" or \"llama\"");
}

ParamTable decoder_param_table(const ModelConfig& cfg) {
  const DecoderArch arch = decoder_arch(cfg);
  const int64_t C = cfg.n_embd, Vp = cfg.padded_vocab(), hs = cfg.head_dim();
  const int64_t q_rows = int64_t{cfg.n_head} * hs, kv_rows = int64_t{cfg.kv_heads()} * hs, I = cfg.mlp_width();
  const double std = cfg.init_std;
  const double proj_std = std / std::sqrt(2.0 * cfg.n_layer);
  std::vector<ParamSpec> specs;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols, TpSplit split, double s, Placement where) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = {rows, cols};
    p.split = split;
    p.placement = where;
    p.weight_decay = true;
    p.init_std = s;
    specs.push_back(std::move(p));
  };
  auto vector = [&](std::string name, int64_t n, TpSplit split, float value, Placement where) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = {n};
    p.split = split;
    p.placement = where;
    p.init_value = value;
    specs.push_back(std::move(p));
  };
  auto norm = [&](const std::string& name, Placement where) {
    vector(name + ".weight", C, TpSplit::kReplicated, 1.0f, where);
    if (arch.norm == NormKind::kLayerNorm) vector(name + ".bias", C, TpSplit::kReplicated, 0.0f, where);
  };
  const Placement first = Placement::first_stage(), last = Placement::last_stage();

  matrix("wte.weight", Vp, C, TpSplit::kVocabRows, std, first);
  specs.back().init_rows = cfg.vocab_size;
  // The head comes right after the embedding in table order: the last stage of a tied model
  // keeps its copy first in its flat buffer.
  matrix("lm_head.weight", Vp, C, TpSplit::kVocabRows, std, last);
  specs.back().init_rows = cfg.vocab_size;
  if (arch.tied) specs.back().tied_to = 0;
  if (arch.learned_positions) matrix("wpe.weight", cfg.max_seq_len, C, TpSplit::kReplicated, std, first);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const Placement in = Placement::in_layer(l);
    norm(p + "ln_1", in);
    matrix(p + "attn.qkv.weight", q_rows + 2 * kv_rows, C, TpSplit::kOutputRows, std, in);
    specs.back().blocks = {q_rows, kv_rows, kv_rows};
    if (arch.qkv_bias) {
      vector(p + "attn.qkv.bias", q_rows + 2 * kv_rows, TpSplit::kOutputRows, 0.0f, in);
      specs.back().blocks = {q_rows, kv_rows, kv_rows};
    }
    matrix(p + "attn.proj.weight", C, q_rows, TpSplit::kInputCols, proj_std, in);
    if (arch.linear_bias) vector(p + "attn.proj.bias", C, TpSplit::kReplicated, 0.0f, in);
    norm(p + "ln_2", in);
    const bool swiglu = arch.mlp == MlpKind::kSwiGlu;
    if (cfg.moe.is_moe_layer(l)) {
      // The router, each expert's SwiGLU MLP (fc's gate and up blocks, proj), the shared experts
      // and their gate: model/layers/moe.h.
      const int64_t Ie = cfg.expert_width(), Is = cfg.shared_expert_width();
      matrix(p + "mlp.router.weight", cfg.moe.n_experts, C, TpSplit::kReplicated, std, in);
      for (int e = 0; e < cfg.moe.n_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        matrix(x + "fc.weight", 2 * Ie, C, TpSplit::kOutputRows, std, in);
        specs.back().blocks = {Ie, Ie};
        matrix(x + "proj.weight", C, Ie, TpSplit::kInputCols, proj_std, in);
        for (ParamSpec& expert_spec : std::span(specs).last(2)) {  // fc and proj: expert e's, of n_experts
          expert_spec.expert = e;
          expert_spec.experts = cfg.moe.n_experts;
        }
      }
      if (Is > 0) {
        matrix(p + "mlp.shared.fc.weight", 2 * Is, C, TpSplit::kOutputRows, std, in);
        specs.back().blocks = {Is, Is};
        matrix(p + "mlp.shared.proj.weight", C, Is, TpSplit::kInputCols, proj_std, in);
        if (cfg.moe.shared_expert_gate) matrix(p + "mlp.shared_gate.weight", 1, C, TpSplit::kReplicated, std, in);
      }
      continue;
    }
    matrix(p + "mlp.fc.weight", swiglu ? 2 * I : I, C, TpSplit::kOutputRows, std, in);
    if (swiglu) specs.back().blocks = {I, I};  // gate, then up
    if (arch.linear_bias) vector(p + "mlp.fc.bias", I, TpSplit::kOutputRows, 0.0f, in);
    matrix(p + "mlp.proj.weight", C, I, TpSplit::kInputCols, proj_std, in);
    if (arch.linear_bias) vector(p + "mlp.proj.bias", C, TpSplit::kReplicated, 0.0f, in);
  }
  norm("ln_f", last);
  return ParamTable(std::move(specs));
}

}  // namespace feast
