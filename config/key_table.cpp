// The config keys, one row each (see key_table.h), and the formatting of their values.
#include "config/key_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

namespace feast::config_table {
namespace {

// A key is reached from Config through a path of member pointers (two for [model], three for
// [model.rope_scaling]).
template <auto... Path>
auto& member(Config& c) {
  return (c.*....*Path);
}
Rule any() { return {}; }
Rule at_least(double v) {
  Rule r;
  r.min = Limit{v, false};
  return r;
}
Rule above(double v) {
  Rule r;
  r.min = Limit{v, true};
  return r;
}
Rule closed(double lo, double hi) {
  Rule r = at_least(lo);
  r.max = Limit{hi, false};
  return r;
}
Rule half_open(double lo, double hi) {
  Rule r = at_least(lo);
  r.max = Limit{hi, true};
  return r;
}
Rule one_of(std::vector<std::string> choices) {
  Rule r;
  r.choices = std::move(choices);
  return r;
}
// A rule for a key that only the Llama family uses.
Rule llama(Rule r) {
  r.llama_only = true;
  return r;
}
Rule non_empty() {
  Rule r;
  r.non_empty = true;
  return r;
}
// parallel.order's values: every order of tp, dp, pp, and of tp, cp, dp, pp, joined by '-'.
std::vector<std::string> axis_orders() {
  std::vector<std::string> out;
  for (std::vector<std::string> axes : {std::vector<std::string>{"dp", "pp", "tp"},
                                        std::vector<std::string>{"cp", "dp", "pp", "tp"}})
    do {
      std::string order;
      for (const std::string& a : axes) order += (order.empty() ? "" : "-") + a;
      out.push_back(order);
    } while (std::next_permutation(axes.begin(), axes.end()));
  return out;
}

}  // namespace

// In the order to_toml prints them; a dotted section is a sub-table of the one before it.
const std::vector<std::string> kSections = {"model", "model.rope_scaling", "model.moe", "parallel", "training",
                                            "data",  "checkpoint",         "logging",   "fault",    "lora"};


bool is_section(const std::string& name) {
  return std::find(kSections.begin(), kSections.end(), name) != kSections.end();
}

// Stringifying the member keeps every key name identical to its struct field.
#define FEAST_KEY(section, name) \
  #section, #name, &member<&Config::section, &decltype(Config::section)::name>
#define FEAST_MOE_KEY(name) \
  "model.moe", #name, &member<&Config::model, &ModelConfig::moe, &MoeConfig::name>
#define FEAST_ROPE_KEY(name) \
  "model.rope_scaling", #name, &member<&Config::model, &ModelConfig::rope_scaling, &RopeScaling::name>

std::string tie_in_use(const Config& c) { return c.model.tied() ? "true" : "false"; }

const std::vector<KeyDesc>& keys() {
  static const std::vector<KeyDesc> table = {
      {FEAST_KEY(model, arch), one_of({"gpt2", "llama"}), "model family",
       "model family. GPT-2: learned positions, LayerNorm with bias, GELU MLP with biases, q/k/v "
       "biases, head tied to the token embedding. Llama: rotary embeddings, RMSNorm, SwiGLU MLP, "
       "grouped-query attention, no biases (unless `qkv_bias`), untied head (unless `tie_embeddings`)"},
      {FEAST_KEY(model, n_layer), at_least(1), "transformer blocks",
       "transformer blocks"},
      {FEAST_KEY(model, n_head), at_least(1), "attention heads; must divide n_embd",
       "attention (query) heads", nullptr, ">= 1, divides `model.n_embd`"},
      {FEAST_KEY(model, n_embd), at_least(1), "channels of the residual stream",
       "channels of the residual stream; head_dim = n_embd / n_head (even for Llama: rotary pairs "
       "channels)", nullptr, ">= 1, multiple of `model.n_head`"},
      {FEAST_KEY(model, vocab_size), closed(2, 2147483647), "token ids are < vocab_size",
       "real vocabulary size: token ids are < vocab_size. Padded internally to a multiple of 128; "
       "padded logits are excluded from softmax and loss"},
      {FEAST_KEY(model, max_seq_len), at_least(1), "longest sequence (GPT-2: position rows)",
       "the longest sequence the model can see: GPT-2's rows of the learned position embedding, Llama's "
       "rows of the rotary tables"},
      {FEAST_KEY(model, init_std), above(0), "std of the normal init of weight matrices",
       "std of the normal initialisation of weight matrices (residual projections use init_std / sqrt(2 "
       "n_layer))"},
      {FEAST_KEY(model, n_kv_head), llama(at_least(0)), "key/value heads (llama); 0 = n_head",
       "*llama*: key/value heads of grouped-query attention (Hugging Face's `num_key_value_heads`); 0 = "
       "`n_head` (multi-head attention), 1 = multi-query", nullptr, ">= 0, divides `model.n_head`"},
      {FEAST_KEY(model, intermediate_size), at_least(0), "MLP width; 0 = the family default",
       "width of the MLP; 0 = the family's default: 4 n_embd for GPT-2, Meta's 2/3 of 4 n_embd rounded "
       "up to a multiple of 256 for Llama"},
      {FEAST_KEY(model, norm_eps), above(0), "LayerNorm / RMSNorm epsilon",
       "epsilon of the LayerNorms (GPT-2) or RMSNorms (Llama; Hugging Face's `rms_norm_eps`)"},
      {FEAST_KEY(model, rope_theta), llama(above(0)), "rotary base frequency (llama)",
       "*llama*: base of the rotary frequencies (Llama 3 uses 500000)"},
      {FEAST_KEY(model, qkv_bias), llama(any()), "biases on q, k, v (llama family)",
       "*llama*: biases on the q, k and v projections, as Qwen2 has"},
      {FEAST_KEY(model, tie_embeddings), any(), "LM head shares the token embedding",
       "the LM head shares the token embedding's weights (Hugging Face's `tie_word_embeddings`). The "
       "resolved config prints the value in use, marked `[inferred from model.arch]` when it is the "
       "family's default", &tie_in_use, nullptr, "GPT-2 `true`, Llama `false`"},
      {FEAST_KEY(model, init_from), any(), "Hugging Face model folder to start from; empty = random init",
       "a Hugging Face model folder (`config.json`, `model.safetensors` or a sharded set with "
       "`model.safetensors.index.json`) for GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM or "
       "Qwen2ForCausalLM. Its config.json sets the other [model] keys (a key set here too must agree, or "
       "the run stops naming both values) and its weights (float32, bfloat16 or float16) initialise a "
       "fresh run; each rank reads only its own slices. A run that resumes a checkpoint loads the "
       "checkpoint instead. See [finetune.md](finetune.md)", nullptr, "any; empty = random initialisation"},
      {FEAST_KEY(model, tokenizer), any(), "tokenizer folder; empty = init_from's, or bytes",
       "the tokenizer (a folder with `tokenizer.json`, `vocab.json` + `merges.txt` or `tokenizer.model`, "
       "or `\"byte\"`) that `trainer generate` encodes prompts with and `trainer export` copies; empty = "
       "`model.init_from` when it holds a tokenizer, else the byte tokenizer", nullptr,
       "any; empty = `model.init_from`'s"},
      {FEAST_ROPE_KEY(rope_type), llama(one_of({"default", "linear", "llama3"})), "rotary frequency scaling",
       "`\"default\"`: no scaling; `\"linear\"`: every frequency divided by `factor`; `\"llama3\"`: "
       "Llama 3.1's scaling, long wavelengths slowed by `factor`, short ones kept, the band between "
       "blended"},
      {FEAST_ROPE_KEY(factor), llama(above(0)), "context extension factor",
       "the context extension factor (`\"linear\"`, `\"llama3\"`)"},
      {FEAST_ROPE_KEY(low_freq_factor), llama(above(0)), "llama3: low-frequency bound",
       "`\"llama3\"`: wavelengths longer than original_max_position_embeddings / low_freq_factor are "
       "scaled fully", nullptr, "> 0, < `high_freq_factor`"},
      {FEAST_ROPE_KEY(high_freq_factor), llama(above(0)), "llama3: high-frequency bound",
       "`\"llama3\"`: wavelengths shorter than original_max_position_embeddings / high_freq_factor are "
       "kept"},
      {FEAST_ROPE_KEY(original_max_position_embeddings), llama(at_least(1)), "llama3: original context",
       "`\"llama3\"`: the context length the model was trained with"},

      {FEAST_MOE_KEY(n_experts), llama(at_least(0)), "experts per MoE block; 0 = dense model",
       "*llama*: routed experts in each mixture-of-experts block (transformers' `num_local_experts`, "
       "Qwen2-MoE's `num_experts`); 0 = no MoE, every block has the dense MLP. An MoE block replaces "
       "the MLP with a router (a (n_experts, n_embd) linear, softmax over experts) that sends every "
       "token to its `top_k` most probable experts, each a SwiGLU MLP of `intermediate_size`; their "
       "outputs are summed weighted by the router's probabilities (docs/moe.md)"},
      {FEAST_MOE_KEY(top_k), llama(at_least(1)), "experts each token is sent to",
       "*llama*: experts each token is routed to (`num_experts_per_tok`)", nullptr, ">= 1, <= `n_experts`"},
      {FEAST_MOE_KEY(intermediate_size), llama(at_least(0)), "each expert's width; 0 = model.intermediate_size",
       "*llama*: width of each expert's SwiGLU MLP (Qwen2-MoE's `moe_intermediate_size`); 0 = "
       "`model.intermediate_size`"},
      {FEAST_MOE_KEY(every), llama(at_least(1)), "block l is MoE when (l + 1) % every == 0",
       "*llama*: which blocks are MoE: block l (counted from 0) when (l + 1) % every == 0, the others "
       "keep the dense MLP (Qwen2-MoE's `decoder_sparse_step`); 1 = every block"},
      {FEAST_MOE_KEY(n_shared_experts), llama(at_least(0)), "experts every token also passes through",
       "*llama*: shared experts, which every token passes through besides its routed ones, computed as "
       "one SwiGLU MLP of `shared_intermediate_size` (Qwen2-MoE's `shared_expert`, DeepSeek's shared "
       "experts)"},
      {FEAST_MOE_KEY(shared_intermediate_size), llama(at_least(0)), "shared experts' width; 0 = n_shared * intermediate",
       "*llama*: width of the shared experts' MLP (Qwen2-MoE's `shared_expert_intermediate_size`); 0 = "
       "`n_shared_experts` * `intermediate_size`"},
      {FEAST_MOE_KEY(shared_expert_gate), llama(any()), "shared experts' output times sigmoid(x . g)",
       "*llama*: the shared experts' output is scaled per token by sigmoid(x . g), g a learned (1, "
       "n_embd) weight (Qwen2-MoE's `shared_expert_gate`)"},
      {FEAST_MOE_KEY(norm_topk_prob), llama(any()), "renormalise the top-k probabilities",
       "*llama*: the router's top-k probabilities are divided by their sum, so a token's expert weights "
       "add up to 1 (Mixtral always; Qwen2-MoE's `norm_topk_prob`); false keeps the softmax "
       "probabilities as they are"},
      {FEAST_MOE_KEY(aux_loss_coef), llama(at_least(0)), "load-balancing loss weight",
       "*llama*: weight of the load-balancing loss added to the training loss (transformers' "
       "`router_aux_loss_coef`, which it applies with `output_router_logits`). Computed as transformers "
       "does for one forward: over every token of a micro-batch and every MoE block at once, "
       "n_experts * sum over experts of (the share of top-k choices it got) * (its mean router "
       "probability); the step's is the mean over its micro-batches. Reported as `aux_loss` in the "
       "metrics; 0 = none"},
      {FEAST_MOE_KEY(z_loss_coef), llama(at_least(0)), "router z-loss weight",
       "*llama*: weight of the router z-loss (ST-MoE, Zoph et al. 2022): the mean over tokens of "
       "logsumexp(router logits)^2, summed over MoE blocks, which keeps the router's logits small. "
       "Reported as `z_loss`; 0 = none"},
      {FEAST_MOE_KEY(capacity_factor), llama(at_least(0)), "expert capacity per micro-batch; 0 = dropless",
       "*llama*: each expert takes at most ceil(capacity_factor * tokens * top_k / n_experts) tokens "
       "of a micro-batch, first come (in token order) first served; a token's choice past that skips "
       "the expert (its weight is dropped, not given to another), and the metrics count the dropped "
       "choices. 0 = dropless: every expert takes every token sent to it"},

      {FEAST_KEY(parallel, tp), at_least(1), "tensor-parallel degree",
       "tensor-parallel degree"},
      {FEAST_KEY(parallel, sequence_parallel), any(), "split norms and residuals over tp ranks by rows",
       "sequence parallelism (Megatron-LM's, Korthikanti et al. 2022; needs `tp` > 1 and `tp` dividing "
       "`training.seq_len`): the norms and residual sums between the tensor-parallel products hold "
       "1/tp of each micro-batch's tokens on each rank, and so do the activations sent between "
       "pipeline stages; the all-reduce after a row-parallel layer becomes a reduce-scatter and a "
       "column-parallel layer's input an all-gather (the same bytes). It divides by tp the memory "
       "of the block outputs, norm outputs and residual sums a micro-batch keeps, and the pipeline's "
       "point-to-point traffic; the norms' weight gradients are summed over the tp group at each "
       "backward. The results equal those without it up to float rounding"},
      {FEAST_KEY(parallel, pp), at_least(1), "pipeline-parallel degree",
       "pipeline-parallel degree"},
      {FEAST_KEY(parallel, dp), at_least(0), "data-parallel degree; 0 = world / (tp * pp * cp)",
       "data-parallel degree; 0 = world size / (tp * pp * cp). The world size must equal tp * pp * dp * cp"},
      {FEAST_KEY(parallel, cp), at_least(1), "context-parallel degree: ranks sharing each sequence",
       "context-parallel degree (Megatron-LM's context parallelism): cp ranks share every sequence, "
       "each holding 2 of its 2cp equal chunks (rank r chunks r and 2cp-1-r, so causal attention's "
       "work is balanced); attention runs as a ring over the cp ranks, key/value blocks passed from "
       "rank to rank while the local block computes, and everything else is local. Every activation "
       "a micro-batch keeps falls by cp. The cp ranks hold the same parameters: their gradients are "
       "summed, and ZeRO shards, over dp * cp ranks. Needs `training.seq_len` divisible by 2cp (and "
       "by tp * cp with `sequence_parallel`); not with `dp_sync = \"parameter-server\"`. The results "
       "equal those of cp = 1 up to float rounding"},
      {FEAST_KEY(parallel, ep), at_least(1), "expert-parallel degree: ranks sharing each MoE block's experts",
       "expert-parallel degree (model.moe): each mixture-of-experts block's experts are divided over ep "
       "consecutive data-parallel ranks (an ep group inside each tensor-parallel and pipeline coordinate, "
       "as Megatron-LM and torchtitan form it), each computing its n_experts / ep experts for the tokens "
       "of all ep ranks: every MoE block sends each expert's tokens to its rank and the outputs back by "
       "all-to-all with variable counts (the counts exchanged first), forward and backward. Each rank "
       "holds only its experts' weights, gradients and optimizer state: an expert's gradient is summed "
       "over the dp / ep ranks that hold it, and ZeRO shards over those ranks (the dense tensors' "
       "gradients are summed over all dp ranks; their optimizer state is then sharded over dp / ep "
       "ranks, not dp: docs/moe.md). The results equal those of ep = 1 up to float rounding, and "
       "checkpoints reshard across ep. Must divide `model.moe.n_experts` and the data-parallel degree; "
       "refused with the parameter server", nullptr,
       ">= 1, divides `model.moe.n_experts` and `parallel.dp`"},
      {FEAST_KEY(parallel, order), one_of(axis_orders()), "rank-numbering axes, innermost first",
       "rank numbering, innermost axis first: the default puts a tensor-parallel group on consecutive "
       "ranks (one node), then data-parallel replicas, then pipeline stages. The context-parallel axis "
       "may be named (\"tp-cp-dp-pp\"); left out, it sits just outside tp (its ring exchanges "
       "key/value blocks at every layer)", nullptr, "a permutation of tp, dp, pp (or of tp, cp, dp, pp) joined by `-`"},
      {FEAST_KEY(parallel, zero_stage), closed(0, 3), "0 all-reduce; 1 shard optimizer; 2 also gradients; 3 also parameters",
       "0: gradients all-reduced, optimizer state replicated; 1: gradients reduce-scattered, each "
       "data-parallel rank updates its own shard of the AdamW state and parameters, then parameters are "
       "all-gathered; 2: as 1, and gradients are reduce-scattered bucket by bucket during every "
       "micro-batch's backward so a rank keeps only its shard plus a few buckets; 3: as 2, and each "
       "rank keeps only its shard of every block's parameters, gathering a block whole just before it "
       "runs (forward and backward, the next one while this one computes) and giving it back after; "
       "the embedding, final norm and head stay whole (docs/memory.md)"},
      {FEAST_KEY(parallel, micro_batch_size), at_least(1), "sequences per micro-batch per rank",
       "sequences per micro-batch on one rank"},
      {FEAST_KEY(parallel, num_micro_batches), at_least(1), "micro-batches per step per dp rank",
       "micro-batches per optimizer step on each data-parallel rank (gradient accumulation; also the "
       "pipeline's micro-batches). Ignored when `training.batch_size` is set"},
      {FEAST_KEY(parallel, schedule), one_of({"1f1b", "gpipe", "zero-bubble", "interleaved-1f1b"}), "pipeline schedule",
       "pipeline schedule: 1F1B holds at most pp - stage micro-batches' activations; GPipe holds all of "
       "them; `\"zero-bubble\"` (ZB-H1, Qi et al. 2023) is 1F1B with each backward split into its "
       "input-gradient and weight-gradient halves and the weight halves deferred into the time a stage "
       "would wait, which cuts the idle share from (p-1)/(m+p-1) to (p-1)/(3m+p-1) (m >= p, equal "
       "forward, input- and weight-gradient times), holds pp micro-batches on every stage and keeps "
       "each layer's output gradients from one half to the other (docs/memory.md); it cannot be "
       "combined with `training.recompute`. `\"interleaved-1f1b\"` (Narayanan et al. 2021, Megatron-LM's "
       "virtual pipeline) gives each stage `parallel.virtual_stages` non-contiguous chunks of layers and "
       "runs 1F1B over (micro-batch, chunk) pairs: the idle share falls to (p-1)/(vm+p-1) for v times the "
       "point-to-point traffic; it needs pp >= 2 and micro-batches per step a multiple of pp, and its "
       "pipeline transfers go through MPI (on GPUs staged through host memory). Every schedule computes "
       "the same gradients"},
      {FEAST_KEY(parallel, virtual_stages), at_least(1), "model chunks per stage (interleaved-1f1b)",
       "chunks of layers each pipeline stage holds under `parallel.schedule = \"interleaved-1f1b\"` (at "
       "least 2 there, 1 otherwise): the model is cut into pp * virtual_stages virtual stages, chunk c of "
       "stage s being virtual stage c * pp + s; each stage's layers (`parallel.stage_layers`, or the "
       "default split, which gives every stage a multiple of it) must be a multiple of it"},
      {FEAST_KEY(parallel, bucket_mb), above(0), "gradient-reduction bucket size, MiB",
       "size of the gradient-reduction buckets in MiB (whole layers are grouped until a bucket reaches "
       "it)"},
      {FEAST_KEY(parallel, stage_layers), at_least(1), "layers per stage; [] = even split",
       "layers of each pipeline stage; empty = as even as possible (earlier stages take the remainder; "
       "under interleaved-1f1b in whole groups of `parallel.virtual_stages`)", nullptr, "each >= 1, `pp` entries summing to `model.n_layer`"},
      // Bounded: beyond ~9e9 s the deadline overflows the clock, and under a second the
      // watchdog would fire at the first slow collective.
      {FEAST_KEY(parallel, timeout_s), closed(1, 604800), "watchdog: longest wait for a collective, s",
       "watchdog: a collective or pipeline receive that waits longer than this ends the job with a "
       "message naming the call, the group and the ranks that are late (the ranks that did not answer "
       "the watchdog's survey, which lasts a quarter of the timeout, 0.2 to 5 s) instead of hanging"},

      {FEAST_KEY(parallel, dp_sync), one_of({"allreduce", "parameter-server"}),
       "data-parallel gradient exchange",
       "how data-parallel replicas combine gradients: `\"allreduce\"` uses collectives (sharded by "
       "`zero_stage`); `\"parameter-server\"` makes data-parallel rank r the server of shard r of the "
       "weights and optimizer state: every worker pushes its gradients to the servers, the servers "
       "update, and the workers pull the weights back (the world is still tp * pp * dp). It takes the "
       "place of ZeRO: `zero_stage` must be 0 (left unset, it becomes 0)"},
      {FEAST_KEY(parallel, backend), one_of({"auto", "nccl", "mpi"}), "communication library for GPU tensors",
       "how GPU tensors travel between ranks: `\"nccl\"` (tensor-parallel, data-parallel, pipeline "
       "and tied-embedding groups through NCCL on a stream of their own; host values and a parameter "
       "server's traffic through MPI), "
       "`\"mpi\"` (through MPI, staged in pinned host memory: for machines without NCCL and for "
       "several ranks sharing a GPU, which NCCL refuses), or `\"auto\"`: NCCL when the run is on "
       "GPUs, NCCL can be loaded and no GPU is shared by two ranks, else MPI (the start-up report "
       "says which and why). CPU runs always use MPI; the check for NCCL happens when the run "
       "starts, so any value passes `print-config`"},
      {FEAST_KEY(parallel, grad_reduce_dtype), one_of({"fp32", "bf16"}), "dtype of data-parallel gradient traffic",
       "the dtype data-parallel gradients travel and are summed in (`dp_sync = \"allreduce\"`): "
       "`\"bf16\"` sends half the bytes; each bucket is cast to bf16 in one of four bucket-sized "
       "buffers, reduced there (NCCL natively; MPI through an operation that adds in fp32 and rounds "
       "each partial sum) and cast back, while gradients still accumulate over micro-batches in fp32. "
       "docs/cluster.md gives its effect on the loss. The tied embedding's sum over the first and "
       "last stage stays fp32"},
      {FEAST_KEY(parallel, ps_sparse_embedding), any(), "parameter server: move only touched embedding rows",
       "with `dp_sync = \"parameter-server\"`: workers push and pull only the rows of the token "
       "embedding their batch touches (the recommender-system case); the bytes moved per step are "
       "reported next to the dense exchange"},
      {FEAST_KEY(parallel, offload_optimizer), any(), "AdamW state in host memory, updated by host threads",
       "keep the optimizer state of this rank's range (its ZeRO shard, or the whole stage at ZeRO 0): "
       "the float32 master weights and both AdamW moments, in host memory (pinned on a GPU) instead of "
       "the device; each step copies the range's gradients to the host, updates there with the CPU "
       "backend's threads, and copies the weights back (ZeRO-Offload). It frees 12 bytes per "
       "parameter of the range on a GPU for two copies per step; on the CPU the same code runs (a "
       "separate host copy) and gives the same bits as without offload"},

      {FEAST_KEY(training, steps), at_least(1), "optimizer steps to run",
       "optimizer steps to run; also the length of the learning-rate schedule (warm-up, then decay to "
       "`min_lr` at this step). Raising it to extend a finished run resumes from its last checkpoint "
       "and stretches the schedule, so the rate jumps back up at the resumed step: the run says so "
       "at resume, with the rate before and after"},
      {FEAST_KEY(training, batch_size), at_least(0), "global batch in sequences; 0 = derived",
       "global batch in sequences per step; 0 = `dp * num_micro_batches * micro_batch_size`. When set, "
       "each data-parallel rank runs `batch_size / (dp * micro_batch_size)` micro-batches (it must "
       "divide), so one config trains the same math at every layout"},
      {FEAST_KEY(training, seed), at_least(0), "seeds the initialisation and the data order",
       "seeds the initialisation and the data order"},
      {FEAST_KEY(training, device), one_of({"cpu", "cuda"}), "compute backend",
       "compute backend: `\"cpu\"` (oneDNN and OpenBLAS, float32) or `\"cuda\"` (one GPU per rank: the rank's "
       "local rank on its node, modulo the GPUs it sees). Asking for `\"cuda\"` where no GPU is "
       "visible, or in a build without the CUDA backend, stops every rank with that message"},
      {FEAST_KEY(training, dtype), one_of({"auto", "fp32", "bf16"}), "compute dtype; auto = fp32 on cpu, bf16 on cuda",
       "the dtype of parameters and activations in the products: `\"auto\"` is `\"fp32\"` on the CPU "
       "and `\"bf16\"` on a GPU. With bf16, gradients accumulate in fp32 and the optimizer keeps fp32 "
       "master weights and moments, refreshing the bf16 copy after each update. The CPU computes in "
       "fp32 only"},
      {FEAST_KEY(training, seq_len), at_least(1), "tokens per sequence; <= model.max_seq_len",
       "tokens per sequence", nullptr, "1 ..= `model.max_seq_len`",
       "`64`, or `model.max_seq_len` when that is smaller"},
      {FEAST_KEY(training, lr), above(0), "peak learning rate",
       "peak learning rate, reached at the end of warm-up"},
      {FEAST_KEY(training, min_lr), at_least(0), "lr at the end of the decay; <= lr",
       "learning rate at the end of the decay (the last step)", nullptr, "0 ..= `training.lr`"},
      {FEAST_KEY(training, warmup_steps), at_least(0), "linear warm-up steps",
       "linear warm-up from lr / warmup_steps to lr"},
      {FEAST_KEY(training, lr_schedule), one_of({"cosine", "linear", "constant"}),
       "decay after warm-up",
       "decay from lr to min_lr after warm-up; `\"constant\"` stays at lr"},
      {FEAST_KEY(training, weight_decay), at_least(0), "AdamW decoupled decay (matrices only)",
       "AdamW decoupled weight decay, applied to matrices only (not biases, norms)"},
      {FEAST_KEY(training, beta1), half_open(0, 1), "AdamW first-moment decay",
       "AdamW first-moment decay"},
      {FEAST_KEY(training, beta2), half_open(0, 1), "AdamW second-moment decay",
       "AdamW second-moment decay"},
      {FEAST_KEY(training, eps), above(0), "AdamW denominator epsilon",
       "AdamW denominator epsilon"},
      {FEAST_KEY(training, grad_clip), at_least(0), "max global grad norm; 0 = no clipping",
       "maximum global gradient norm; 0 disables clipping"},
      {FEAST_KEY(training, eval_interval), at_least(0), "evaluate every N steps; 0 = never",
       "evaluate val_loss every N steps and at the last step; 0 = never (not at the last step either)"},
      {FEAST_KEY(training, eval_batches), at_least(0), "validation batches per evaluation; 0 = every window",
       "validation batches per evaluation, each of the global batch size (`training.batch_size` "
       "sequences): the same validation tokens at every layout, so val_loss is comparable across "
       "layouts and micro-batch splits. 0 = every window of `data.val` once (the last batch partly "
       "empty). val_loss is the mean over the targets scored (loss masks leave prompt tokens out)"},
      // Bounded: tens of thousands of OpenMP threads exhaust memory or stacks, not the CPUs.
      {FEAST_KEY(training, threads), closed(0, 1024), "OpenMP threads per rank; 0 = OMP_NUM_THREADS or the CPUs",
       "OpenMP threads per rank; 0 = `OMP_NUM_THREADS` when it is set, otherwise the CPUs this rank may "
       "run on (its CPU affinity, as `mpirun --bind-to`, Slurm's binding or a cgroup cpuset set it, "
       "capped by a cgroup CPU quota) divided among the ranks on the same host that may run on the same "
       "CPUs"},
      {FEAST_KEY(training, exit_at_step), at_least(0), "save and exit 0 after this step; 0 = never",
       "save a checkpoint after this step and exit 0 (Megatron's exit interval); the LR schedule still "
       "follows `training.steps`, so a run continued later goes on as if never stopped (a run that "
       "resumes at or after this step runs on). 0 = never"},
      {FEAST_KEY(training, exit_after_minutes), at_least(0), "save and exit 0 after this wall time; 0 = never",
       "save and exit 0 at the end of the first step that starts once this much wall time has passed "
       "since the start (set-up included), so leave a step and a save of room below a job's time limit. "
       "0 = never"},
      {FEAST_KEY(training, skip_nonfinite), at_least(0), "non-finite steps skipped before failing",
       "steps whose loss or gradient norm is not finite that may skip their update (each logged and "
       "counted in the checkpoint) before the run fails; 0 = the first one fails the run, naming the "
       "step and the first rank that saw it, with no checkpoint written from that state"},

      {FEAST_KEY(training, recompute), one_of({"none", "selective", "full"}),
       "activation recomputation: none, selective or full",
       "what each block keeps of its forward for its backward, trading compute for activation memory "
       "(docs/memory.md): `\"none\"` keeps everything; `\"selective\"` keeps the matrix products' "
       "outputs and recomputes the attention core and the MLP activation at the start of the block's "
       "backward (Megatron-LM's selective recomputation: the CPU attention's T x T probabilities are "
       "its largest activation); `\"full\"` keeps only the block's output and reruns the block's "
       "forward (one more tensor-parallel all-reduce per block). The results are those of `\"none\"` "
       "to the bit on the CPU; the activation memory per micro-batch is printed at the start"},
      {FEAST_KEY(training, recompute_layers), at_least(0), "blocks per stage that recompute; 0 = all",
       "how many blocks of each pipeline stage recompute, counted from the stage's first block (the "
       "first stages of a 1F1B pipeline hold the most micro-batches); 0 = every block. Needs "
       "`training.recompute` other than `\"none\"`"},

      {FEAST_KEY(data, train), non_empty(), "training shards: file, directory or glob",
       "training token shards: a file, a directory (its training shards: see docs/data.md), or a glob "
       "such as `\"datasets/demo/train_*.bin\"`", nullptr, "non-empty when set"},
      {FEAST_KEY(data, val), any(), "validation shards; empty = no validation",
       "validation shards, same forms; empty = no validation"},
      {FEAST_KEY(data, document_mask), any(), "attention and positions stay inside each document",
       "packed windows compute exactly what each document alone would: attention never crosses from "
       "one document into another, positions (rotary or learned) restart at each, and a document's first "
       "token is not counted as a target. Documents are the samples `trainer prepare-data --pack` "
       "recorded, or in unpacked data what each end-of-text token ends (refused where the data's "
       "documents hold that token inside, as chat templates do); not with `parallel.cp` > 1 (see "
       "[finetune.md](finetune.md))"},
      {FEAST_KEY(data, eos_id), at_least(-1), "the end-of-text id ending documents; -1 = meta.json's",
       "the token id that ends each document, for `document_mask`: -1 takes the `eos_id` that "
       "`prepare-data` recorded in the training data's meta.json (the tokenizer's end-of-text token)",
       nullptr, ">= -1", "`-1`"},

      {FEAST_KEY(checkpoint, dir), any(), "checkpoint directory; empty = <logging.dir>/checkpoints",
       "where checkpoints are written (one HDF5 file per save, `step_00000020.h5`, and `latest`; see "
       "[checkpoint-format.md](checkpoint-format.md)). Relative paths: see Paths above", nullptr,
       "any; empty = `<logging.dir>/checkpoints`", "`\"<logging.dir>/checkpoints\"`"},
      {FEAST_KEY(checkpoint, interval), at_least(0), "save every N steps and at the end; 0 = only on stop",
       "save every N steps and after the last step; 0 = only when a run stops early (`exit_at_step`, "
       "`exit_after_minutes`, SIGTERM, SIGUSR1, SIGINT), which always saves"},
      {FEAST_KEY(checkpoint, keep), at_least(1), "complete checkpoints to keep",
       "complete checkpoints to keep; older ones are deleted, oldest first, only after a new one is "
       "complete"},
      {FEAST_KEY(checkpoint, resume), non_empty(), "\"auto\", \"never\" or a checkpoint file or directory",
       "`\"auto\"`: continue from the newest complete checkpoint in `checkpoint.dir`, falling back to "
       "older ones when it is corrupt, or start fresh when there is none; `\"never\"`: always start "
       "fresh (a new run into the same directory then overwrites checkpoints of the same steps); a "
       "file: resume from it (an error if it does not load); a directory: like `\"auto\"` in that "
       "directory. Any layout may resume any checkpoint of the same model and seed", nullptr, "`\"auto\"`, `\"never\"`, or a path"},
      {FEAST_KEY(checkpoint, async), any(), "write checkpoints beside training (copy, then a writer thread)",
       "write checkpoints on a thread of their own: the step waits only while this rank's part of the "
       "state is copied to host memory (kept between saves: as much host memory as the rank's share of "
       "the file), then training goes on while the copy is written and committed; the next save first "
       "waits for it. Needs an MPI that grants `MPI_THREAD_MULTIPLE` (Open MPI does)"},

      {FEAST_KEY(logging, dir), any(), "run directory; empty = a new one per run",
       "the run directory: `config.toml` (the resolved config, inferred values marked), `command.txt`, "
       "`train.log` (everything printed, appended run after run), `metrics.jsonl`, `status` (`running`, "
       "then `finished at step N`, `stopped at step N (...)` or `failed: <error>`) and, by default, "
       "`checkpoints/`. Empty: a new directory for each run, `runs/<config name>-<UTC date-time>`, "
       "printed at start, except that a run of the same config that did not finish and left a "
       "checkpoint (preempted, crashed) is continued in its directory. One run at a time: a second run into "
       "a directory in use is refused. A fresh run finding an earlier run's `metrics.jsonl` moves it "
       "aside (`metrics.<its time>.jsonl`) and says so", nullptr, "any; empty = a new directory per run",
       "`\"\"` (a new directory per run)"},
      {FEAST_KEY(logging, interval), at_least(1), "progress line every N steps",
       "print a progress line every N steps"},
      {FEAST_KEY(logging, quiet), any(), "batch jobs: no per-step progress lines",
       "no per-step progress: only the start-up report, evaluations, checkpoints and the end-of-run "
       "summary are printed (`metrics.jsonl` and TensorBoard still record every step)"},
      {FEAST_KEY(logging, verbose), any(), "start-up report lists every rank",
       "the start-up report lists every rank's coordinates, host and memory; otherwise a job of more "
       "than 16 ranks gets a summary that fits a screen"},
      {FEAST_KEY(logging, tensorboard), any(), "TensorBoard event files beside metrics.jsonl",
       "write TensorBoard event files into `<logging.dir>/tensorboard/` (loss, lr, gradient norm, "
       "throughput, MFU and the step's time split), for `tensorboard --logdir runs/`"},
      {FEAST_KEY(logging, peak_tflops), at_least(0), "MFU's peak per rank, TFLOP/s; 0 = datasheet or FMA peak",
       "the peak a rank's device reaches, in TFLOP/s, that MFU divides by; 0 = the datasheet bf16 dense "
       "peak of a known GPU, or on the CPU the FMA peak of the cores the rank may use (vector width x "
       "2 units x the highest reported clock), or the sgemm rate the ranks measure at start where that "
       "is higher (docs/observability.md). Set it to compare with another tool's MFU"},

      {FEAST_KEY(fault, kill_rank), at_least(-1), "test: this rank SIGKILLs itself at fault.at_step; -1 = none",
       "this rank kills itself with SIGKILL when step `fault.at_step` is about to run (a crash: no "
       "handler, no flush); -1 = none", nullptr, ">= -1, < world size"},
      {FEAST_KEY(fault, stall_rank), at_least(-1), "test: this rank hangs at fault.at_step; -1 = none",
       "this rank hangs at step `fault.at_step` (a hung device or deadlock); the other ranks' watchdog "
       "must end the job; -1 = none", nullptr, ">= -1, < world size"},
      {FEAST_KEY(fault, at_step), at_least(0), "test: the step a fault strikes (first attempt only)",
       "the step (1-based) at which the fault strikes", nullptr, ">= 1 when a rank is set"},

      {FEAST_KEY(lora, rank), at_least(0), "LoRA rank; 0 = train every weight",
       "the rank r of LoRA's adapters (Hu et al. 2021): > 0 freezes the model (no gradients, no optimizer "
       "state) and trains A (r, in) and B (out, r) on each product of `lora.targets`, which then computes "
       "W x + (alpha / r) B A x, as PEFT does; checkpoints hold the adapters only. 0 = full fine-tuning. "
       "See [finetune.md](finetune.md)"},
      {FEAST_KEY(lora, alpha), above(0), "LoRA scale numerator: the update is alpha / rank",
       "LoRA's alpha: the adapters' update is scaled by alpha / rank (PEFT's `lora_alpha`)"},
      {FEAST_KEY(lora, dropout), half_open(0, 1), "dropout on the adapters' input while training",
       "PEFT's `lora_dropout`: while training, each adapter's input has this share of its elements "
       "zeroed and the rest scaled by 1 / (1 - dropout), before A. The masks are counter-based: drawn from "
       "`training.seed`, the step, the adapter and each element's place in the step's batch, so every "
       "layout drops the same elements, and a resumed run the same ones as an uninterrupted run. "
       "Evaluation drops nothing. Not with `parallel.cp` > 1"},
      {FEAST_KEY(lora, targets), any(), "products to adapt; empty = the family's default",
       "the products that get adapters, by the Hugging Face module's name: Llama family `q`, `k`, `v`, "
       "`o`, `gate`, `up`, `down`; GPT-2 `qkv` (c_attn), `proj` (attn.c_proj), `fc` (mlp.c_fc), "
       "`fc_proj` (mlp.c_proj). Empty = PEFT's default for the family: `[\"q\", \"v\"]` (Llama), "
       "`[\"qkv\"]` (GPT-2)", nullptr, nullptr, "`[]`: the family's default"},
      {FEAST_KEY(lora, init_from), any(), "PEFT adapter folder to start the adapters from; empty = fresh",
       "a PEFT LoRA adapter folder (`adapter_config.json` + `adapter_model.safetensors`, as "
       "`peft.PeftModel.save_pretrained` writes it) whose A and B start the adapters, to continue training "
       "one; its rank, alpha and targets must match this config's. Empty = fresh adapters (A random with "
       "the variance of PEFT's Kaiming-uniform init, B zero)", nullptr, "any; empty = fresh adapters"},
      {FEAST_KEY(lora, base_dtype), one_of({"auto", "bf16", "nf4"}), "how the frozen base stores its block weights",
       "how LoRA's frozen base keeps the weights of its block products (attention q/k/v and output, the "
       "MLP's): `\"auto\"` in the compute dtype; `\"bf16\"` in bfloat16 (half of float32 on the CPU; the "
       "compute dtype on a GPU already); `\"nf4\"` (QLoRA, Dettmers et al. 2023) quantized at load to 4-bit "
       "NormalFloat in blocks of 64 with a float32 absmax each, as bitsandbytes does, about 0.56 bytes per "
       "weight (0.52 with `double_quant`). Each product's weight is turned back into the compute dtype "
       "where it runs, forward and backward. The embedding, norms, biases and head stay in the compute "
       "dtype. Needs `lora.rank` > 0. See [finetune.md](finetune.md)"},
      {FEAST_KEY(lora, double_quant), any(), "nf4: quantize the blocks' scales to 8 bits too",
       "with `base_dtype = \"nf4\"`: the blocks' absmax scales are themselves quantized, to 8 bits in "
       "groups of 256 after their mean is subtracted (bitsandbytes' `bnb_4bit_use_double_quant`), saving "
       "about 0.37 bits per weight"},
  };
  return table;
}

#undef FEAST_KEY
#undef FEAST_ROPE_KEY

const KeyDesc* find_key(std::string_view section, std::string_view name) {
  for (const KeyDesc& k : keys()) {
    if (section == k.section && name == k.name) return &k;
  }
  return nullptr;
}

// Shortest text that reads back to the same double, always with a '.' or exponent so that TOML
// reads it as a float; "1e-4" rather than to_chars' "1e-04".
std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e == std::string::npos) {
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  const size_t digits = s[e + 1] == '-' || s[e + 1] == '+' ? e + 2 : e + 1;
  while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  return s;
}

