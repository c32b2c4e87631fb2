// The `trainer` executable: `trainer CONFIG.toml [--set section.key=value ...]` trains; other
// verbs (prepare-data, bench, print-config) do one job each. Errors are caught here and end
// every rank with a non-zero status: an error every rank finds alike (a bad config) is printed
// once by rank 0; one that only this rank hit is printed with its rank and aborts the job.
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <optional>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "comm/mpi_world.h"
#include "comm/runtime.h"
#include "tools/bench/bench_checkpoint.h"
#include "tools/bench/bench_comm.h"
#include "tools/bench/bench_step.h"
#include "tools/bench/bench_generate.h"
#include "tools/bench/bench_parallel.h"
#include "config/config.h"
#include "cli/cli_args.h"
#include "cli/check_backend.h"
#include "cli/check_data.h"
#include "cli/eval.h"
#include "cli/export.h"
#include "cli/generate.h"
#include "cli/inspect.h"
#include "cli/tokenize.h"
#include "config/layout_plan.h"
#include "comm/topology/cpu_threads.h"
#include "cli/plan.h"
#include "cli/prepare_data.h"
#include "train/train_loop.h"

namespace feast {
namespace {

constexpr const char* kHelp =
    "usage: trainer CONFIG.toml [--set section.key=value ...]   train as configured\n"
    "       trainer print-config [CONFIG.toml] [--set ...]      print the resolved config\n"
    "       trainer prepare-data ...                            text files -> token shards\n"
    "       trainer inspect CHECKPOINT.h5                       what a checkpoint holds; verifies it\n"
    "       [mpirun -np N] trainer eval CONFIG.toml [--set ...]  validation loss of the configured model\n"
    "       trainer generate CONFIG.toml --prompt TEXT ...      continue a prompt (KV cache, one process)\n"
    "       trainer export CHECKPOINT --out FOLDER              checkpoint -> Hugging Face model folder\n"
    "       trainer tokenize --tokenizer FOLDER [--decode]      text on stdin -> ids on stdout (and back)\n"
    "       trainer check-data PATTERN [--vocab-size N]         validate token shards fully\n"
    "       trainer plan CONFIG.toml --gpus N ...               predict every layout's memory and speed\n"
    "       trainer check-backend [--device cuda|cpu] ...       every backend op against the CPU reference\n"
    "       trainer bench ...                                   time GPT-2 training steps\n"
    "       mpirun -np N trainer bench --parallel ...           time every parallel layout\n"
    "       [mpirun -np N] trainer bench comm ...               collective bandwidth; ring and parameter server\n"
    "       [mpirun -np N] trainer bench --checkpoint ...       checkpoint save/load throughput\n"
    "       trainer bench --generate ...                        generation speed (KV cache)\n"
    "       trainer --version                                   version and the devices it can use\n"
    "       trainer --help | VERB --help\n"
    "Launch one process per CPU slot (or GPU) with mpirun. Every config key is documented in\n"
    "docs/config.md; `--set` takes TOML values (bare words are strings) and may repeat.\n";

struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
};

// `usage`: the verb's own, printed after an unknown option.
ConfigArgs parse_config_args(const std::vector<std::string>& args, const char* usage = kHelp) {
  ConfigArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") {
      if (i + 1 >= args.size()) throw ConfigError("--set needs a value: --set section.key=value");
      out.overrides.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      out.overrides.push_back(a.substr(6));
    } else if (a.rfind("--", 0) == 0) {
      throw ConfigError("unknown option '" + a + "'\n" + usage);
    } else if (out.path.empty()) {
      out.path = a;
    } else {
      throw ConfigError("more than one config file given ('" + out.path + "' and '" + a + "')");
    }
  }
  return out;
}

// A verb that takes a config (eval, generate): the config path and its --set overrides, and
// the verb's own flags (those in `with_value` take the next argument).
std::pair<ConfigArgs, std::vector<std::string>> split_verb_args(const std::vector<std::string>& args,
                                                                const std::vector<std::string>& with_value) {
  std::vector<std::string> config_args, verb_args;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set" && i + 1 < args.size()) {
      config_args.push_back(a);
      config_args.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0 || a.rfind("--", 0) != 0) {
      config_args.push_back(a);
    } else {
      verb_args.push_back(a);
      if (std::find(with_value.begin(), with_value.end(), a) != with_value.end() && i + 1 < args.size())
        verb_args.push_back(args[++i]);
    }
  }
  return {parse_config_args(config_args), verb_args};
}

