#include "plan/cost_model.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "model/architecture.h"
#include "model/layers/activation_memory.h"
#include "model/layers/moe_routing.h"
#include "model/lora.h"
#include "model/parameter_units.h"
#include "model/parameters.h"
#include "model/pipeline_stage.h"
#include "model/quantized_base.h"
#include "backend/offload_pipeline.h"
#include "config/validate.h"
#include "parallel/pipeline/pipeline_executor.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/sharded_parameters.h"
#include "parallel/data_parallel/zero_shard.h"

namespace feast {
namespace {

double element_bytes(PlanDType d) { return d == PlanDType::kFp32 ? 4.0 : 2.0; }

// The part of a layer a tensor belongs to: its name without ".weight" or ".bias", the prefix
// the layers look their tensors up by (weight_and_bias in model/layers/layer_context.cpp).
std::string part_of(const std::string& name) {
  for (const char* suffix : {".weight", ".bias", ".A", ".B"}) {  // a LoRA adapter's A and B: one range
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return name.substr(0, name.size() - s.size());
  }
  return name;
}

// The gradient ranges DecoderStage::gradient_ranges() gives for this table, from the table
// alone: vocabulary-sized tensors in standalone chunks of whole rows (a tied head on the
// embedding's stage is the embedding, acquired twice), every other part's weight and bias as
// one range.
std::vector<GradRange> stage_gradient_ranges(const LocalTable& table, const StageSpec& spec, size_t chunk_elems) {
  std::vector<GradRange> out;
  // LoRA's table (adapters only) holds neither.
  const LocalParam* wte = spec.has_embedding && table.contains("wte.weight") ? &table.at("wte.weight") : nullptr;
  const LocalParam* head = spec.has_head && table.contains("lm_head.weight") ? &table.at("lm_head.weight") : nullptr;
  const bool shared = wte && head && wte == head;
  auto chunks = [&](const LocalParam& p, int uses) {
    const size_t row = size_t(p.shape[1]), rows = std::max<size_t>(1, chunk_elems / row);
    const size_t end = p.offset + p.numel;
    for (size_t b = p.offset; b < end; b += rows * row)
      out.push_back({b, std::min(end, b + rows * row), uses, true, p.tied_across_stages});
  };
  if (wte) chunks(*wte, shared ? 2 : 1);
  if (head && !shared) chunks(*head, 1);
  std::string current;
  for (const LocalParam& p : table.params()) {
    if (p.spec->split == TpSplit::kVocabRows) continue;
    const std::string part = part_of(p.spec->name);
    if (!out.empty() && !out.back().standalone && part == current && out.back().end == p.offset) {
      out.back().end = p.offset + p.numel;
    } else {
      out.push_back({p.offset, p.offset + p.numel, 1, false, false, 0, p.spec->expert >= 0});
      current = part;
    }
  }
  return out;
}

// ZeRO as GradientSync applies it: with one rank to shard over there is nothing to shard.
int effective_zero_stage(const Config& config, const LayoutPlan& plan) {
  return plan.shard_ranks() == 1 ? 0 : config.parallel.zero_stage;
}


// The blocks of a stage that recompute (DecoderStage: its first training.recompute_layers, 0 = all).
int recomputed_blocks(const Config& config, const StageSpec& spec) {
  if (config.training.recompute == "none") return 0;
  const int n = config.training.recompute_layers;
  return n == 0 ? spec.num_layers() : std::min(n, spec.num_layers());
}

// The parameters a full recomputation of block `layer` multiplies by: the whole block's, or a
// mixture-of-experts block's without its MoE MLP, which recomputation leaves alone
// (model/layers/block.h: an MoE block keeps what its MLP's backward reads).
double recomputed_parameters(const ParamTable& logical, const ModelConfig& mc, int layer) {
  const std::string block = "layers." + std::to_string(layer) + ".", mlp = block + "mlp.";
  double n = 0;
  for (const ParamSpec& s : logical.specs())
    if (s.name.rfind(block, 0) == 0 && !(mc.moe.is_moe_layer(layer) && s.name.rfind(mlp, 0) == 0))
      n += double(s.numel);
  return n;
}

// What an MoE block allocates (model/layers/moe.h, MoeScratch in model/layers/layer_context.h)
// for N rows, at tp t and expert-parallel degree ep: per activation slot, once per stage, and
// outside the trainer's report. Legend: k choices, E experts, R = ep N k rows this rank's experts
// may take (fewer under a capacity: expert_rows_bound), Il and Is an expert's and the shared
// experts' width on this rank.
struct MoeMemory {
  double kept = 0, scratch = 0, buffers = 0;
};

MoeMemory moe_memory(const ModelConfig& mc, double N, int t, int ep, double e) {
  MoeMemory m;
  if (!mc.moe.enabled()) return m;
  const double f32 = 4.0, i32 = 4.0, C = mc.n_embd, E = mc.moe.n_experts, Nk = N * mc.moe.top_k;
  const double R = double(expert_rows_bound(mc.moe.capacity_factor, int(N), mc.moe.top_k, mc.moe.n_experts, ep));
  const double Il = double(mc.expert_width() / t), Is = double(mc.shared_expert_width() / t);
  const bool shared = Is > 0, gate = shared && mc.moe.shared_expert_gate;
  // probabilities (N, E) and logsumexp (N) in float32; choices, weights, slots and tokens (N k);
  // pre-activations (R, 2 Il), activations (R, Il), outputs (N k, C); under ep the rows this
  // rank's experts took (R, C) and the two permutations (R); the shared experts' output (N, C),
  // gate (N) and their MLP's fc output and activation (N, 3 Is).
  m.kept = N * E * f32 + N * f32 + 4 * Nk * i32 + R * 3 * Il * e + Nk * C * e +
           (ep > 1 ? R * C * e + 2 * R * i32 : 0.0) +
           (shared ? N * C * e + (gate ? N * f32 : 0.0) + N * 3 * Is * e : 0.0);
  // logits (N, E), prob_sum and dprob (E), rows and drows (N k, C), dact and dpre (R, 3 Il),
  // the exchange's two buffers (R, C) under ep, dweight (N k), part (N, C); with shared experts
  // dshared (N, C), dgate (N) and gate_logits (N).
  m.scratch = N * E * e + 2 * E * f32 + 2 * Nk * C * e + R * 3 * Il * e + (ep > 1 ? 2 * R * C * e : 0.0) + Nk * f32 +
              N * C * e + (shared ? N * C * e + N * f32 + N * e : 0.0);
  m.buffers = shared ? 2 * N * f32 : 0.0;
  return m;
}

PlannedMemory memory_of(const Config& config, const LayoutPlan& plan, const ParamTable& logical,
                        const StageSpec& spec, int stage, int replica, const MemoryOptions& o) {
  const ModelConfig& mc = config.model;
  const DecoderArch arch = decoder_arch(mc);
  // Under LoRA the adapters train (gradients, optimizer state) and the model is a frozen base:
  // parameters without either, in the compute dtype, its block weights perhaps stored apart.
  const LoraSpec lora = lora_spec(config);
  const ParamTable adapters = lora.enabled() ? lora_param_table(mc, lora) : ParamTable(std::vector<ParamSpec>{});
  const LocalTable table(lora.enabled() ? adapters : logical, spec);
  const double e = element_bytes(o.dtype), f32 = 4.0, i32 = 4.0;
  PlannedMemory mem;
  const size_t n = table.total_numel();
  mem.parameters = double(n) * e;
  QuantizedBase::Size apart;
  if (lora.enabled()) {
    const bool stored_apart =
        base_stored_apart(lora, o.dtype == PlanDType::kFp32 ? DType::kFloat32 : DType::kBFloat16);
    if (stored_apart) {
      apart = QuantizedBase::planned(mc, spec, lora.base, lora.double_quant);
      mem.parameters += double(LocalTable(without_stored_apart(logical), spec).total_numel()) * e + double(apart.bytes);
    } else {
      mem.parameters += double(LocalTable(logical, spec).total_numel()) * e;
    }
  }

  // Gradients: float32 whatever the compute type (GradientSync allocates kFloat32).
  // The ranks holding these parameters: data-parallel replicas, and context-parallel ranks in each.
  const int dp = plan.layout.replicas(), zero = effective_zero_stage(config, plan);
  // Under expert parallelism the ep ranks of a group share one shard (grad_sync.h).
  const ShardRange my_shard = shard_range(n, plan.shard_ranks(), replica / plan.ep);
  const size_t shard = my_shard.size();
  const bool server = config.parallel.dp_sync == "parameter-server";
  // ZeRO 3: the pages ShardedParameters holds at most (its shard, two steps' units).
  if (zero == 3 && !server)
    mem.parameters = double(ShardedPages(n, size_t(e), o.page_bytes, my_shard, parameter_units(table))
                                .working_set_bytes());
  if (server) {
    // ParameterServer: the worker's whole gradient, and a buffer for one received push or pull
    // (shard 0, the largest); the optimizer keeps the state of the shard it serves.
    mem.gradients = double(n) * f32;
    mem.communication = dp > 1 ? double(shard_range(n, dp, 0).size()) * f32 : 0.0;
  } else {
    const size_t bucket_elems = static_cast<size_t>(config.parallel.bucket_mb * 1024 * 1024 / sizeof(float));
    const GradBufferSizes z = gradient_buffer_sizes(
        gradient_buckets(stage_gradient_ranges(table, spec, bucket_elems), bucket_elems), plan.layout.pp() > 1);
    // ZeRO 0 and 1: the whole buffer (ZeRO 1 reduces in place into it); ZeRO 2: the slots, the
    // buckets kept through the backward, and the shard.
    mem.gradients = zero < 2 ? double(n) * f32
                             : (double(kGradStagingSlots) * double(z.slot_elems) + double(z.dedicated_elems()) + double(shard)) * f32;
    if (dp > 1 && config.parallel.grad_reduce_dtype == "bf16") mem.communication = double(kGradWireSlots) * double(z.largest) * 2.0;
  }
  // AdamW: two float32 moments of its range, and a float32 master copy unless the parameters
  // are float32 themselves.
  const size_t range = zero == 0 && !server ? n : shard;
  if (config.parallel.offload_optimizer) {
    // Offloaded (optim/adamw.h): master, moments and the gradients' copy in host memory; on the
    // device only the float32 buffers that cast the weights back, for lower-precision weights.
    mem.offloaded = 4.0 * double(range) * f32;
    mem.optimizer = o.dtype == PlanDType::kFp32 ? 0.0 : double(offload_device_bytes(range, DType::kBFloat16));
  } else {
    mem.optimizer = double(range) * (2 * f32 + (o.dtype == PlanDType::kFp32 ? 0.0 : f32));
  }

  // Activations: what DecoderStage and its layers allocate per slot, and the scratch they share.
  // Under context parallelism a stage holds its T / cp tokens of each sequence.
  const int cp = plan.layout.cp();
  const int B = config.parallel.micro_batch_size, T = config.training.seq_len / cp, t = plan.layout.tp();
  // Slots per model chunk; each slot holds one micro-batch of every chunk (interleaved 1F1B).
  const int slots = PipelineExecutor::slots_needed(plan.schedule, plan.layout.pp(), stage, plan.micro_batches,
                                                   plan.virtual_stages);
  const double rows = double(B) * T, C = mc.n_embd, hs = mc.head_dim();
  const double NHl = mc.n_head / t, NKVl = mc.kv_heads() / t, Il = mc.mlp_width() / t;
  const double Fl = arch.mlp == MlpKind::kSwiGlu ? 2 * Il : Il, Vl = mc.padded_vocab() / t;
  // The stage's scratch serves the dense MLP and an MoE block's shared experts, the wider.
  const double Il_scratch = std::max(mc.mlp_width(), mc.shared_expert_width()) / t;
  const double Fl_scratch = arch.mlp == MlpKind::kSwiGlu ? 2 * Il_scratch : Il_scratch;
  const double qkv_w = (NHl + 2 * NKVl) * hs, out_w = NHl * hs;
  // The attention's saved state: the CPU keeps the softmax probabilities (B, NH, T, T); a fused
  // GPU kernel keeps one log-sum-exp per row (B, NH, T). The CPU backward's scratch is T x T per
  // thread; a fused kernel needs none.
  // The ring of context parallelism keeps the log-sum-exp on every backend, and its own scratch:
  // two key/value blocks (one computing, one arriving), three float32 gradients of them (the
  // travelling sum, the arriving one, this rank's share), a float32 output accumulator and the
  // block kernels' workspace (the CPU's: two (c, 2c) matrices, a
  // block output and c log-sum-exps per thread, c = T/2; a GPU's: B NH T floats).
  const bool ring = cp > 1;
  const double att_state = o.gpu || ring ? double(B) * NHl * T * f32 : double(B) * NHl * T * T * f32;
  const double att_work = o.gpu || ring ? 0.0 : double(o.threads) * T * T * e;
  const double c_half = T / 2.0, kv_w = 2 * NKVl * hs;
  const double ring_scratch =
      !ring || spec.num_layers() == 0
          ? 0.0
          : 2 * rows * kv_w * e + 3 * rows * kv_w * f32 + rows * NHl * hs * f32 +
                (o.gpu ? double(B) * NHl * T * f32
                       : double(o.threads) * (2 * c_half * T + c_half * hs + c_half) * f32);
  // Sequence parallelism (model/tensor_parallel.h): the norms, the residual sums and the
  // stage's input hold rows / tp; the products' side keeps its tp-split widths over all rows.
  const bool sp = config.parallel.sequence_parallel && t > 1;
  const double region = sp ? rows / t : rows;
  const double norm = region * C * e + region * f32 * (arch.norm == NormKind::kLayerNorm ? 2 : 1);  // out, rstd[, mean]
  // A block's activations by what recomputation does with them (model/layers/block.h): the
  // output is always kept; the rest of the products' side (norms, QKV, fc, the first residual
  // sum) unless the block recomputes fully; the attention core and MLP activation only without
  // recomputation. What a recomputing block does not keep lives once per stage.
  const double output = region * C * e;
  const double products = 2 * norm + rows * qkv_w * e + rows * Fl * e + region * C * e;
  const double core = att_state + rows * out_w * e + rows * Il * e;
  const Recompute recompute = recompute_from_name(config.training.recompute);
  const int layers = spec.num_layers(), recomputed = recomputed_blocks(config, spec);
  auto kept = [&](Recompute r) {
    return output + (r == Recompute::kFull ? 0.0 : products) + (r == Recompute::kNone ? core : 0.0);
  };
  // An MoE block (model/layers/moe.h) has no dense MLP: it keeps neither the MLP's fc output
  // nor its activation, and keeps its own buffers (moe_kept) whatever the recomputation.
  const double mlp_products = rows * Fl * e, mlp_core = rows * Il * e;
  auto kept_moe = [&](Recompute r) {
    return kept(r) - (r == Recompute::kFull ? 0.0 : mlp_products) - (r == Recompute::kNone ? mlp_core : 0.0);
  };
  const MoeMemory moe = moe_memory(mc, rows, t, plan.ep, e);
  double block_kept = 0, recompute_set = 0;
  {
    int i = 0;
    for (const LayerRange& chunk : spec.chunks)
      for (int l = chunk.first; l < chunk.first + chunk.count; ++l, ++i) {
        const bool is_moe = mc.moe.is_moe_layer(l);
        const Recompute r = i < recomputed ? recompute : Recompute::kNone;
        block_kept += is_moe ? kept_moe(r) + moe.kept : kept(r);
        // The recomputed blocks share one set, as large as the largest block's (a dense one's).
        if (i < recomputed)
          recompute_set = std::max(recompute_set, is_moe ? kept_moe(Recompute::kNone) - kept_moe(recompute)
                                                         : kept(Recompute::kNone) - kept(recompute));
      }
  }
  const int moe_blocks = spec.moe_layers(mc.moe);
  // A split backward (zero-bubble) keeps output gradients from its input-gradient pass to its
  // weight-gradient pass: per block QKV's and fc's (all rows), and a region's rows each for the
  // two projections' and the two norms'; the final norm's and the embedding's input gradient.
  const bool split = plan.schedule == ScheduleKind::kZeroBubble;
  const double kept_grads = split ? rows * (qkv_w + Fl) * e + 4 * region * C * e : 0.0;
  // The slot's input (one per model chunk) and its blocks.
  double per_slot = double(spec.chunks.size()) * region * C * e + block_kept + layers * kept_grads;
  if (split && spec.has_head) per_slot += region * C * e;
  if (split && spec.has_embedding) per_slot += region * C * e;
  if (spec.has_embedding) per_slot += rows * i32;                              // tokens
  if (config.data.document_mask) per_slot += double(spec.chunks.size()) * rows * i32;  // document positions
  if (spec.has_head) per_slot += rows * i32 + norm + rows * Vl * e + rows * f32;  // targets, ln_f, logits, losses
  // tmp and dres (a region's rows), the products' gradients, the loss's statistics; with
  // sequence parallelism the gathered rows and the partial sums (N, C) and a norm's gradients.
  const double scratch = 2 * region * C * e + (split ? 0.0 : rows * qkv_w * e) + rows * out_w * e +
                         rows * Fl_scratch * e + (arch.mlp == MlpKind::kSwiGlu ? rows * Il_scratch * e : 0.0) +
                         3 * rows * f32 + att_work + (moe_blocks > 0 ? moe.scratch : 0.0) +
                         (sp ? 2 * rows * C * e : 0.0) + (sp || split || lora.enabled() ? 2 * C * f32 : 0.0) +
                         (split && !spec.has_embedding ? region * C * e : 0.0) +  // the arrival buffer
                         (split ? C * e : 0.0) +  // the norms' stand-in weight
                         ring_scratch;
  // LoRA: each adapter's (N, r) intermediate and its gradient, and a replicated matrix's partial
  // gradient (r, widest product); a base stored apart: its largest weight in the compute dtype.
  const double widest = std::max({C, double((mc.n_head + 2 * mc.kv_heads()) * mc.head_dim()), double(mc.mlp_width())});
  // Under dropout, an adapter's dropped input and its gradient (N, its widest input).
  const double lora_scratch =
      lora.enabled() ? 2 * rows * lora.rank * e + widest * lora.rank * f32 + double(apart.max_local_numel) * e +
                           (lora.dropout > 0 ? 2 * rows * std::max(C, Il) * e : 0.0)
                     : 0.0;
  mem.activations = slots * per_slot + recompute_set;
  mem.workspace = scratch + lora_scratch;
  mem.activations_per_micro_batch = per_slot;

  // Rotary tables (max_seq_len, hs/2) twice, float32; under context parallelism the rows of the
  // stage's T positions.
  if (!arch.learned_positions && spec.num_layers() > 0)
    mem.buffers = 2.0 * (ring ? T : mc.max_seq_len) * (hs / 2) * f32;
  // Each MoE block with shared experts: their combine's indices and unit weights (N each).
  mem.buffers += moe_blocks * moe.buffers;
  return mem;
}

// The parameters of a stage that its matrix products use, counted as model/flop_count.h counts
// the model's N (so the stages add up to it): the embedding lookup is not a product, the head
// counts its real vocabulary rows, everything else its logical size.
double stage_flop_parameters(const ParamTable& logical, const StageSpec& spec, const ModelConfig& mc) {
  StageSpec whole_slice = spec;
  whole_slice.tp = 1;
  whole_slice.tp_rank = 0;
  double n = 0;
  for (const ParamSpec& s : logical.specs()) {
    if (!s.placement.on(whole_slice)) continue;
    if (s.split == TpSplit::kVocabRows)
      n += s.placement.kind == Placement::Kind::kLastStage ? double(mc.vocab_size) * double(s.shape[1]) : 0.0;
    else
      n += double(s.numel);
  }
  return n;
}

// Whether any group of one kind spans nodes of gpus_per_node consecutive ranks. Each group is
// listed once, from its member with coordinate 0 along the axis (first_member), so the work is
// linear in the world size.
template <typename FirstMember, typename GroupOf>
bool spans_nodes(const ParallelLayout& layout, int gpus_per_node, FirstMember first_member, GroupOf group) {
  for (int r = 0; r < layout.world_size(); ++r) {
    if (!first_member(layout.coord(r))) continue;
    const std::vector<int> g = group(r);
    const auto [lo, hi] = std::minmax_element(g.begin(), g.end());
    if (*lo / gpus_per_node != *hi / gpus_per_node) return true;
  }
  return false;
}

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(int(i));
  return d;
}

}  // namespace