// A number in a range description: "1", "0.5", "2147483647".
std::string format_bound(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// A TOML basic string: double quotes, escapes for quotes, backslashes and control characters;
// UTF-8 passes through.
std::string format_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string describe_rule(const Rule& r) {
  if (!r.choices.empty()) {
    std::string s = "one of ";
    for (size_t i = 0; i < r.choices.size(); ++i) {
      s += (i ? ", " : "") + format_string(r.choices[i]);
    }
    return s;
  }
  if (r.non_empty) return "a non-empty string";
  if (r.min && r.max) {
    return std::string(r.min->strict ? "in (" : "in [") + format_bound(r.min->value) + ", " +
           format_bound(r.max->value) + (r.max->strict ? ")" : "]");
  }
  if (r.min) return (r.min->strict ? "> " : ">= ") + format_bound(r.min->value);
  return "any value";
}
// The value of a key in the config, as TOML text.
std::string value_text(const KeyDesc& k, Config& c) {
  return std::visit(
      [&](auto get) -> std::string {
        const auto& v = get(c);
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return format_string(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
          if (!v) return k.inferred ? k.inferred(c) : "false";
          return *v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return format_double(v);
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
          return out + "]";
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + format_string(v[i]);
          return out + "]";
        } else {
          return std::to_string(v);
        }
      },
      k.field);
}
}  // namespace feast::config_table
