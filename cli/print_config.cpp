// `trainer print-config`: the config as a run of it would use it, every key with its value and
// where it came from; or, with --docs, docs/config.md with its tables made from the key table.
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli/verb.h"
#include "comm/topology/cpu_threads.h"
#include "config/config.h"
#include "config/layout_plan.h"
#include "core/error.h"
#include "core/log.h"

namespace feast {

namespace {

int run_print_config(const Args& args, const VerbContext& context) {
  if (args.has("--docs")) {
    // The config reference with its tables made from the key table: the committed file must
    // equal this (a test checks), so a new or changed key is documented by regenerating.
    const std::string path = args.text("--docs");
    std::ifstream in(path);
    if (!in) throw ConfigError("print-config --docs: cannot read " + path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fputs(regenerate_config_docs(text).c_str(), stdout);
    return 0;
  }
  const Config config = load_config(args.config_path(), args.overrides());
  const bool world_given = args.has("--world");
  InferredValues v;
  v.world_size = world_given ? int(args.integer("--world", 1)) : context.world_size;
  try {
    // What the run would derive, by the run's own rules.
    const LayoutPlan plan = plan_layout(config, v.world_size);
    v.dp = plan.layout.dp();
    v.micro_batches = plan.micro_batches;
  } catch (const ConfigError&) {
    // Asked about a job of --world ranks (as sweep.py --check does): the layout must fit it.
    if (world_given) throw;
    // Not a valid layout at this world size: those values stay marked as inferred at launch.
  }
  // The ranks of a job of `world` on this machine share its CPUs (as training's policy decides).
  const ThreadChoice choice = thread_policy(v.world_size);
  v.threads = choice.threads;
  v.threads_from = choice.from + ", on this machine";
  log::info(to_toml(with_inferred_values(config, v)));
  return 0;
}

}  // namespace

Verb print_config_verb() {
  Verb v;
  v.name = "print-config";
  v.summary = "print the resolved config: every key, its value and where it came from";
  CommandLine& cl = v.command_line;
  cl.verb = "print-config";
  cl.synopsis =
      "[mpirun -np N] trainer print-config [CONFIG.toml] [--set section.key=value ...] [--world N]\n"
      "       trainer print-config --docs docs/config.md";
  cl.description =
      "Prints the resolved config as TOML: every key with its value and where it came from. Values\n"
      "the config leaves to inference (parallel.dp, training.batch_size or parallel.num_micro_batches,\n"
      "training.threads) are filled in as a job of N ranks on this machine would use them (N: --world,\n"
      "else mpirun's world size) and marked [inferred: ...]. With --world, a layout that does not fit\n"
      "N ranks is an error. With --docs, prints docs/config.md with its tables regenerated from the\n"
      "key table (redirect it to update the file).";
  cl.takes_config = true;
  cl.options = {
      {"--world", ValueKind::kInteger, "N", "the job's ranks (default: mpirun's world size)", {}, 1},
      {"--docs", ValueKind::kText, "FILE", "print FILE (docs/config.md) with its generated tables renewed"},
  };
  v.run = run_print_config;
  return v;
}

}  // namespace feast
