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

// GPT-2's table: wte (Vp, C) [tied LM head], wpe (maxT, C), per layer ln_1, attn.qkv, attn.proj,
// ln_2, mlp.fc, mlp.proj, then ln_f. Residual projections use init_std / sqrt(2 * n_layer).
ParamTable gpt2_param_table(const ModelConfig& config);

// Fills params (table.total_numel()) from the seed: element i of each logical tensor is a
// function of (seed, name, i), so any slice can be drawn without the rest (invariant 4).
void init_parameters(const ParamTable& table, uint64_t seed, float* params);

}  // namespace feast
