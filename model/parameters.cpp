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

float initial_value(const ParamSpec& s, uint64_t seed, int64_t i) {
  if (s.init_std <= 0) return s.init_value;
  const int64_t row = s.shape.size() > 1 ? s.shape[1] : 1;
  if (s.init_rows >= 0 && i >= s.init_rows * row) return 0.0f;  // vocabulary padding
  return static_cast<float>(s.init_std * normal_at(seed, hash_name(s.name), static_cast<uint64_t>(i)));
}

int64_t LocalParam::logical_index(int64_t i) const {
  if (tp == 1 || spec->split == TpSplit::kReplicated) return i;
  const int64_t cols = spec->shape.size() > 1 ? spec->shape[1] : 1;
  if (spec->split == TpSplit::kInputCols) {
    const int64_t local_cols = cols / tp;
    return (i / local_cols) * cols + tp_rank * local_cols + i % local_cols;
  }
  // Row splits (output rows, vocab rows): each of split_blocks blocks is cut into tp parts and
  // the rank holds part tp_rank of every block, in block order.
  const int64_t rows = spec->shape[0], blocks = spec->split_blocks;
  const int64_t part = rows / (blocks * tp);
  const int64_t local_row = i / cols, b = local_row / part, within = local_row % part;
  return (b * (rows / blocks) + tp_rank * part + within) * cols + i % cols;
}

LocalTable::LocalTable(const ParamTable& logical, const StageSpec& st) {
  const int t = st.tp;
  const int last_layer = st.first_layer + st.num_layers;
  for (const ParamSpec& s : logical.specs()) {
    bool held = false;
    if (s.name.rfind("layers.", 0) == 0) {
      const int l = std::stoi(s.name.substr(7));
      held = l >= st.first_layer && l < last_layer;
    } else if (s.name == "wte.weight") {
      held = st.has_embedding || st.has_head;  // the head is tied to the token embedding
    } else if (s.name == "wpe.weight") {
      held = st.has_embedding;
    } else {
      held = st.has_head;  // ln_f
    }
    if (!held) continue;
    LocalParam p;
    p.spec = &s;
    p.shape = s.shape;
    p.tp_rank = st.tp_rank;
    p.tp = t;
    if (s.split == TpSplit::kInputCols) {
      if (s.shape[1] % t != 0)
        throw ConfigError("parallel.tp = " + std::to_string(t) + " does not divide the " + std::to_string(s.shape[1]) +
                          " input columns of " + s.name);
      p.shape[1] /= t;
    } else if (s.split != TpSplit::kReplicated) {
      if (s.shape[0] % (int64_t{s.split_blocks} * t) != 0)
        throw ConfigError("parallel.tp = " + std::to_string(t) + " does not divide the " +
                          std::to_string(s.shape[0] / s.split_blocks) + " rows of " + s.name +
                          (s.split == TpSplit::kVocabRows ? " (the padded vocabulary)" : ""));
      p.shape[0] /= t;
    }
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
    p.offset = total_;
    total_ += p.numel;
    p.counts_in_norm = (s.split != TpSplit::kReplicated || st.tp_rank == 0) &&
                       !(s.name == "wte.weight" && !st.has_embedding);
    params_.push_back(p);
  }
}

const LocalParam& LocalTable::at(const std::string& name) const {
  for (const LocalParam& p : params_)
    if (p.spec->name == name) return p;
  throw Error("this stage holds no parameter named '" + name + "'");
}

bool LocalTable::contains(const std::string& name) const {
  for (const LocalParam& p : params_)
    if (p.spec->name == name) return true;
  return false;
}

void init_local_parameters(const LocalTable& table, uint64_t seed, float* params) {
  for (const LocalParam& p : table.params()) {
    float* out = params + p.offset;
    const long n = static_cast<long>(p.numel);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) out[i] = initial_value(*p.spec, seed, p.logical_index(i));
  }
}

}  // namespace feast
