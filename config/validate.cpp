// Every rule that relates config keys, and the checks a run makes of its config before
// anything is allocated. This is the one place such rules live: the rest of the code receives
// values that passed them.
#include "config/validate.h"

#include <string>

#include "backend/backend.h"
#include "config/key_table.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/plural.h"

namespace feast {

using namespace config_table;

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ConfigError(where + ": " + message);
}

// A fault that names a rank outside the world.
void check_fault_ranks(const Config& config, int world_size) {
  const FaultConfig& fault = config.fault;
  for (const auto& [key, rank] : {std::pair{"fault.kill_rank", fault.kill_rank}, std::pair{"fault.stall_rank", fault.stall_rank}})
    if (rank >= world_size)
      fail(config.where(key), std::string(key) + " = " + std::to_string(rank) + " is not a rank of this job of " +
                                  count_of(world_size, "rank") + "; give a rank from 0 to " +
                                  std::to_string(world_size - 1) + ", or -1 for none");
}

// LoRA's keys against each other and against what it cannot run with.
void validate_lora(const Config& c) {
  const LoraConfig& l = c.lora;
  if (l.double_quant && l.base_dtype != "nf4")
    fail(c.where("lora.double_quant"), "lora.double_quant = true quantizes the scales of an nf4 base, but "
                                       "lora.base_dtype = \"" + l.base_dtype + "\" (" + c.where("lora.base_dtype") +
                                       "); set lora.base_dtype = \"nf4\" or remove lora.double_quant");
  if (!l.enabled()) {
    if (l.base_dtype != "auto")
      fail(c.where("lora.base_dtype"), "lora.base_dtype = \"" + l.base_dtype + "\" stores a frozen base, but "
                                       "lora.rank = 0 (" + c.where("lora.rank") + ") trains every weight (full "
                                       "fine-tuning), which cannot be kept in " + l.base_dtype +
                                       "; set lora.rank (for example 8) to train adapters over a frozen base, "
                                       "or remove lora.base_dtype");
    // By value, not by origin: a saved config lists every key, these at their defaults.
    for (const auto& [key, set] : {std::pair<const char*, bool>{"lora.targets", !l.targets.empty()},
                                   std::pair<const char*, bool>{"lora.init_from", !l.init_from.empty()}})
      if (set)
        fail(c.where(key), std::string(key) + " is set but lora.rank = 0 (" + c.where("lora.rank") +
                               "): no adapters; set lora.rank (for example 8) to fine-tune with LoRA, or remove " + key);
    return;
  }
  if (l.dropout > 0 && c.parallel.cp > 1)
    fail(c.where("lora.dropout"), "lora.dropout = " + config_table::format_double(l.dropout) +
                                      " draws its masks by each token's place in its sequence, which parallel.cp = " +
                                      std::to_string(c.parallel.cp) + " (" + c.where("parallel.cp") +
                                      ") splits over ranks; set parallel.cp = 1 or lora.dropout = 0");
  try {
    (void)lora_param_table(c.model, lora_spec(c));
  } catch (const ConfigError& e) {
    fail(c.where("lora.targets"), e.what());
  }
  auto refuse = [&](const std::string& key, const std::string& what, const std::string& fix) {
    fail(c.where(key), what + " cannot run with LoRA (lora.rank = " + std::to_string(l.rank) + ", " +
                           c.where("lora.rank") + "): " + fix);
  };
  if (c.parallel.zero_stage == 3)
    refuse("parallel.zero_stage", "parallel.zero_stage = 3",
           "the adapters are small and the frozen base is not sharded; use zero_stage 1 or 2");
  if (c.parallel.dp_sync == "parameter-server")
    refuse("parallel.dp_sync", "parallel.dp_sync = \"parameter-server\"", "use dp_sync = \"allreduce\"");
  if (c.parallel.schedule == "zero-bubble")
    refuse("parallel.schedule", "parallel.schedule = \"zero-bubble\"",
           "its split backward has no adapter path; use \"1f1b\" or \"interleaved-1f1b\"");
}

// The first key of those `of` accepts whose value differs from its default, or null. By value, not
// by origin: a resolved config lists every key, the defaults included, and must pass.
template <typename Of>
const KeyDesc* first_key_off_default(const Config& c, Of of) {
  static const Config defaults;
  Config current = c, reference = defaults;
  for (const KeyDesc& k : keys())
    if (of(k) && value_text(k, current) != value_text(k, reference)) return &k;
  return nullptr;
}

