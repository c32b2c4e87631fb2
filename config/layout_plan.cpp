#include "config/layout_plan.h"

#include <numeric>
#include <string>

#include "core/error.h"
#include "core/plural.h"

namespace feast {
namespace {

std::string n(long long v) { return std::to_string(v); }

// "1, 3 or 9": the tensor-parallel degrees that split the model's heads, MLP and vocabulary.
std::string allowed_tp(const ModelConfig& m) {
  std::vector<std::string> values;
  for (int tp = 1; tp <= m.n_head; ++tp)
    if (m.n_head % tp == 0 && m.kv_heads() % tp == 0 && m.mlp_width() % tp == 0 && m.padded_vocab() % tp == 0)
      values.push_back(n(tp));
  std::string out;
  for (size_t i = 0; i < values.size(); ++i)
    out += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
  return out;
}

}  // namespace

LayoutPlan plan_layout(const Config& c, int world_size) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int tp = p.tp, pp = p.pp;
  const std::string choose = "; parallel.tp can be " + allowed_tp(m) + " for this model";
  if (m.n_head % tp != 0)
    throw ConfigError("parallel.tp = " + n(tp) + " does not divide model.n_head = " + n(m.n_head) +
                      ": tensor parallelism splits whole attention heads (" + c.where("parallel.tp") + ")" + choose);
  if (m.kv_heads() % tp != 0)
    throw ConfigError("parallel.tp = " + n(tp) + " does not divide model.n_kv_head = " + n(m.kv_heads()) +
                      ": tensor parallelism splits whole key/value heads (" + c.where("parallel.tp") + ", " +
                      "model.n_kv_head at " + c.where("model.n_kv_head") + ")" + choose);
  if (m.mlp_width() % tp != 0)
    throw ConfigError("parallel.tp = " + n(tp) + " does not divide the MLP width " + n(m.mlp_width()) +
                      (m.intermediate_size > 0 ? " (model.intermediate_size)" : " (the family's default width)") +
                      " (" + c.where("parallel.tp") + ")" + choose);
  if (m.moe.enabled() && (m.expert_width() % tp != 0 || m.shared_expert_width() % tp != 0))
    throw ConfigError("parallel.tp = " + n(tp) + " does not divide the experts' width " + n(m.expert_width()) +
                      (m.shared_expert_width() > 0 ? " or the shared experts' " + n(m.shared_expert_width()) : "") +
                      " (model.moe.intermediate_size, model.moe.shared_intermediate_size): tensor parallelism "
                      "splits every expert like the MLP (" + c.where("parallel.tp") + ")");
  if (m.padded_vocab() % tp != 0)
    throw ConfigError("parallel.tp = " + n(tp) + " does not divide the padded vocabulary " + n(m.padded_vocab()) +
                      " (model.vocab_size = " + n(m.vocab_size) + " rounded up to a multiple of 128)" + choose);
  if (pp > m.n_layer)
    throw ConfigError("parallel.pp = " + n(pp) + " stages but model.n_layer = " + n(m.n_layer) +
                      ": every stage needs at least one layer (" + c.where("parallel.pp") + ")");
  // Interleaved: every stage's layers are v equal chunks, so the default split deals out whole
  // groups of v layers (earlier stages take the remainder), and an explicit one must be in them.
  const int v = p.schedule == "interleaved-1f1b" ? p.virtual_stages : 1;
  std::vector<int> stage_layers = p.stage_layers;
  if (stage_layers.empty()) {
    if (m.n_layer % v != 0 || m.n_layer < pp * v)
      throw ConfigError("parallel.virtual_stages = " + n(v) + " does not divide the model's " + n(m.n_layer) +
                        " layers into " + n(pp) + " stages of whole chunks: each stage needs a multiple of " + n(v) +
                        " layers (at least " + n(v) + ") (" + c.where("parallel.virtual_stages") +
                        "); change it, or give parallel.stage_layers");
    const int groups = m.n_layer / v;
    for (int s = 0; s < pp; ++s) stage_layers.push_back(v * (groups / pp + (s < groups % pp ? 1 : 0)));
  } else {
    const int total = std::accumulate(stage_layers.begin(), stage_layers.end(), 0);
    if (int(stage_layers.size()) != pp || total != m.n_layer)
      throw ConfigError(c.where("parallel.stage_layers") + ": parallel.stage_layers has " + n(stage_layers.size()) +
                        " entries summing to " + n(total) + "; it needs parallel.pp = " + n(pp) +
                        " entries summing to model.n_layer = " + n(m.n_layer));
  }
  // The ranks one data-parallel replica spans: tp * pp, times cp where context parallelism splits
  // its sequences.
  const int cp = p.cp, span = tp * pp * cp;
  const std::string span_keys = cp > 1 ? "parallel.tp * parallel.pp * parallel.cp" : "parallel.tp * parallel.pp";
  const std::string span_values = n(tp) + " * " + n(pp) + (cp > 1 ? " * " + n(cp) : "");
  const std::string degrees_at = " (parallel.tp at " + c.where("parallel.tp") + ", parallel.pp at " +
                                 c.where("parallel.pp") + ", parallel.dp at " + c.where("parallel.dp") +
                                 (cp > 1 ? ", parallel.cp at " + c.where("parallel.cp") : "") + ")";
  if (p.dp == 0 && world_size % span != 0)
    throw ConfigError("the world has " + count_of(world_size, "rank") + " (mpirun -np) but " + span_keys + " = " +
                      span_values + " = " + n(span) + " does not divide it, so parallel.dp = 0 (inferred: " +
                      "world / (" + (cp > 1 ? "tp * pp * cp" : "tp * pp") + ")) has no value; launch a multiple of " +
                      n(span) + " ranks or change the degrees" + degrees_at);
  if (p.dp != 0 && span * p.dp != world_size)
    throw ConfigError("the world has " + count_of(world_size, "rank") + " (mpirun -np) but " + span_keys +
                      " * parallel.dp = " + span_values + " * " + n(p.dp) + " = " + n(span * p.dp) + "; launch " +
                      n(span * p.dp) + " ranks or change the degrees" + degrees_at);
  for (int s = 0; s < pp; ++s)
    if (stage_layers[size_t(s)] % v != 0)
      throw ConfigError("parallel.virtual_stages = " + n(v) + " does not divide stage " + n(s) + "'s " +
                        n(stage_layers[size_t(s)]) + " layers (parallel.stage_layers at " +
                        c.where("parallel.stage_layers") + ", parallel.virtual_stages at " +
                        c.where("parallel.virtual_stages") + "): interleaving cuts every stage into " + n(v) +
                        " equal chunks");
  const int dp = p.dp ? p.dp : world_size / span;
  if (dp % p.ep != 0)
    throw ConfigError("parallel.ep = " + n(p.ep) + " does not divide the data-parallel degree " + n(dp) +
                      (p.dp ? " (parallel.dp at " + c.where("parallel.dp") + ")" : " (world / (tp * pp))") +
                      ": expert-parallel groups are ep consecutive data-parallel ranks (parallel.ep at " +
                      c.where("parallel.ep") + "); launch a multiple of ep data-parallel replicas or change parallel.ep");
  LayoutPlan plan{ParallelLayout(tp, pp, dp, p.order, cp), c.micro_batches_per_rank(dp), std::move(stage_layers),
                  parse_schedule_kind(p.schedule), v};
  plan.ep = m.moe.enabled() ? p.ep : 1;
  if (v > 1 && plan.micro_batches % pp != 0)
    throw ConfigError("parallel.schedule = \"interleaved-1f1b\" runs micro-batches in groups of parallel.pp = " +
                      n(pp) + ", but a step has " + n(plan.micro_batches) +
                      " per data-parallel rank (training.batch_size / (dp * parallel.micro_batch_size), or "
                      "parallel.num_micro_batches); make it a multiple of " + n(pp));
  return plan;
}

StageSpec LayoutPlan::stage_of(int rank) const {
  const RankCoord c = layout.coord(rank);
  StageSpec spec;
  // Virtual stage j = chunk·pp + stage holds stage_layers[stage] / v layers, in order.
  const int v = virtual_stages, pp = layout.pp();
  spec.chunks.clear();
  int first = 0;
  for (int chunk = 0; chunk < v; ++chunk)
    for (int s = 0; s < pp; ++s) {
      const int count = stage_layers[size_t(s)] / v;
      if (s == c.pp) spec.chunks.push_back({first, count});
      first += count;
    }
  spec.has_embedding = c.pp == 0;
  spec.has_head = c.pp == layout.pp() - 1;
  spec.tp_rank = c.tp;
  spec.tp = layout.tp();
  spec.ep = ep;
  spec.ep_rank = c.dp % ep;
  return spec;
}

}  // namespace feast
