#include "model/parameters.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace feast {

ParamTable::ParamTable(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  for (ParamSpec& s : specs_) {
    s.numel = 1;
    for (int64_t d : s.shape) s.numel *= static_cast<size_t>(d);
    s.offset = total_;
    total_ += s.numel;
  }
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return s;
  throw Error("no parameter named '" + name + "' in the model's parameter table");
}

ParamTable gpt2_param_table(const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd, Vp = cfg.padded_vocab();
  const double std = cfg.init_std;
  const double proj_std = std / std::sqrt(2.0 * cfg.n_layer);
  std::vector<ParamSpec> specs;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols, TpSplit split, double s) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = {rows, cols};
    p.split = split;
    p.weight_decay = true;
    p.init_std = s;
    specs.push_back(std::move(p));
  };
  auto vector = [&](std::string name, int64_t n, TpSplit split, float value) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = {n};
    p.split = split;
    p.init_value = value;
    specs.push_back(std::move(p));
  };
  matrix("wte.weight", Vp, C, TpSplit::kVocabRows, std);
  specs.back().init_rows = cfg.vocab_size;
  matrix("wpe.weight", cfg.max_seq_len, C, TpSplit::kReplicated, std);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    vector(p + "ln_1.weight", C, TpSplit::kReplicated, 1.0f);
    vector(p + "ln_1.bias", C, TpSplit::kReplicated, 0.0f);
    matrix(p + "attn.qkv.weight", 3 * C, C, TpSplit::kOutputRows, std);
    specs.back().split_blocks = 3;
    vector(p + "attn.qkv.bias", 3 * C, TpSplit::kOutputRows, 0.0f);
    specs.back().split_blocks = 3;
    matrix(p + "attn.proj.weight", C, C, TpSplit::kInputCols, proj_std);
    vector(p + "attn.proj.bias", C, TpSplit::kReplicated, 0.0f);
    vector(p + "ln_2.weight", C, TpSplit::kReplicated, 1.0f);
    vector(p + "ln_2.bias", C, TpSplit::kReplicated, 0.0f);
    matrix(p + "mlp.fc.weight", 4 * C, C, TpSplit::kOutputRows, std);
    vector(p + "mlp.fc.bias", 4 * C, TpSplit::kOutputRows, 0.0f);
    matrix(p + "mlp.proj.weight", C, 4 * C, TpSplit::kInputCols, proj_std);
    vector(p + "mlp.proj.bias", C, TpSplit::kReplicated, 0.0f);
  }
  vector("ln_f.weight", C, TpSplit::kReplicated, 1.0f);
  vector("ln_f.bias", C, TpSplit::kReplicated, 0.0f);
  return ParamTable(std::move(specs));
}

void init_parameters(const ParamTable& table, uint64_t seed, float* params) {
  for (const ParamSpec& s : table.specs()) {
    float* p = params + s.offset;
    const long n = static_cast<long>(s.numel);
    if (s.init_std <= 0) {
      for (long i = 0; i < n; ++i) p[i] = s.init_value;
      continue;
    }
    const uint64_t stream = hash_name(s.name);
    const long row = s.shape.size() > 1 ? static_cast<long>(s.shape[1]) : 1;
    const long drawn = s.init_rows < 0 ? n : static_cast<long>(s.init_rows) * row;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i)
      p[i] = i < drawn ? static_cast<float>(s.init_std * normal_at(seed, stream, static_cast<uint64_t>(i))) : 0.0f;
  }
}

}  // namespace feast