std::string to_string(PlanDType dtype) { return dtype == PlanDType::kFp32 ? "fp32" : "bf16"; }

PlannedMemory rank_memory(const Config& config, const LayoutPlan& plan, int rank, const MemoryOptions& options) {
  const ParamTable logical = decoder_param_table(config.model);
  const RankCoord c = plan.layout.coord(rank);
  return memory_of(config, plan, logical, plan.stage_of(rank), c.pp, plan.layout.replica_index(c), options);
}

double ring_allreduce_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / link.bandwidth + 2.0 * (n - 1) * link.latency;
}

double reduce_scatter_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return double(n - 1) / n * bytes / link.bandwidth + double(n - 1) * link.latency;
}

double allgather_seconds(double bytes, int n, const Link& link) { return reduce_scatter_seconds(bytes, n, link); }

double alltoall_seconds(double bytes, int n, const Link& link) { return reduce_scatter_seconds(bytes, n, link); }

double send_recv_seconds(double bytes, const Link& link) { return bytes / link.bandwidth + link.latency; }

double parameter_server_seconds(double bytes, int workers, int servers, bool colocated, const Link& link) {
  const int remote = colocated ? workers - 1 : workers;
  if (remote <= 0) return 0;
  return double(remote) * bytes / (double(servers) * link.bandwidth) + double(remote) * link.latency;
}