constexpr const char* kEvalHelp =
    "usage: [mpirun -np N] trainer eval CONFIG.toml [--set section.key=value ...]\n"
    "The validation loss of the configured model over training.eval_batches batches of data.val (every\n"
    "window once when 0), at any layout. Weights: the checkpoint checkpoint.resume selects (a file, a\n"
    "directory, or with \"auto\" the newest in checkpoint.dir), else model.init_from. Prints perplexity and\n"
    "then, as its last line, val_loss=<value>.\n";

constexpr const char* kPrintConfigHelp =
    "usage: [mpirun -np N] trainer print-config [CONFIG.toml] [--set section.key=value ...] [--world N]\n"
    "Prints the resolved config as TOML: every key with its value and where it came from. Values\n"
    "the config leaves to inference (parallel.dp, training.batch_size or parallel.num_micro_batches,\n"
    "training.threads) are filled in as a job of N ranks on this machine would use them (N: --world,\n"
    "else mpirun's world size) and marked [inferred: ...]. With --world, a layout that does not fit\n"
    "N ranks is an error.\n"
    "       trainer print-config --docs docs/config.md\n"
    "prints docs/config.md with its tables regenerated from the key table (redirect to update it).\n";

// print-config: the config as `trainer CONFIG` would run it with `world` ranks on this machine.
int print_config_command(const std::vector<std::string>& rest, int world_size) {
  std::vector<std::string> args;
  int world = world_size;
  bool world_given = false;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--help" || rest[i] == "-h") {
      log::info(kPrintConfigHelp);
      return 0;
    }
    if (rest[i] == "--docs") {
      // The config reference with its tables made from the key table: the committed file must
      // equal this (a test checks), so a new or changed key is documented by regenerating.
      if (i + 1 >= rest.size()) throw ConfigError("print-config: --docs needs the markdown file (docs/config.md)");
      std::ifstream in(rest[i + 1]);
      if (!in) throw ConfigError("print-config --docs: cannot read " + rest[i + 1]);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::fputs(regenerate_config_docs(text).c_str(), stdout);
      return 0;
    }
    if (rest[i] == "--world") {
      if (i + 1 >= rest.size()) throw ConfigError("print-config: --world needs a number of ranks");
      world = parse_positive_int("--world", rest[++i], kPrintConfigHelp);
      world_given = true;
      continue;
    }
    args.push_back(rest[i]);
  }
  const ConfigArgs ca = parse_config_args(args, kPrintConfigHelp);
  const Config config = load_config(ca.path, ca.overrides);
  InferredValues v;
  v.world_size = world;
  try {
    // What the run would derive, by the run's own rules.
    const LayoutPlan plan = plan_layout(config, world);
    v.dp = plan.layout.dp();
    v.micro_batches = plan.micro_batches;
  } catch (const ConfigError&) {
    // Asked about a job of --world ranks (as sweep.py --check does): the layout must fit it.
    if (world_given) throw;
    // Not a valid layout at this world size: those values stay marked as inferred at launch.
  }
  // The ranks of a job of `world` on this machine share its CPUs (as training's policy decides).
  const ThreadChoice choice = thread_policy(world);
  v.threads = choice.threads;
  v.threads_from = choice.from + ", on this machine";
  log::info(to_toml(with_inferred_values(config, v)));
  return 0;
}

