// `trainer bench NAME`: the benchmarks' command lines, one mode each (step, the default, then
// comm, parallel, checkpoint and generate), chosen by name. The benchmarks themselves are in
// tools/bench/; this file turns flags into their options, checking what the flags can get wrong.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "cli/verb.h"
#include "comm/mpi_world.h"
#include "config/config.h"
#include "core/error.h"
#include "tools/bench/bench_checkpoint.h"
#include "tools/bench/bench_comm.h"
#include "tools/bench/bench_generate.h"
#include "tools/bench/bench_model.h"
#include "tools/bench/bench_parallel.h"
#include "tools/bench/bench_step.h"

namespace feast {

namespace {

// Comma-separated items of a flag's value, each turned into T by `parse`.
template <typename T, typename Parse>
std::vector<T> list_of(const std::string& value, Parse parse) {
  std::vector<T> out;
  size_t pos = 0;
  while (pos <= value.size()) {
    const size_t comma = std::min(value.find(',', pos), value.size());
    out.push_back(parse(value.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

int positive_item(const std::string& what, const std::string& item) {
  try {
    size_t used = 0;
    const int v = std::stoi(item, &used);
    if (used == item.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(what + ": expected positive whole numbers separated by commas, got '" + item + "'");
}

// The model flags the step, checkpoint and generate benchmarks share, on top of `model`.
void apply_model_flags(const Args& args, ModelConfig& model) {
  model.n_layer = int(args.integer("--layers", model.n_layer));
  model.n_head = int(args.integer("--heads", model.n_head));
  model.n_kv_head = int(args.integer("--kv-heads", model.n_kv_head));
  model.n_embd = int(args.integer("--embd", model.n_embd));
  model.intermediate_size = int(args.integer("--intermediate", model.intermediate_size));
  model.vocab_size = int(args.integer("--vocab", model.vocab_size));
  if (model.n_embd % model.n_head != 0)
    throw ConfigError("bench: --embd " + std::to_string(model.n_embd) + " must be divisible by --heads " +
                      std::to_string(model.n_head));
  if (model.n_head % model.kv_heads() != 0)
    throw ConfigError("bench: --kv-heads " + std::to_string(model.kv_heads()) + " must divide --heads " +
                      std::to_string(model.n_head));
}

Option int_option(const char* name, const char* metavar, const char* help, double min = 1) {
  return {name, ValueKind::kInteger, metavar, help, {}, min};
}

// ---- step ----------------------------------------------------------------------------------

int run_step(const Args& args, const VerbContext&) {
  StepBenchOptions o;
  o.model = bench_model(args.text("--arch", "gpt2"));
  apply_model_flags(args, o.model);
  if (args.has("--shapes"))
    o.shapes = list_of<BatchShape>(args.text("--shapes"), [](const std::string& item) {
      int B = 0, T = 0;
      char tail = 0;
      if (std::sscanf(item.c_str(), "%dx%d%c", &B, &T, &tail) != 2 || B <= 0 || T <= 0)
        throw ConfigError("bench: --shapes: '" + item + "' is not BxT (for example 4x64)");
      return BatchShape{B, T};
    });
  o.warmup = int(args.integer("--warmup", o.warmup));
  o.steps = int(args.integer("--steps", o.steps));
  o.device = args.text("--device", o.device);
  o.dtype = args.text("--dtype", o.dtype);
  o.lora.rank = int(args.integer("--lora-rank", 0));
  const std::string base = args.text("--lora-base", "auto");
  if (base != "auto" && o.lora.rank == 0)
    throw ConfigError("bench: --lora-base " + base + " needs --lora-rank (a frozen base under LoRA adapters)");
  if (o.lora.enabled()) {
    o.lora.alpha = 2.0 * o.lora.rank;
    for (const LoraTarget& t : lora_targets(o.model)) o.lora.targets.push_back(t.name);
    o.lora.base = base.starts_with("nf4") ? BaseFormat::kNf4 : base == "bf16" ? BaseFormat::kBf16 : BaseFormat::kCompute;
    o.lora.double_quant = base == "nf4-dq";
  }
  return run_step_bench(o);
}

Verb step_mode() {
  Verb v;
  v.name = "step";
  v.summary = "training steps of one model on one device: ms/step, tokens/s, MFU (the default)";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "bench";
  cl.synopsis =
      "trainer bench [step] [--arch gpt2|llama] [--shapes BxT[,BxT...]] [--warmup N] [--steps N]\n"
      "                     [--layers L] [--heads H] [--kv-heads H] [--embd C] [--intermediate I]\n"
      "                     [--vocab V] [--device cpu|cuda] [--dtype auto|fp32|bf16]\n"
      "                     [--lora-rank R [--lora-base auto|bf16|nf4|nf4-dq]]";
  cl.description =
      "Times training steps (zero grads + forward + backward + AdamW) on one device at each shape\n"
      "(default 4x64,8x256) after warm-up; prints the median ms/step, tokens/s and MFU ((6*N + 6*L*T*C)\n"
      "per token, N the parameters in matrix products, as llm.c counts) against the measured GEMM\n"
      "ceiling (sgemm on the CPU; on a GPU a 8192^3 product in the compute dtype, and the datasheet\n"
      "peak beside it), and on a GPU the peak device memory. The model is GPT-2 124M (12 layers, 12\n"
      "heads, 768 channels, vocab 50257) or, with --arch llama, a Llama of the same depth and width (4\n"
      "key/value heads, SwiGLU width 2048, vocab 32000, untied head). Exits non-zero if a loss is not\n"
      "finite or the first loss is not near ln(vocab). With --lora-rank, the adapters train over the\n"
      "frozen base (kept as --lora-base): the line above the table gives what the model, its\n"
      "gradients and its optimizer state hold, to set full fine-tuning, LoRA and QLoRA side by side.";
  cl.options = {
      {"--arch", ValueKind::kText, "gpt2|llama", "the model family (default gpt2)", {"gpt2", "llama"}},
      {"--shapes", ValueKind::kText, "BxT,...", "sequences x tokens of each timed shape (default 4x64,8x256)"},
      int_option("--warmup", "N", "untimed steps first (default 2)"),
      int_option("--steps", "N", "timed steps (default 7)"),
      int_option("--layers", "L", "transformer blocks"),
      int_option("--heads", "H", "attention heads"),
      int_option("--kv-heads", "H", "key/value heads (llama)"),
      int_option("--embd", "C", "channels"),
      int_option("--intermediate", "I", "MLP width (llama)"),
      int_option("--vocab", "V", "vocabulary size", 2),
      {"--device", ValueKind::kText, "cpu|cuda", "where to run (default cpu)", {"cpu", "cuda"}},
      {"--dtype", ValueKind::kText, "auto|fp32|bf16", "compute dtype (default auto: fp32 on the CPU, bf16 on a GPU)",
       {"auto", "fp32", "bf16"}},
      int_option("--lora-rank", "R", "LoRA adapters of rank R on every product over a frozen base (default: none)"),
      {"--lora-base", ValueKind::kText, "auto|bf16|nf4|nf4-dq",
       "with --lora-rank: the frozen base's block weights in the compute dtype, bfloat16, NF4, or NF4 with "
       "double-quantized scales (QLoRA; default auto)",
       {"auto", "bf16", "nf4", "nf4-dq"}},
  };
  // The benchmarks are chosen by name, not by a flag.
  for (const char* mode : {"comm", "parallel", "checkpoint", "generate"})
    cl.hints["--" + std::string(mode)] = "the benchmarks are chosen by name: trainer bench " + std::string(mode);
  v.run = run_step;
  return v;
}

// ---- comm ----------------------------------------------------------------------------------

int run_comm(const Args& args, const VerbContext&) {
  CommBenchOptions o;
  o.min_bytes = size_t(args.number("--min-bytes", double(o.min_bytes)));
  o.max_bytes = size_t(args.number("--max-bytes", double(o.max_bytes)));
  o.factor = int(args.integer("--factor", o.factor));
  o.iters = int(args.integer("--iters", o.iters));
  o.warmup = int(args.integer("--warmup", o.warmup));
  o.json_path = args.text("--json");
  o.device = args.text("--device", o.device);
  o.backend = args.text("--backend", o.backend);
  if (args.has("--ops")) {
    o.algorithms = false;
    o.ops.clear();
    for (const std::string& name : list_of<std::string>(args.text("--ops"), [](const std::string& s) { return s; })) {
      if (name == "algorithms") {
        o.algorithms = true;
        continue;
      }
      const auto it = std::find_if(std::begin(kCommOps), std::end(kCommOps),
                                   [&](CommOp op) { return name == comm_op_name(op); });
      if (it == std::end(kCommOps))
        throw ConfigError("--ops: '" + name +
                          "' is not one of allreduce, reduce_scatter, allgather, broadcast, alltoall, sendrecv, "
                          "algorithms");
      if (std::find(o.ops.begin(), o.ops.end(), *it) == o.ops.end()) o.ops.push_back(*it);
    }
  }
  if (o.min_bytes < 4)
    throw ConfigError("bench comm: --min-bytes " + std::to_string(o.min_bytes) +
                      " is less than one float32 element; give 4 or more");
  if (o.min_bytes > o.max_bytes)
    throw ConfigError("bench comm: --min-bytes " + std::to_string(o.min_bytes) + " is more than --max-bytes " +
                      std::to_string(o.max_bytes));
  if (o.device == "cpu" && o.backend == "nccl")
    throw ConfigError("bench comm: --backend nccl needs --device cuda (NCCL moves GPU memory)");
  return run_comm_bench_job(o, make_mpi_world(std::chrono::minutes(5)));
}

Verb comm_mode() {
  Verb v;
  v.name = "comm";
  v.summary = "every collective's bandwidth by size; a ring and a parameter server against alpha-beta";
  CommandLine& cl = v.command_line;
  cl.verb = "bench comm";
  cl.synopsis =
      "[mpirun -np N] trainer bench comm [--min-bytes SIZE] [--max-bytes SIZE] [--factor F]\n"
      "                                        [--iters K] [--warmup W] [--ops LIST] [--json FILE]\n"
      "                                        [--device cpu|cuda] [--backend mpi|nccl]";
  cl.description =
      "Times all-reduce, reduce-scatter, all-gather, broadcast (from rank 0), all-to-all and send/recv\n"
      "(each rank sends to the next and receives from the previous) of float32 at every size from\n"
      "--min-bytes to --max-bytes, multiplying by F: the slowest rank's median of K timed iterations\n"
      "after W warm-up ones, algbw = S / time and busbw = algbw x factor as nccl-tests reports them (S:\n"
      "the all-reduced or broadcast buffer, reduce-scatter's input, all-gather's output, the per-rank\n"
      "buffer of all-to-all and send/recv; factor: all-reduce 2(n-1)/n; reduce-scatter, all-gather and\n"
      "all-to-all (n-1)/n; broadcast and send/recv 1). Every result is checked after the timed\n"
      "iterations; a wrong one ends the bench with exit status 1, naming the operation and size.\n"
      "Then (the `algorithms` op) a ping-pong between ranks 0 and 1 fits T = alpha + beta * bytes to\n"
      "one link, and all-reduce runs three ways, each next to the fitted model's prediction for P\n"
      "bytes over N ranks:\n"
      "  library            the MPI library's all-reduce, predicted as a ring\n"
      "  ring               feast's ring over send/recv:   T = 2(N-1) alpha + 2(N-1)/N P beta\n"
      "  parameter server   through rank 0 over send/recv: T = 2(N-1) (alpha + P beta)";
  cl.options = {
      {"--min-bytes", ValueKind::kSize, "SIZE", "the smallest message (default 1K)"},
      {"--max-bytes", ValueKind::kSize, "SIZE", "the largest message (default 64M)"},
      int_option("--factor", "F", "sizes multiply by F (default 2)", 2),
      int_option("--iters", "K", "timed iterations (default 10)"),
      int_option("--warmup", "W", "untimed iterations first (default 2)", 0),
      {"--ops", ValueKind::kText, "LIST",
       "a comma-separated subset of allreduce, reduce_scatter, allgather, broadcast,\n"
       "alltoall, sendrecv, algorithms (default: all)"},
      {"--json", ValueKind::kText, "FILE", "rank 0 also writes every measurement there"},
      {"--device", ValueKind::kText, "cpu|cuda", "where the buffers live (a GPU per rank by local rank)",
       {"cpu", "cuda"}},
      {"--backend", ValueKind::kText, "mpi|nccl", "with --device cuda: MPI staged through pinned host memory, or NCCL",
       {"mpi", "nccl"}},
  };
  cl.epilogue = "Sizes: 4096, 64K, 4M, 1G (K, M, G binary; KB, MB, GB decimal).";
  v.run = run_comm;
  return v;
}

// ---- parallel ------------------------------------------------------------------------------

int run_parallel(const Args& args, const VerbContext&) {
  ParallelBenchOptions o;
  Config& base = o.base;
  // Errors about the keys the flags set name the flag, given or left at its default.
  static const std::map<std::string, std::vector<std::string>> kFlagKeys = {
      {"--layers", {"model.n_layer"}},       {"--heads", {"model.n_head"}},
      {"--embd", {"model.n_embd"}},          {"--seq", {"training.seq_len", "model.max_seq_len"}},
      {"--batch", {"training.batch_size"}}, {"--micro-batch", {"parallel.micro_batch_size"}}};
  for (const auto& [flag, keys] : kFlagKeys)
    for (const std::string& key : keys)
      base.origin[key] = "bench " + flag + (args.has(flag) ? " " + args.text(flag)
                                                           : " (default " + config_value(base, key) + ")");
  base.model.n_layer = int(args.integer("--layers", base.model.n_layer));
  base.model.n_head = int(args.integer("--heads", base.model.n_head));
  base.model.n_embd = int(args.integer("--embd", base.model.n_embd));
  if (args.has("--seq")) base.training.seq_len = base.model.max_seq_len = int(args.integer("--seq", 1));
  base.training.batch_size = args.integer("--batch", base.training.batch_size);
  base.parallel.micro_batch_size = int(args.integer("--micro-batch", base.parallel.micro_batch_size));
  base.parallel.zero_stage = int(args.integer("--zero", base.parallel.zero_stage));
  base.parallel.schedule = args.text("--schedule", base.parallel.schedule);
  base.parallel.virtual_stages = int(args.integer("--virtual-stages", base.parallel.schedule == "interleaved-1f1b" ? 2 : 1));
  base.parallel.sequence_parallel = args.has("--sequence-parallel");
  o.steps = int(args.integer("--steps", o.steps));
  o.warmup = int(args.integer("--warmup", o.warmup));
  if (args.has("--layouts"))
    o.layouts = list_of<BenchLayout>(args.text("--layouts"), [](const std::string& item) {
      BenchLayout l{};
      char tail = 0;
      if (std::sscanf(item.c_str(), "tp%dpp%ddp%d%c", &l.tp, &l.pp, &l.dp, &tail) != 3 || l.tp < 1 || l.pp < 1 ||
          l.dp < 1)
        throw ConfigError("bench parallel: --layouts: '" + item + "' is not tpApBdC (for example tp2pp2dp2)");
      return l;
    });
  if (args.has("--micro-batches"))
    o.micro_batches = list_of<int>(args.text("--micro-batches"),
                                   [](const std::string& item) { return positive_item("--micro-batches", item); });
  return run_parallel_bench(o, make_mpi_world(std::chrono::minutes(5)));
}

Verb parallel_mode() {
  Verb v;
  v.name = "parallel";
  v.summary = "training throughput and the step's time split at every layout of the world's ranks";
  CommandLine& cl = v.command_line;
  cl.verb = "bench parallel";
  cl.synopsis =
      "mpirun -np N trainer bench parallel [--layouts tpApBdC,...] [--steps N] [--warmup N]\n"
      "                                  [--layers L] [--heads H] [--embd C] [--seq T] [--batch S]\n"
      "                                  [--micro-batch B] [--micro-batches M,...] [--zero 0|1|2]\n"
      "                                  [--schedule 1f1b|gpipe|zero-bubble|interleaved-1f1b]\n"
      "                                  [--virtual-stages V] [--sequence-parallel]";
  cl.description =
      "Prints the world's all-reduce bandwidth (as `trainer bench comm --ops allreduce`), then for\n"
      "each layout (default: every tp, pp, dp in {1, 2, 4, 8} with tp * pp * dp = N) the median\n"
      "tokens/s and the split of step time into compute, tensor-parallel communication,\n"
      "data-parallel communication, pipeline idle, data loading and the optimizer, averaged over\n"
      "ranks; the pipeline's measured bubble (idle / (compute + tp-comm + pp-idle + data), the\n"
      "forward-backward span) next to the schedule's formula for m micro-batches per replica\n"
      "((p-1)/(m+p-1); zero-bubble's (p-1)/(3m+p-1); interleaved's (p-1)/(vm+p-1)); and\n"
      "E = compute / (compute + tp-comm +\n"
      "dp-comm + pp-idle). The model defaults to the demo's\n"
      "(4 layers, 4 heads, 128 channels, byte vocabulary) at sequence 64 and a global batch of 32\n"
      "sequences. --micro-batches runs each layout once per M micro-batches of --micro-batch\n"
      "sequences per data-parallel replica (the global batch is then dp * M * B, not --batch).";
  cl.options = {
      {"--layouts", ValueKind::kText, "tpApBdC,...", "the layouts to run (default: every one that fits)"},
      int_option("--steps", "N", "timed steps per layout (default 10)"),
      int_option("--warmup", "N", "untimed steps first (default 2)"),
      int_option("--layers", "L", "transformer blocks (default 4)"),
      int_option("--heads", "H", "attention heads (default 4)"),
      int_option("--embd", "C", "channels (default 128)"),
      int_option("--seq", "T", "tokens per sequence (default 64)"),
      int_option("--batch", "S", "global batch in sequences (default 32)"),
      int_option("--micro-batch", "B", "sequences per micro-batch (default 4)"),
      {"--micro-batches", ValueKind::kText, "M,...", "micro-batches per replica, a run each"},
      {"--zero", ValueKind::kInteger, "0|1|2", "ZeRO stage (default 1)", {}, 0, 2},
      {"--schedule", ValueKind::kText, "1f1b|gpipe|zero-bubble|interleaved-1f1b", "pipeline schedule (default 1f1b)",
       {"1f1b", "gpipe", "zero-bubble", "interleaved-1f1b"}},
      int_option("--virtual-stages", "V", "model chunks per stage under interleaved-1f1b (default 2)", 2),
      {"--sequence-parallel", ValueKind::kFlag, "", "sequence parallelism at the layouts with tp > 1"},
  };
  v.run = run_parallel;
  return v;
}

// ---- checkpoint ----------------------------------------------------------------------------

int run_checkpoint(const Args& args, const VerbContext&) {
  CheckpointBenchOptions o;
  apply_model_flags(args, o.model);
  o.dir = args.text("--dir");
  o.repeat = int(args.integer("--repeat", o.repeat));
  return run_checkpoint_bench(o, make_mpi_world(std::chrono::minutes(5)));
}

Verb checkpoint_mode() {
  Verb v;
  v.name = "checkpoint";
  v.summary = "checkpoint save and load throughput against plain file I/O";
  CommandLine& cl = v.command_line;
  cl.verb = "bench checkpoint";
  cl.synopsis =
      "[mpirun -np N] trainer bench checkpoint [--dir DIR] [--layers L] [--embd C] [--heads H]\n"
      "                                              [--vocab V] [--repeat R]";
  cl.description =
      "Saves and loads a checkpoint of GPT-2 124M (12 layers, 768 channels, 12 heads, vocab 50257)\n"
      "R times in DIR, and writes and reads the same number of bytes as one plain file, sequentially,\n"
      "with fsync; reads are cold (the file is dropped from the page cache first), and times an\n"
      "asynchronous save: the stall (copying the state) and the time until it is committed. Prints\n"
      "the best time and GB/s of each.";
  cl.options = {
      {"--dir", ValueKind::kText, "DIR", "where to save (default: a temporary directory, removed after)"},
      int_option("--layers", "L", "transformer blocks (default 12)"),
      int_option("--embd", "C", "channels (default 768)"),
      int_option("--heads", "H", "attention heads (default 12)"),
      int_option("--vocab", "V", "vocabulary size (default 50257)", 2),
      int_option("--repeat", "R", "saves and loads; the best counts (default 3)"),
  };
  v.run = run_checkpoint;
  return v;
}

// ---- generate ------------------------------------------------------------------------------

int run_generate_mode(const Args& args, const VerbContext&) {
  GenerateBenchOptions o;
  o.arch = args.text("--arch", o.arch);
  o.prompt_tokens = int(args.integer("--prompt-tokens", o.prompt_tokens));
  o.new_tokens = int(args.integer("--new-tokens", o.new_tokens));
  return run_generate_bench(o);
}

Verb generate_mode() {
  Verb v;
  v.name = "generate";
  v.summary = "generation speed: prefill and key/value-cache decoding, and the bandwidth it reaches";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "bench generate";
  cl.synopsis = "trainer bench generate [--arch gpt2|llama] [--prompt-tokens N] [--new-tokens N]";
  cl.description =
      "Times `trainer generate`'s decoder on one process: the prefill of an N-token prompt, then\n"
      "greedy tokens one at a time with the key/value cache, for GPT-2 124M or a Llama of the same\n"
      "depth and width (4 key/value heads, SwiGLU width 2048, vocab 32000), random weights. Decoding\n"
      "one token reads every weight once, so its speed is bounded by memory bandwidth: the table\n"
      "gives the bandwidth it reached. OMP_WAIT_POLICY=passive helps when other work shares the\n"
      "cores (libgomp's threads otherwise spin between the small per-token ops).";
  cl.options = {
      {"--arch", ValueKind::kText, "gpt2|llama", "the model family (default gpt2)", {"gpt2", "llama"}},
      int_option("--prompt-tokens", "N", "the prompt's tokens (default 16)"),
      int_option("--new-tokens", "N", "tokens decoded (default 64)"),
  };
  v.run = run_generate_mode;
  return v;
}

}  // namespace

Verb bench_verb() {
  Verb v;
  v.name = "bench";
  v.summary = "benchmarks: training steps, collectives, layouts, checkpoints, generation";
  CommandLine& cl = v.command_line;
  cl.verb = "bench";
  cl.synopsis = "[mpirun -np N] trainer bench [NAME] [options]";
  cl.description = "Times one part of feast and prints a fixed table; NAME chooses which.";
  v.modes = {step_mode(), comm_mode(), parallel_mode(), checkpoint_mode(), generate_mode()};
  return v;
}

}  // namespace feast
