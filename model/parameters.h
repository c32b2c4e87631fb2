// The parameter table (design invariant 1): every parameter's logical name, full logical shape,
// how tensor parallelism splits it, where in the pipeline it lives, whether it is a tied copy of
// another tensor, whether it is weight-decayed and how it is initialised; and one rank's piece of
// it in the rank's flat buffer (invariant 2). Initialisation, the optimizer's decay mask, the
// gradient-norm accounting, the gradient ranges and (later) checkpoints and HF import all read
// this one table; nothing parses a tensor's name to learn where it belongs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/stage_spec.h"

namespace feast {

// How tensor parallelism slices a tensor.
enum class TpSplit {
  kReplicated,  // identical on every tp rank (norms, row-parallel biases, position embedding)
  kOutputRows,  // column-parallel linear: rows of the (OC, C) weight and of its bias
  kInputCols,   // row-parallel linear: columns of the (OC, C) weight
  kVocabRows,   // vocab-parallel embedding or head: rows of the (Vp, C) table
};

// Which pipeline stage holds a tensor.
struct Placement {
  enum class Kind { kFirstStage, kLastStage, kLayer };
  Kind kind = Kind::kFirstStage;
  int layer = -1;  // kLayer: the transformer block

  static Placement first_stage() { return {Kind::kFirstStage, -1}; }
  static Placement last_stage() { return {Kind::kLastStage, -1}; }
  static Placement in_layer(int l) { return {Kind::kLayer, l}; }
  bool on(const StageSpec& stage) const;
};

struct ParamSpec {
  std::string name;            // logical name, e.g. "layers.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // full logical shape
  TpSplit split = TpSplit::kReplicated;
  // Row splits of fused tensors: the rows of each block, in order (q with n_head heads, k and v
  // with n_kv_head; or gate and up). Each block is cut into tp parts separately, so a rank holds
  // part tp_rank of every block. Empty = one block.
  std::vector<int64_t> blocks;
  Placement placement;
  // A tied tensor (the LM head tied to the token embedding) has no values of its own: it names
  // the spec, by index in the table, whose values it shares. -1 = not tied.
  int tied_to = -1;
  bool weight_decay = false;  // matrices only
  double init_std = 0;        // normal(0, init_std) when > 0, else the constant init_value
  float init_value = 0;
  int64_t init_rows = -1;     // rows drawn at init; later rows (vocab padding) stay zero
  size_t offset = 0;          // start in the logical flat order (a tied spec: its target's)
  size_t numel = 0;
  // A mixture of experts' expert tensor: its expert's index among its block's `experts`. Expert
  // parallelism keeps each expert on one rank of an ep group (StageSpec::holds_expert); -1 for
  // every other tensor.
  int expert = -1, experts = 0;
};

class ParamTable {
 public:
  // Computes offsets; throws feast::Error when a tie names no earlier spec or a different shape.
  explicit ParamTable(std::vector<ParamSpec> specs);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // Elements of the logical model: every tensor once, tied ones not again.
  size_t total_numel() const { return total_; }
  // The spec with this logical name; throws feast::Error naming it when absent.
  const ParamSpec& at(const std::string& name) const;

 private:
  std::vector<ParamSpec> specs_;
  size_t total_ = 0;
};

// A rectangle of a logical tensor that one rank holds contiguously (row-major) in its flat
// buffer: what a parallel HDF5 hyperslab write or a checkpoint reshard needs.
struct LogicalSlice {
  std::vector<int64_t> start, count;  // per logical dimension
  size_t local_offset = 0;            // first element, relative to the LocalParam's start
  size_t numel() const;
};

// One rank's piece of a logical tensor: its local shape and place in the rank's flat buffer.
struct LocalParam {
  const ParamSpec* spec = nullptr;     // the tensor stored here (points into the ParamTable)
  const ParamSpec* logical = nullptr;  // the logical tensor whose values it holds: spec itself, or
                                       // the tie target when this is a tied copy
  std::vector<int64_t> shape;          // local shape
  size_t offset = 0;                   // start in the rank's flat buffer
  size_t numel = 0;
  int tp_rank = 0, tp = 1;
  // Counted in the global gradient norm (and saved by this rank, within its share): false for
  // the tp ranks > 0 of replicated tensors, for tied copies and for the dense tensors of ep ranks
  // > 0, so every logical element counts once.
  bool counts_in_norm = true;
  // The values also live on another pipeline stage (a tie between the first and the last stage),
  // so the two copies' gradients must be summed over the embedding group.
  bool tied_across_stages = false;

  bool is_tied_copy() const { return spec != logical; }
  // The logical flat index (into `logical`) of local element i.
  int64_t logical_index(int64_t i) const;
  // Rectangles of the logical tensor that local elements [begin, end) hold, in local order
  // (partial rows become rectangles of their own). Default: the whole local tensor.
  std::vector<LogicalSlice> logical_slices() const { return logical_slices(0, numel); }
  std::vector<LogicalSlice> logical_slices(size_t begin, size_t end) const;
};

// The tensors a stage holds, in logical-table order, with tensor-parallel slicing applied. A
// tied tensor whose target is on the same stage gets no storage: looking it up gives the
// target. One whose target is on another stage is stored as a copy.
class LocalTable {
 public:
  // Throws ConfigError when tp does not divide a split dimension (naming the tensor).
  LocalTable(const ParamTable& logical, const StageSpec& stage);
  const std::vector<LocalParam>& params() const { return params_; }
  size_t total_numel() const { return total_; }
  // The logical table this stage's piece was cut from (its specs outlive the LocalTable).
  const ParamTable& logical() const { return *logical_; }
  // The local piece that holds the values of logical tensor `name` (a tied name resolves to its
  // target when both are here); throws feast::Error when this stage holds neither.
  const LocalParam& at(const std::string& name) const;
  bool contains(const std::string& name) const;

 private:
  const LocalParam* find(const std::string& name) const;
  const ParamTable* logical_;
  std::vector<LocalParam> params_;
  std::vector<std::pair<std::string, size_t>> aliases_;  // tied name -> index of its target
  size_t total_ = 0;
};

// A whole logical tensor's values, row-major (shape from the parameter table): an imported
// model's, or the initial ones.
using LogicalTensorSource = std::function<std::vector<float>(const ParamSpec& spec)>;

// The initial value of logical element i of `spec`: a function of (seed, name, i) alone, so any
// slice can be drawn without the rest (invariant 4).
float initial_value(const ParamSpec& spec, uint64_t seed, int64_t i);

// Fills local tensor p (numel floats at `out`): local element i is logical element
// p.logical_index(i) of its logical tensor, so every layout starts from the same model.
void init_local_parameter(const LocalParam& p, uint64_t seed, float* out);

}  // namespace feast