// The mixture-of-experts keys against each other and against what MoE blocks cannot run with.
void validate_moe(const Config& c) {
  const MoeConfig& moe = c.model.moe;
  if (c.parallel.ep > 1 && !moe.enabled())
    fail(c.where("parallel.ep"), "parallel.ep = " + std::to_string(c.parallel.ep) + " divides a mixture of experts' "
                                 "experts over ranks, but model.moe.n_experts = 0 (" + c.where("model.moe.n_experts") +
                                 "): the model is dense; remove parallel.ep or set model.moe.n_experts");
  if (moe.enabled() && moe.n_experts % c.parallel.ep != 0)
    fail(c.where("parallel.ep"), "parallel.ep = " + std::to_string(c.parallel.ep) + " does not divide "
                                 "model.moe.n_experts = " + std::to_string(moe.n_experts) + " (" +
                                 c.where("model.moe.n_experts") + "): every expert-parallel rank runs as many "
                                 "experts; choose an ep that divides n_experts");
  if (!moe.enabled()) {
    if (const KeyDesc* k = first_key_off_default(c, [](const KeyDesc& d) { return std::string(d.section) == "model.moe"; })) {
      Config current = c;
      fail(c.where(k->full()), k->full() + " = " + value_text(*k, current) + " configures mixture-of-experts blocks, "
                               "but model.moe.n_experts = 0 (" + c.where("model.moe.n_experts") +
                               "): the model is dense; set model.moe.n_experts or remove " + k->full());
    }
    return;
  }
  const std::string experts = "model.moe.n_experts = " + std::to_string(moe.n_experts) + " (" +
                              c.where("model.moe.n_experts") + ")";
  if (moe.top_k > moe.n_experts)
    fail(c.where("model.moe.top_k"), "model.moe.top_k = " + std::to_string(moe.top_k) + " experts per token, but " +
                                         experts + "; choose top_k <= n_experts");
  if (c.model.moe_layers() == 0)
    fail(c.where("model.moe.every"), "model.moe.every = " + std::to_string(moe.every) + " makes block l MoE when (l + 1) "
                                     "% every == 0, and none of the model.n_layer = " + std::to_string(c.model.n_layer) +
                                     " blocks is; choose every <= n_layer");
  if (moe.shared_expert_gate && c.model.shared_expert_width() == 0)
    fail(c.where("model.moe.shared_expert_gate"), "model.moe.shared_expert_gate = true gates the shared experts, but "
                                                  "model.moe.n_shared_experts = 0 (" +
                                                      c.where("model.moe.n_shared_experts") +
                                                      "); set n_shared_experts or remove shared_expert_gate");
  auto refuse = [&](const std::string& key, const std::string& what, const std::string& fix) {
    fail(c.where(key), what + " cannot run with mixture-of-experts blocks (model.moe.n_experts = " +
                           std::to_string(moe.n_experts) + ", " + c.where("model.moe.n_experts") + "): " + fix);
  };
  if (c.lora.enabled())
    refuse("lora.rank", "LoRA (lora.rank = " + std::to_string(c.lora.rank) + ")",
           "fine-tune every weight (lora.rank = 0)");
  if (c.parallel.sequence_parallel)
    refuse("parallel.sequence_parallel", "parallel.sequence_parallel = true",
           "the router needs every token of the micro-batch on each tensor-parallel rank; remove it");
  if (c.parallel.cp > 1)
    refuse("parallel.cp", "parallel.cp = " + std::to_string(c.parallel.cp),
           "the load-balancing loss is over whole micro-batches; set parallel.cp = 1");
  if (c.parallel.schedule == "zero-bubble" || c.parallel.schedule == "interleaved-1f1b")
    refuse("parallel.schedule", "parallel.schedule = \"" + c.parallel.schedule + "\"",
           "its blocks run whole backwards in one chunk per stage; use \"1f1b\" or \"gpipe\"");
  if (c.parallel.ep > 1 && c.parallel.dp_sync == "parameter-server")
    fail(c.where("parallel.dp_sync"), "parallel.dp_sync = \"parameter-server\" serves every data-parallel replica "
                                      "the same tensors, but parallel.ep = " + std::to_string(c.parallel.ep) + " (" +
                                      c.where("parallel.ep") + ") gives each rank of an ep group its own experts; "
                                      "use parallel.dp_sync = \"allreduce\" or parallel.ep = 1");
}

}  // namespace