int run(const std::vector<std::string>& args, const Runtime& runtime, const std::string& command_line) {
  const int world_size = runtime.world_size();
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    log::info(kHelp);
    return args.empty() ? 2 : 0;
  }
  const std::string& verb = args[0];
  if (verb == "--version") {
    log::info("feast trainer 0.1 (" + describe_devices() + "; MPI thread support " + runtime.thread_support() + ")");
    return 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (verb == "bench" && std::find(rest.begin(), rest.end(), "--checkpoint") != rest.end())
    return bench_checkpoint_command(rest, make_mpi_world(std::chrono::minutes(5)));
  if (verb == "bench" && !rest.empty() && rest[0] == "comm")
    return bench_comm_command(std::vector<std::string>(rest.begin() + 1, rest.end()),
                              make_mpi_world(std::chrono::minutes(5)));
  if (verb == "bench" && std::find(rest.begin(), rest.end(), "--parallel") != rest.end())
    return bench_parallel_command(rest, make_mpi_world(std::chrono::minutes(5)));
  const bool wants_help = std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
                          std::find(rest.begin(), rest.end(), "-h") != rest.end();
  if (verb == "prepare-data" || verb == "bench" || verb == "inspect" || verb == "export" || verb == "tokenize" ||
      verb == "check-data" || verb == "generate" || verb == "plan" || verb == "check-backend") {
    if (world_size != 1) throw ConfigError("`trainer " + verb + "` runs as a single process, not under mpirun -np " +
                                           std::to_string(world_size));
    if (verb == "inspect") return inspect_command(rest);
    if (verb == "export") return export_command(rest);
    if (verb == "tokenize") return tokenize_command(rest);
    if (verb == "check-data") return check_data_command(rest);
    if (verb == "plan") return plan_command(rest);
    if (verb == "check-backend") return check_backend_command(rest);
    if (verb == "generate") {
      if (wants_help) return generate_help();
      const auto [ca, flags] = split_verb_args(
          rest, {"--prompt", "--prompt-ids", "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed"});
      return generate_command(load_config(ca.path, ca.overrides), flags);
    }
    if (verb == "bench" && std::find(rest.begin(), rest.end(), "--generate") != rest.end())
      return bench_generate_command(rest);
    return verb == "bench" ? bench_command(rest) : prepare_data_command(rest);
  }
  if (verb == "eval") {
    if (wants_help) {
      log::info(kEvalHelp);
      return 0;
    }
    const ConfigArgs ca = parse_config_args(rest, kEvalHelp);
    const Config config = load_config(ca.path, ca.overrides);
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000));
    return eval_command(config, make_mpi_world(timeout));
  }
  if (verb == "print-config") return print_config_command(rest, world_size);
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    log::info(kHelp);  // `trainer CONFIG.toml --help`: the training verb's usage
    return 0;
  }
  const ConfigArgs ca = parse_config_args(args);
  // A word that is neither a verb nor a file ("trainer evaluate"): say so, not "cannot read".
  if (ca.path == verb && verb.find_first_of("./") == std::string::npos && !std::filesystem::exists(verb))
    throw ConfigError("unknown command '" + verb + "': the commands are listed by `trainer --help`; to train, " +
                      "give a config file (trainer CONFIG.toml)");
  Config config = load_config(ca.path, ca.overrides);
  config.command_line = command_line;
  log::info("feast trainer: " + ca.path + " (" + describe_devices() + "; " + std::to_string(world_size) + " rank(s))");
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000));
  const TrainSummary s = train(config, make_mpi_world(timeout));
  if (s.ended != "finished") {
    log::info("stopped (" + s.ended + ") at step " + std::to_string(s.steps) + "; exit code " +
              std::to_string(s.exit_code) + (s.last_checkpoint ? "; checkpoint " + *s.last_checkpoint : "") +
              "; run again with the same config to continue");
    return s.exit_code;
  }
  if (s.losses.empty()) {
    log::info("done: nothing to train (already at step " + std::to_string(s.steps) + ")");
    return 0;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, ", final loss %.4f", s.final_loss);
  std::string line = "done: " + count_of(s.steps, "step") + buf;
  if (s.final_val_loss) {
    std::snprintf(buf, sizeof buf, ", final val loss %.4f", *s.final_val_loss);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, ", %.0f tokens/s; metrics in %s/metrics.jsonl", s.tokens_per_s,
                s.run_dir.c_str());
  log::info(line + buf);
  return 0;
}

}  // namespace
}  // namespace feast

int main(int argc, char** argv) {
  std::optional<feast::Runtime> runtime;
  try {
    runtime.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  feast::log::set_rank(runtime->rank(), runtime->world_size());
  const std::vector<std::string> args(argv + 1, argv + argc);
  int code = 1;
  try {
    // As a shell would read it back: arguments with special characters single-quoted.
    std::string command_line = argv[0];
    for (const std::string& a : args) {
      const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                          "0123456789_-./=:,+@%") == std::string::npos;
      std::string quoted = "'";
      for (char ch : a) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      command_line += " " + (plain ? a : quoted + "'");
    }
    code = feast::run(args, *runtime, command_line);
  } catch (const feast::ConfigError& e) {
    // Every rank read the same config and failed alike: one message, every rank exits 1.
    if (runtime->rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const feast::AgreedError& e) {
    // The ranks agreed that one of them failed (missing data, say): it reports, all exit 1.
    if (e.report()) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    feast::log::error(e.what());
    runtime->abort_job(1);
  }
  return code;
}