double cluster_mttf_hours(double gpu_mttf_hours, int gpus) { return gpu_mttf_hours / gpus; }

double young_daly_interval_seconds(double checkpoint_seconds, double mttf_seconds) {
  return std::sqrt(2.0 * checkpoint_seconds * mttf_seconds);
}

std::string LayoutChoice::name() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "tp%d pp%d dp%d zero%d mbs%d m%d", tp, pp, dp, zero_stage, micro_batch_size,
                num_micro_batches);
  return std::string(buf) + (ep > 1 ? " ep" + std::to_string(ep) : "") + (schedule != "1f1b" ? " " + schedule : "") +
         (sequence_parallel ? " sp" : "") +
         (recompute != "none" ? " recompute-" + recompute : "") + (offload ? " offload" : "");
}

int64_t global_batch_sequences(const Config& config, int gpus) {
  const TrainingConfig& tc = config.training;
  const ParallelConfig& p = config.parallel;
  if (tc.batch_size > 0) return tc.batch_size;
  int dp = p.dp;
  if (dp == 0) {
    if (gpus % (p.tp * p.pp) != 0)
      throw ConfigError("plan: training.batch_size = 0 makes the global batch dp x num_micro_batches x "
                        "micro_batch_size, with parallel.dp = 0 read as gpus / (tp x pp), but " +
                        std::to_string(gpus) + " GPUs do not divide by parallel.tp x parallel.pp = " +
                        std::to_string(p.tp * p.pp) + "; set the global batch with --set training.batch_size=N");
    dp = gpus / (p.tp * p.pp);
  }
  return int64_t{dp} * p.num_micro_batches * p.micro_batch_size;
}