void validate_config(const Config& c) {
  auto fail2 = [&](const std::string& a, const std::string& va, const std::string& relation,
                   const std::string& b, const std::string& vb) {
    fail(c.where(a), a + " = " + va + " must be " + relation + " " + b + " = " + vb + " (" +
                         c.where(b) + ")");
  };
  const ModelConfig& m = c.model;
  if ((c.fault.kill_rank >= 0 || c.fault.stall_rank >= 0) && c.fault.at_step < 1) {
    const std::string key = c.fault.kill_rank >= 0 ? "fault.kill_rank" : "fault.stall_rank";
    fail(c.where(key), key + " is set but fault.at_step = " + std::to_string(c.fault.at_step) +
                           "; give the step (>= 1) at which the fault strikes");
  }
  if (c.training.recompute_layers > 0 && c.training.recompute == "none") {
    fail(c.where("training.recompute_layers"),
         "training.recompute_layers = " + std::to_string(c.training.recompute_layers) +
             " names blocks that recompute, but training.recompute = \"none\" (" + c.where("training.recompute") +
             "); set training.recompute = \"selective\" or \"full\", or remove training.recompute_layers");
  }
  if (c.parallel.schedule == "zero-bubble" && c.training.recompute != "none") {
    fail(c.where("parallel.schedule"),
         "parallel.schedule = \"zero-bubble\" runs each block's weight gradients after its input gradients, from "
         "what its forward kept, but training.recompute = \"" + c.training.recompute + "\" (" +
             c.where("training.recompute") + ") keeps less; use parallel.schedule = \"1f1b\" with recomputation, "
             "or training.recompute = \"none\" with zero-bubble");
  }
  validate_lora(c);
  validate_moe(c);
  const bool interleaved = c.parallel.schedule == "interleaved-1f1b";
  if (interleaved && c.parallel.virtual_stages < 2) {
    fail(c.where("parallel.schedule"),
         "parallel.schedule = \"interleaved-1f1b\" needs parallel.virtual_stages >= 2 model chunks per stage, "
         "but it is " + std::to_string(c.parallel.virtual_stages) + " (" + c.where("parallel.virtual_stages") +
             "); set it, or use parallel.schedule = \"1f1b\"");
  }
  if (!interleaved && c.parallel.virtual_stages != 1) {
    fail(c.where("parallel.virtual_stages"),
         "parallel.virtual_stages = " + std::to_string(c.parallel.virtual_stages) +
             " applies to parallel.schedule = \"interleaved-1f1b\", but the schedule is \"" + c.parallel.schedule +
             "\" (" + c.where("parallel.schedule") + "); set the schedule, or remove parallel.virtual_stages");
  }
  if (interleaved && c.parallel.pp < 2) {
    fail(c.where("parallel.schedule"), "parallel.schedule = \"interleaved-1f1b\" interleaves chunks of layers over "
                                       "pipeline stages and needs parallel.pp >= 2 (" + c.where("parallel.pp") +
                                           "); use parallel.schedule = \"1f1b\" at pp = 1");
  }
  if (interleaved && c.parallel.zero_stage == 3) {
    fail(c.where("parallel.zero_stage"),
         "parallel.zero_stage = 3 gathers each block's parameters in the order a contiguous stage runs them; "
         "parallel.schedule = \"interleaved-1f1b\" (" + c.where("parallel.schedule") +
             ") is not supported with it; use zero_stage 1 or 2, or schedule \"1f1b\"");
  }
  if (c.parallel.dp_sync == "parameter-server" && c.parallel.zero_stage != 0) {
    fail(c.where("parallel.zero_stage"),
         "parallel.zero_stage = " + std::to_string(c.parallel.zero_stage) + " cannot be combined with " +
             "parallel.dp_sync = \"parameter-server\" (" + c.where("parallel.dp_sync") + "): the servers shard " +
             "the optimizer state in ZeRO's place; remove parallel.zero_stage (or set it to 0), or use " +
             "dp_sync = \"allreduce\"");
  }
  if (c.parallel.grad_reduce_dtype != "fp32" && c.parallel.dp_sync == "parameter-server") {
    fail(c.where("parallel.grad_reduce_dtype"),
         "parallel.grad_reduce_dtype = \"" + c.parallel.grad_reduce_dtype + "\" applies to parallel.dp_sync = " +
             "\"allreduce\", but it is \"parameter-server\" (" + c.where("parallel.dp_sync") +
             "): the parameter server pushes fp32 gradients; remove parallel.grad_reduce_dtype");
  }
  if (c.parallel.ps_sparse_embedding && c.parallel.dp_sync != "parameter-server") {
    fail(c.where("parallel.ps_sparse_embedding"),
         "parallel.ps_sparse_embedding = true needs parallel.dp_sync = \"parameter-server\", but it is \"" +
             c.parallel.dp_sync + "\" (" + c.where("parallel.dp_sync") + ")");
  }
  if (c.parallel.ps_sparse_embedding && c.model.tied()) {
    const std::string tie_from = c.where("model.tie_embeddings") == "default"
                                     ? "the default for model.arch = \"" + m.arch + "\""
                                     : c.where("model.tie_embeddings");
    fail(c.where("parallel.ps_sparse_embedding"),
         "parallel.ps_sparse_embedding = true needs an untied token embedding, but model.tie_embeddings = true (" +
             tie_from + "): the tied head reads every row of the embedding, so its gradient is dense; set " +
             "model.tie_embeddings = false or remove parallel.ps_sparse_embedding");
  }
  if (c.parallel.ps_sparse_embedding && c.training.device != "cpu") {
    fail(c.where("parallel.ps_sparse_embedding"),
         "the sparse parameter server packs embedding rows in host memory; with training.device = \"" +
             c.training.device + "\" (" + c.where("training.device") +
             ") remove parallel.ps_sparse_embedding (the dense parameter server works on GPUs)");
  }
  // What the CPU computes in, and how it communicates.
  if (c.training.device == "cpu" && c.training.dtype == "bf16") {
    fail(c.where("training.dtype"), "training.dtype = \"bf16\" needs training.device = \"cuda\" (" +
                                        c.where("training.device") + "): the CPU backend computes in float32; use "
                                        "training.dtype = \"auto\" or \"fp32\"");
  }
  if (c.training.device == "cpu" && c.parallel.backend == "nccl") {
    fail(c.where("parallel.backend"), "parallel.backend = \"nccl\" needs training.device = \"cuda\" (" +
                                          c.where("training.device") + "): NCCL moves GPU memory; a CPU run "
                                          "communicates through MPI (parallel.backend = \"auto\" or \"mpi\")");
  }
  if (m.n_embd % m.n_head != 0) {
    fail2("model.n_embd", std::to_string(m.n_embd), "divisible by", "model.n_head",
          std::to_string(m.n_head));
  }
  if (c.training.seq_len > m.max_seq_len) {
    fail2("training.seq_len", std::to_string(c.training.seq_len), "<=", "model.max_seq_len",
          std::to_string(m.max_seq_len));
  }
  if (c.parallel.sequence_parallel && c.parallel.tp < 2) {
    fail(c.where("parallel.sequence_parallel"),
         "parallel.sequence_parallel = true splits tokens over the tensor-parallel ranks, but parallel.tp = " +
             std::to_string(c.parallel.tp) + " (" + c.where("parallel.tp") +
             "); set parallel.tp to 2 or more, or remove parallel.sequence_parallel");
  }
  const int cp = c.parallel.cp;
  if (cp > 1 && c.training.seq_len % (2 * cp) != 0) {
    fail(c.where("parallel.cp"),
         "parallel.cp = " + std::to_string(cp) + " splits each sequence into 2 * cp = " + std::to_string(2 * cp) +
             " equal chunks, which does not divide training.seq_len = " + std::to_string(c.training.seq_len) + " (" +
             c.where("training.seq_len") + "); choose a seq_len that 2 * cp divides, or another parallel.cp");
  }
  if (c.parallel.sequence_parallel && c.training.seq_len % (c.parallel.tp * cp) != 0) {
    fail(c.where("parallel.sequence_parallel"),
         "parallel.sequence_parallel = true splits each " + std::string(cp > 1 ? "context-parallel rank's share of a " : "") +
             "sequence over parallel.tp = " + std::to_string(c.parallel.tp) + " ranks (" + c.where("parallel.tp") +
             "), which does not divide " + (cp > 1 ? "training.seq_len / parallel.cp = " : "training.seq_len = ") +
             std::to_string(c.training.seq_len / cp) + " (" + c.where("training.seq_len") +
             "); choose a seq_len that " + (cp > 1 ? "tp * cp" : "tp") + " divides, or remove parallel.sequence_parallel");
  }
  // The CUDA ring kernels hold a row of the head in a warp's registers, 8 elements per lane.
  constexpr int kRingMaxHeadDim = 256;
  if (cp > 1 && c.training.device == "cuda" && m.head_dim() > kRingMaxHeadDim) {
    fail(c.where("parallel.cp"),
         "parallel.cp = " + std::to_string(cp) + " on training.device = \"cuda\" runs attention through ring kernels "
             "that take head sizes up to " + std::to_string(kRingMaxHeadDim) + ", but model.n_embd / model.n_head = " +
             std::to_string(m.head_dim()) + "; set parallel.cp = 1 or use more heads");
  }
  if (cp > 1 && c.data.document_mask) {
    fail(c.where("data.document_mask"),
         "data.document_mask = true needs every document's keys on one rank, but parallel.cp = " + std::to_string(cp) +
             " (" + c.where("parallel.cp") + ") splits each sequence over ranks whose ring attention has no "
             "document boundaries; set parallel.cp = 1 or data.document_mask = false");
  }
  if (c.data.eos_id >= m.vocab_size) {
    fail2("data.eos_id", std::to_string(c.data.eos_id), "<", "model.vocab_size", std::to_string(m.vocab_size));
  }
  if (cp > 1 && c.parallel.dp_sync == "parameter-server") {
    fail(c.where("parallel.cp"),
         "parallel.cp = " + std::to_string(cp) + " needs parallel.dp_sync = \"allreduce\" (" +
             c.where("parallel.dp_sync") + "): the parameter server serves data-parallel replicas only; set "
             "parallel.cp = 1 or parallel.dp_sync = \"allreduce\"");
  }
  if (c.training.min_lr > c.training.lr) {
    fail2("training.min_lr", format_double(c.training.min_lr), "<=", "training.lr",
          format_double(c.training.lr));
  }
  if (!m.is_llama()) {
    // GPT-2 has no rotary embeddings, grouped-query attention or optional q/k/v biases: a key
    // given another value than its default is a config meant for another family.
    if (const KeyDesc* k = first_key_off_default(c, [](const KeyDesc& d) { return d.rule.llama_only; })) {
      Config current = c;
      fail(c.where(k->full()), k->full() + " = " + value_text(*k, current) + " applies to model.arch = \"llama\", but " +
                                   "model.arch = \"" + m.arch + "\" (" + c.where("model.arch") +
                                   "); remove it or set model.arch = \"llama\"");
    }
    return;
  }
  if (m.kv_heads() > m.n_head || m.n_head % m.kv_heads() != 0) {
    fail2("model.n_kv_head", std::to_string(m.n_kv_head), "a divisor of", "model.n_head", std::to_string(m.n_head));
  }
  if (m.head_dim() % 2 != 0) {
    fail(c.where("model.n_embd"), "rotary embeddings need an even head size, but model.n_embd / model.n_head = " +
                                      std::to_string(m.n_embd) + " / " + std::to_string(m.n_head) + " = " +
                                      std::to_string(m.head_dim()));
  }
  const RopeScaling& r = m.rope_scaling;
  if (r.rope_type == "llama3" && !(r.low_freq_factor < r.high_freq_factor)) {
    fail2("model.rope_scaling.low_freq_factor", format_double(r.low_freq_factor), "<",
          "model.rope_scaling.high_freq_factor", format_double(r.high_freq_factor));
  }
}

LayoutPlan check_run(const Config& config, int world_size, RunPurpose purpose) {
  if (purpose == RunPurpose::kEvaluate && config.data.val.empty())
    throw ConfigError("data.val is not set: name the validation shards in [data] val = \"...\" or with "
                      "--set data.val=PATH (make them with `trainer prepare-data`)");
  if (purpose == RunPurpose::kTrain && config.data.train.empty())
    throw ConfigError("data.train is not set: name the training shards in [data] train = \"...\" or with "
                      "--set data.train=PATH (make them with `trainer prepare-data`)");
  check_fault_ranks(config, world_size);
  // The device the config names must be there: said now, not after the run directory is made.
  if (config.training.device == "cuda" && (!cuda_backend_built() || cuda_device_count() == 0))
    make_backend(config.training.device, config.training.dtype);  // throws the reason, naming the key
  return plan_layout(config, world_size);
}

}  // namespace feast
