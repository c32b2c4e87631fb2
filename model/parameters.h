// The parameter table (design invariant 1): every parameter's logical name, full logical shape,
// how tensor parallelism splits it, whether it is weight-decayed and how it is initialised, and
// where it lives in the rank's flat buffer (invariant 2). Initialisation, the optimizer's decay
// mask, gradient-norm accounting and (later) checkpoints and HF import all read this one table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/stage_spec.h"

namespace feast {

// How tensor parallelism slices a tensor (used from the tensor-parallel issue on; today every
// rank holds whole tensors).
enum class TpSplit {
  kReplicated,  // identical on every tp rank (norms, row-parallel biases, position embedding)
  kOutputRows,  // column-parallel linear: rows of the (OC, C) weight and of its bias
  kInputCols,   // row-parallel linear: columns of the (OC, C) weight
  kVocabRows,   // vocab-parallel embedding: rows of the (Vp, C) table
};

struct ParamSpec {
  std::string name;            // logical name, e.g. "layers.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // full logical shape
  TpSplit split = TpSplit::kReplicated;
  int split_blocks = 1;        // QKV is three blocks (q, k, v), each split by heads
  bool weight_decay = false;   // matrices only
  double init_std = 0;         // normal(0, init_std) when > 0, else the constant init_value
  float init_value = 0;
  int64_t init_rows = -1;      // rows drawn at init; later rows (vocab padding) stay zero
  size_t offset = 0;           // start in the flat buffer
  size_t numel = 0;
};

class ParamTable {
 public:
  explicit ParamTable(std::vector<ParamSpec> specs);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  size_t total_numel() const { return total_; }
  // The spec with this logical name; throws feast::Error naming it when absent.
  const ParamSpec& at(const std::string& name) const;

 private:
  std::vector<ParamSpec> specs_;
  size_t total_ = 0;
};

// One rank's piece of a logical tensor: its local shape and place in the rank's flat buffer.
struct LocalParam {
  const ParamSpec* spec = nullptr;  // the logical tensor (points into the ParamTable)
  std::vector<int64_t> shape;       // local shape
  size_t offset = 0;                // start in the rank's flat buffer
  size_t numel = 0;
  int tp_rank = 0, tp = 1;
  // Counted in the global gradient norm: false for the tp ranks > 0 of replicated tensors and
  // for the last stage's copy of the tied embedding, so every logical element counts once.
  bool counts_in_norm = true;

  // The logical flat index of local element i (initialisation, checkpoints, tests).
  int64_t logical_index(int64_t i) const;
};

// The tensors a stage holds, in logical-table order, with tensor-parallel slicing applied.
class LocalTable {
 public:
  // Throws ConfigError when tp does not divide the heads, the FC width or the padded vocabulary.
  LocalTable(const ParamTable& logical, const StageSpec& stage);
  const std::vector<LocalParam>& params() const { return params_; }
  size_t total_numel() const { return total_; }
  // The local piece of the logical tensor `name`; throws feast::Error when this stage lacks it.
  const LocalParam& at(const std::string& name) const;
  bool contains(const std::string& name) const;

 private:
  std::vector<LocalParam> params_;
  size_t total_ = 0;
};

// Fills a stage's flat buffer: local element i of tensor p is logical element
// p.logical_index(i) drawn as init_parameters would, so every layout starts from the same model.
void init_local_parameters(const LocalTable& table, uint64_t seed, float* params);

// GPT-2's table: wte (Vp, C) [tied LM head], wpe (maxT, C), per layer ln_1, attn.qkv, attn.proj,
// ln_2, mlp.fc, mlp.proj, then ln_f. Residual projections use init_std / sqrt(2 * n_layer).
ParamTable gpt2_param_table(const ModelConfig& config);

// The initial value of logical element i of `spec`: a function of (seed, name, i) alone, so any
// slice can be drawn without the rest (invariant 4).
float initial_value(const ParamSpec& spec, uint64_t seed, int64_t i);

}  // namespace feast