Config config_for_layout(const Config& config, const LayoutChoice& choice, int64_t global_batch) {
  Config c = config;
  c.parallel.tp = choice.tp;
  c.parallel.pp = choice.pp;
  c.parallel.dp = choice.dp;
  c.parallel.cp = 1;  // the search does not try context parallelism (docs/planner.md)
  c.parallel.zero_stage = choice.zero_stage;
  c.parallel.ep = choice.ep;
  c.parallel.micro_batch_size = choice.micro_batch_size;
  c.parallel.num_micro_batches = choice.num_micro_batches;
  c.training.batch_size = global_batch;
  c.training.recompute = choice.recompute;
  c.training.recompute_layers = 0;
  c.parallel.offload_optimizer = choice.offload;
  c.parallel.sequence_parallel = choice.sequence_parallel;
  c.parallel.schedule = choice.schedule;
  // The config's virtual stages go with its interleaved schedule; the other schedules have one.
  if (choice.schedule != "interleaved-1f1b") c.parallel.virtual_stages = 1;
  if (int(c.parallel.stage_layers.size()) != choice.pp) c.parallel.stage_layers.clear();
  // plan_layout's messages say where a key was set: here, by the search.
  for (const char* key : {"parallel.tp", "parallel.pp", "parallel.dp", "parallel.cp", "parallel.ep", "parallel.zero_stage",
                          "parallel.micro_batch_size", "parallel.num_micro_batches", "training.batch_size",
                          "training.recompute", "training.recompute_layers", "parallel.offload_optimizer",
                          "parallel.sequence_parallel", "parallel.schedule"})
    c.origin[key] = "tried by trainer plan";
  return c;
}

LayoutEstimate estimate_layout(const Config& config, const LayoutPlan& plan, const PlanOptions& options) {
  const ModelConfig& mc = config.model;
  const ParallelLayout& layout = plan.layout;
  const Cluster& cl = options.cluster;
  const int t = layout.tp(), p = layout.pp(), d = layout.dp(), m = plan.micro_batches;
  const int B = config.parallel.micro_batch_size, T = config.training.seq_len;
  const double e = element_bytes(options.memory.dtype);
  LayoutEstimate est;
  est.layout = {t, p, d, config.parallel.zero_stage, B, m, config.training.recompute,
                config.parallel.offload_optimizer, config.parallel.sequence_parallel, config.parallel.schedule};
  est.layout.ep = plan.ep;
  est.valid = true;
  est.pp_idle_fraction = idle_fraction_formula(plan.schedule, p, m, plan.virtual_stages);

  const int gpn = std::max(1, cl.gpus_per_node);
  est.tp_inter_node = spans_nodes(
      layout, gpn, [](const RankCoord& c) { return c.tp == 0; }, [&](int r) { return layout.tp_group(r); });
  est.pp_inter_node = spans_nodes(
      layout, gpn, [](const RankCoord& c) { return c.pp == 0; }, [&](int r) { return layout.pp_group(r); });
  est.dp_inter_node = spans_nodes(
      layout, gpn, [](const RankCoord& c) { return c.dp == 0; }, [&](int r) { return layout.dp_group(r); });
  const Link& tp_link = est.tp_inter_node ? cl.inter_node : cl.intra_node;
  const Link& pp_link = est.pp_inter_node ? cl.inter_node : cl.intra_node;
  const Link& dp_link = est.dp_inter_node ? cl.inter_node : cl.intra_node;

  const ParamTable logical = decoder_param_table(mc);
  const double rate = cl.tflops * 1e12;
  const double rows = double(B) * T, act_bytes = rows * mc.n_embd * e;
  std::vector<double> compute(static_cast<size_t>(p), 0.0), tp_comm = compute, dp_comm = compute, ep_comm = compute;
  // Expert parallelism's exchanges run on groups of ep consecutive data-parallel ranks.
  const int ep = plan.ep;
  est.ep_inter_node = ep > 1 && spans_nodes(
      layout, gpn, [&](const RankCoord& c) { return c.dp % ep == 0; },
      [&](int r) {
        const RankCoord c = layout.coord(r);
        std::vector<int> g;
        for (int i = 0; i < ep; ++i) g.push_back(layout.rank_of({c.tp, c.pp, c.dp + i, c.cp}));
        return g;
      });
  const Link& ep_link = est.ep_inter_node ? cl.inter_node : cl.intra_node;
  for (int s = 0; s < p; ++s) {
    const StageSpec spec = plan.stage_of(layout.rank_of({0, s, 0}));
    const PlannedMemory mem = memory_of(config, plan, logical, spec, s, 0, options.memory);
    est.stage_memory.push_back(mem);
    if (s == 0 || mem.total() > est.memory.total()) est.memory = mem;

    // Compute: 6 N + 6 L T C per token (model/flop_count.h) for the stage's part, split over tp;
    // under LoRA 4 N (no weight gradients of the frozen products) + 6 per adapter parameter.
    const LoraSpec lora = lora_spec(config);
    // A mixture of experts' token runs top_k of its n_experts experts: the others' parameters
    // do no work for it (model/flop_count.h's active parameters).
    const int moe_blocks = spec.moe_layers(mc.moe);
    const double idle_experts =
        moe_blocks * double(mc.moe.n_experts - mc.moe.top_k) * 3.0 * mc.expert_width() * mc.n_embd;
    double flops = (lora.enabled() ? 4.0 : 6.0) * (stage_flop_parameters(logical, spec, mc) - idle_experts) +
                   6.0 * spec.num_layers() * double(T) * mc.n_embd;
    if (lora.enabled()) flops += 6.0 * stage_flop_parameters(lora_param_table(mc, lora), spec, mc);
    // Recomputation adds, per recomputed block, the attention core's forward (2 T C per token:
    // selective) or the block's whole forward (full; one more all-reduce with tp, below).
    const int recomputed = recomputed_blocks(config, spec);
    const Recompute recompute = recompute_from_name(config.training.recompute);
    if (recompute == Recompute::kSelective) flops += 2.0 * recomputed * double(T) * mc.n_embd;
    if (recompute == Recompute::kFull) {
      int i = 0;
      for (const LayerRange& chunk : spec.chunks)
        for (int l = chunk.first; l < chunk.first + chunk.count; ++l, ++i)
          if (i < recomputed) flops += 2.0 * recomputed_parameters(logical, mc, l) + 2.0 * double(T) * mc.n_embd;
    }
    compute[size_t(s)] = rows * flops / (t * rate);
    // Megatron's tensor parallelism: per layer two all-reduces of (B, T, C) forward (attention
    // and MLP outputs) and two backward (their inputs' gradients); the vocab-parallel embedding
    // sums its output, the head its input's gradient, the cross-entropy the row maxima and then
    // two sums per row.
    // Sequence parallelism replaces each of those all-reduces by a reduce-scatter and an
    // all-gather (the same bytes), and adds one all-gather per column-parallel layer and for
    // the head in the backward (the input gathered again for the weight gradient, rather than
    // kept) and the norms' gradient sums (C or 2C floats, one per norm and micro-batch).
    if (t > 1 && config.parallel.sequence_parallel) {
      const int blocks = spec.num_layers(), again = recompute == Recompute::kFull ? recomputed : 0;
      // A split backward gathers each projection's output gradient once more, in its weight pass.
      const int per_block = plan.schedule == ScheduleKind::kZeroBubble ? 12 : 10;
      const int halves = per_block * blocks + 4 * again + (spec.has_embedding ? 2 : 0) + (spec.has_head ? 3 : 0);
      const int norms = 2 * blocks + (spec.has_head ? 1 : 0);
      const double norm_bytes = double(mc.n_embd) * 4 * (decoder_arch(mc).norm == NormKind::kLayerNorm ? 2 : 1);
      tp_comm[size_t(s)] = halves * allgather_seconds(act_bytes, t, tp_link) +
                           norms * ring_allreduce_seconds(norm_bytes, t, tp_link);
    } else if (t > 1) {
      const int full = 4 * spec.num_layers() + (spec.has_embedding ? 1 : 0) + (spec.has_head ? 1 : 0) +
                       (recompute == Recompute::kFull ? recomputed : 0);
      tp_comm[size_t(s)] = full * ring_allreduce_seconds(act_bytes, t, tp_link);
    }
    // Expert parallelism: per MoE block and micro-batch, the counts per expert (E integers) and
    // four exchanges of each rank's routed rows (N k rows of C: the inputs out and the outputs
    // back, then their gradients), of which (ep-1)/ep leave the rank when the router balances
    // the experts. The blocks wait for them: nothing hides them.
    if (ep > 1 && moe_blocks > 0) {
      const double routed = rows * mc.moe.top_k * mc.n_embd * e;
      ep_comm[size_t(s)] = moe_blocks * (2 * alltoall_seconds(4.0 * mc.moe.n_experts, ep, ep_link) +
                                         4 * alltoall_seconds(routed, ep, ep_link));
    }
    if (t > 1 && spec.has_head)  // the cross-entropy's row maxima and row sums, either way
      tp_comm[size_t(s)] += ring_allreduce_seconds(rows * 4, t, tp_link) + ring_allreduce_seconds(rows * 8, t, tp_link);
    // Data parallel: the stage's gradients (in parallel.grad_reduce_dtype) and, for ZeRO 1 and
    // 2, the parameters gathered back. Reductions during a backward hide behind it
    // (ZeRO 0/1: the last micro-batch's; ZeRO 2: every micro-batch's); the gather after the
    // update and a parameter server's push and pull do not.
    const LocalTable stage_table(logical, spec);
    const double P = double(stage_table.total_numel());
    const double window = (2.0 / 3.0) * (compute[size_t(s)] + tp_comm[size_t(s)]);
    double dps = 0;
    if (d > 1) {
      const int zero = effective_zero_stage(config, plan);
      const double g = config.parallel.grad_reduce_dtype == "bf16" ? 2.0 : 4.0;  // bytes per gradient
      // Expert parallelism (grad_sync.h): ZeRO shards over the q = d / ep ranks holding the same
      // experts; the experts' gradients are summed over them only, the dense ones over all d ranks
      // and all-reduced whole. `scatter`: the experts' part reduce-scattered (ZeRO 1 to 3).
      const int q = d / ep;
      double P_experts = 0;
      for (const LocalParam& lp : stage_table.params()) P_experts += lp.spec->expert >= 0 ? double(lp.numel) : 0.0;
      auto reduction = [&](bool scatter) {
        if (ep == 1) return scatter ? reduce_scatter_seconds(g * P, d, dp_link) : ring_allreduce_seconds(g * P, d, dp_link);
        return ring_allreduce_seconds(g * (P - P_experts), d, dp_link) +
               (scatter ? reduce_scatter_seconds(g * P_experts, q, dp_link) : ring_allreduce_seconds(g * P_experts, q, dp_link));
      };
      if (config.parallel.dp_sync == "parameter-server") {
        // Every data-parallel rank serves its shard: pushes of the gradient, then pulls of the
        // updated weights, each (d - 1)/d P/B on a server's link.
        dps = parameter_server_seconds(4 * P, d, d, true, dp_link) + parameter_server_seconds(e * P, d, d, true, dp_link);
      } else if (zero == 0) {
        dps = std::max(0.0, reduction(false) - window);
      } else if (zero < 3) {
        const double rs = std::max(0.0, reduction(true) - window);
        dps = (zero == 2 ? m : 1) * rs + allgather_seconds(e * P, q, dp_link);
      } else {
        // ZeRO 3: ZeRO 2's reductions; every micro-batch gathers each step of the units' walk
        // before it runs forward and again backward (the embedding's backward reads no
        // weight), the next step's gather hidden behind this step's compute (a block's: a
        // third of it forward, two thirds backward; the embedding's and head's are counted as
        // hiding nothing) and the first of each pass exposed.
        const double rs = std::max(0.0, reduction(true) - window);
        const ParameterUnits units = parameter_units(stage_table);
        const double per_block = spec.num_layers() > 0 ? compute[size_t(s)] / spec.num_layers() : 0.0;
        const size_t steps = units.walk.size();
        std::vector<double> gather(steps), hides(steps, 0.0);  // per step: its gather, and its compute
        for (size_t i = 0; i < steps; ++i) {
          double elems = 0;
          for (const int u : units.walk[i]) elems += double(units.ranges[size_t(u)].size());
          gather[i] = allgather_seconds(e * elems, q, dp_link);
          const bool block = int(i) != units.embedding_step() && int(i) != units.head_step();
          hides[i] = block ? per_block : 0.0;
        }
        double passes = 0;
        for (size_t i = 0; i < steps; ++i)  // forward
          passes += i == 0 ? gather[i] : std::max(0.0, gather[i] - hides[i - 1] / 3);
        const size_t last = units.embedding_step() >= 0 ? 1 : 0;
        for (size_t i = steps; i-- > last;)  // backward
          passes += i + 1 == steps ? gather[i] : std::max(0.0, gather[i] - 2 * hides[i + 1] / 3);
        dps = m * (rs + passes);
      }
    }
    // A tied embedding's two copies are summed over the first and last stage at the step's end.
    if (mc.tied() && p > 1 && (spec.has_embedding || spec.has_head)) {
      const double vocab_bytes = double(mc.padded_vocab() / t) * mc.n_embd * 4;
      dps += ring_allreduce_seconds(vocab_bytes, 2, pp_link);
    }
    dp_comm[size_t(s)] = dps;
  }
  // The pipeline runs at its slowest stage: with micro-batch times u_s its makespan is
  // (m - 1) max u + sum u (= (m + p - 1) u for equal stages), and the first forward and last
  // backward cross every stage boundary once.
  double slowest = 0, sum = 0;
  size_t worst = 0;
  for (size_t s = 0; s < size_t(p); ++s) {
    const double u = compute[s] + tp_comm[s] + ep_comm[s];
    sum += u;
    if (u > slowest) {
      slowest = u;
      worst = s;
    }
  }
  est.time.compute_s = m * compute[worst];
  est.time.tp_comm_s = m * tp_comm[worst];
  est.time.ep_comm_s = m * ep_comm[worst];
  // Sequence parallelism sends each tensor-parallel rank's rows only.
  const double sent_bytes = config.parallel.sequence_parallel && t > 1 ? act_bytes / t : act_bytes;
  // Zero-bubble defers the weight gradients (a third of a micro-batch's work: forward, input
  // and weight gradients taken as equal) into the bubble, which keeps (p-1)(F+B-W) of 1F1B's
  // (p-1)(F+B+W): a third when m >= p.
  // With fewer micro-batches than stages it keeps more: the ideal timeline's share, as bubble
  // time idle·m·u/(1 − idle) against 1F1B's (p − 1)·u.
  double bubble = sum - slowest;
  if (plan.schedule == ScheduleKind::kZeroBubble && p > 1) {
    const double idle = idle_fraction_formula(plan.schedule, p, m);
    bubble *= idle * m / ((1.0 - idle) * (p - 1));
  }
  // Interleaved 1F1B cuts the bubble v-fold, but the first forward and the last backward cross
  // all v·p - 1 boundaries between virtual stages.
  const int v = plan.virtual_stages;
  bubble /= v;
  est.time.pp_idle_s = p > 1 ? bubble + 2.0 * (v * p - 1) * send_recv_seconds(sent_bytes, pp_link) : 0.0;
  est.time.dp_comm_s = *std::max_element(dp_comm.begin(), dp_comm.end());
  if (config.parallel.offload_optimizer) {
    // The largest range (a stage's, or its ZeRO shard): float32 gradients to the host and float32
    // weights back. On a GPU also the host's update, which reads and writes the weights and both
    // moments and reads the gradients (28 bytes per element), and the three are pipelined in
    // chunks (backend/offload_pipeline.h): the first chunk passes through all three, each further
    // one adds the slowest. On the CPU the update runs either way and the copies are the host's
    // own, one after the other: only they are extra.
    double range = 0;
    for (const PlannedMemory& pm : est.stage_memory) range = std::max(range, pm.offloaded / 16.0);
    const Link& h = cl.host_link;
    if (options.memory.gpu && range > 0) {
      const double chunk = double(offload_chunk_elements(size_t(range))), chunks = std::ceil(range / chunk);
      const double copy = h.latency + 4 * chunk / h.bandwidth, update = 28 * chunk / cl.host_memory_bw;
      est.time.offload_s = 2 * copy + update + (chunks - 1) * std::max(copy, update);
    } else {
      est.time.offload_s = 2 * (h.latency + 4 * range / h.bandwidth);
    }
  }
  const double step = est.time.step_s();
  est.tokens_per_s = step > 0 ? double(d) * m * B * T / step : 0;
  est.efficiency = step > 0 ? est.time.compute_s / step : 0;

  est.fits = est.memory.total() <= cl.gpu_memory;
  if (!est.fits) {
    // In the unit of the GPU's memory: "needs 91.3 GiB > 80.0 GiB per GPU".
    const bool gib = cl.gpu_memory >= 1024.0 * 1024 * 1024;
    const double unit = gib ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
    char buf[160];
    std::snprintf(buf, sizeof buf, "needs %.1f %s > %.1f %s per GPU", est.memory.total() / unit, gib ? "GiB" : "MiB",
                  cl.gpu_memory / unit, gib ? "GiB" : "MiB");
    est.why = buf;
  }
  return est;
}

std::vector<LayoutEstimate> plan_layouts(const Config& config, const PlanOptions& options) {
  const int N = options.cluster.gpus;
  if (N < 1) throw ConfigError("plan: --gpus must be at least 1");
  const int64_t G = global_batch_sequences(config, N);
  const bool ps = config.parallel.dp_sync == "parameter-server";
  std::vector<LayoutEstimate> out;
  for (int tp : divisors(N))
    for (int pp : divisors(N / tp)) {
      const int dp = N / (tp * pp);
      LayoutChoice base{tp, pp, dp, ps || dp == 1 ? 0 : config.parallel.zero_stage, 0, 0};
      // Interleaving needs stages to interleave over: at pp 1 the layout runs plain 1F1B.
      const bool interleaved = config.parallel.schedule == "interleaved-1f1b";
      base.schedule = interleaved && pp == 1 ? "1f1b" : config.parallel.schedule;
      auto refused = [&](const std::string& why) {
        LayoutEstimate r;
        r.layout = base;
        r.why = why;
        out.push_back(r);
      };
      if (G % dp != 0) {
        refused("the global batch of " + std::to_string(G) + " sequences does not split over dp = " +
                std::to_string(dp) + " replicas");
        continue;
      }
      const std::vector<int> sizes = divisors(G / dp);
      try {
        LayoutChoice first = base;
        first.micro_batch_size = sizes[0];
        first.num_micro_batches = int(G / dp / sizes[0]);
        const Config c = config_for_layout(config, first, G);
        validate_config(c);
        plan_layout(c, N);
      } catch (const ConfigError& e) {
        refused(e.what());
        continue;
      }
      // Expert parallelism (MoE models): every ep dividing both the data-parallel degree and
      // the experts.
      std::vector<int> eps = {1};
      if (config.model.moe.enabled())
        for (int ep : divisors(dp))
          if (ep > 1 && config.model.moe.n_experts % ep == 0) eps.push_back(ep);
      // The config's schedule, and with pipeline stages zero-bubble too.
      std::vector<std::string> schedules = {base.schedule};
      if (pp > 1 && base.schedule != "zero-bubble") schedules.push_back("zero-bubble");
      for (int ep : eps) {
      // ZeRO shards over dp / ep ranks: with one there is nothing to shard (GradientSync runs
      // ZeRO 0), so only 0 is tried.
      const std::vector<int> zeros = ps || dp / ep == 1 ? std::vector<int>{0} : std::vector<int>{0, 1, 2, 3};
      for (const std::string& schedule : schedules)
        for (int zero : zeros)
          for (int b : sizes)
            for (const char* recompute : {"none", "selective", "full"})
              for (bool offload : {false, true})
                for (bool sp : {false, true}) {
                  LayoutChoice choice{tp, pp, dp, zero, b, int(G / dp / b), recompute, offload, sp, schedule};
                  choice.ep = ep;
                  const Config c = config_for_layout(config, choice, G);
                  // The trainer's own rules leave out what it would refuse: sequence parallelism
                  // at tp 1 or a seq_len tp does not divide, zero-bubble with recomputation,
                  // interleaving over micro-batches or layers it cannot group.
                  std::optional<LayoutPlan> plan;
                  try {
                    validate_config(c);
                    plan = plan_layout(c, N);
                  } catch (const ConfigError&) {
                    continue;
                  }
                  out.push_back(estimate_layout(c, *plan, options));
                }
      }
    }
  auto category = [](const LayoutEstimate& l) { return l.fits ? 0 : l.valid ? 1 : 2; };
  // Speeds equal to 9 digits (ZeRO stages whose communication hides alike) are equal: the one
  // that needs less memory comes first. Rounded, so the order stays a strict weak one.
  auto speed = [](const LayoutEstimate& l) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", l.tokens_per_s);
    return std::strtod(buf, nullptr);
  };
  std::stable_sort(out.begin(), out.end(), [&](const LayoutEstimate& a, const LayoutEstimate& b) {
    if (category(a) != category(b)) return category(a) < category(b);
    if (category(a) == 0 && speed(a) != speed(b)) return speed(a) > speed(b);
    if (category(a) == 0) return a.memory.total() < b.memory.total();
    if (category(a) == 1) return a.memory.total() < b.memory.total();
    return false;
  });
  return out;
}


}  // namespace feast
