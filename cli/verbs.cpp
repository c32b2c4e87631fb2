// The verb table and dispatch (cli/verb.h).
#include "cli/verb.h"

#include <algorithm>
#include <filesystem>

#include "backend/cpu/blas_library.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/nearest_word.h"

namespace feast {

namespace {

// Help text through the log, which ends every line itself.
void print(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  log::info(text);
}

const Verb* find(const std::vector<Verb>& table, const std::string& name) {
  const auto it = std::find_if(table.begin(), table.end(), [&](const Verb& v) { return v.name == name; });
  return it == table.end() ? nullptr : &*it;
}

std::vector<std::string> names(const std::vector<Verb>& table) {
  std::vector<std::string> out;
  for (const Verb& v : table) out.push_back(v.name);
  return out;
}

// "  name          summary" rows, one per verb or mode.
std::string rows(const std::vector<Verb>& table) {
  size_t width = 0;
  for (const Verb& v : table) width = std::max(width, v.name.size());
  std::string out;
  for (const Verb& v : table) {
    std::string line = "  " + v.name;
    line.resize(width + 5, ' ');
    out += line + v.summary + "\n";
  }
  return out;
}

std::string overview() {
  return "usage: [mpirun -np N] trainer CONFIG.toml [--set section.key=value ...]   train as configured\n"
         "       [mpirun -np N] trainer VERB [options]                             one of the verbs below\n"
         "       trainer VERB --help                                               a verb's own usage\n"
         "       trainer --version                                                 version and the devices it can use\n"
         "verbs:\n" +
         rows(verbs()) +
         "Launch one process per CPU slot (or GPU) with mpirun. Every config key is documented in\n"
         "docs/config.md; `--set` takes TOML values (bare words are strings) and may repeat.\n";
}

// A verb of several jobs: its overview, listing them.
std::string modes_overview(const Verb& verb) {
  return usage(verb.command_line) + "NAME is one of:\n" + rows(verb.modes) + "`trainer " + verb.name +
         " NAME --help` gives one's options; with no NAME, `trainer " + verb.name + "` runs " +
         verb.modes.front().name + ".\n";
}

int run_verb(const Verb& verb, const std::vector<std::string>& rest, const VerbContext& context) {
  if (!verb.modes.empty()) {
    const Verb* mode = rest.empty() ? nullptr : find(verb.modes, rest.front());
    if (!mode && wants_help(rest)) {
      print(modes_overview(verb));
      return 0;
    }
    if (mode) return run_verb(*mode, std::vector<std::string>(rest.begin() + 1, rest.end()), context);
    return run_verb(verb.modes.front(), rest, context);
  }
  if (wants_help(rest)) {
    print(usage(verb.command_line));
    return 0;
  }
  const int world = context.world_size;
  if (verb.single_process && world != 1)
    throw ConfigError("`trainer " + verb.command_line.verb + "` runs as a single process, not under mpirun -np " +
                      std::to_string(world));
  return verb.run(parse_command_line(verb.command_line, rest), context);
}

}  // namespace

const std::vector<Verb>& verbs() {
  static const std::vector<Verb> table = {
      train_verb(),    print_config_verb(), prepare_data_verb(), check_data_verb(),    tokenize_verb(),
      inspect_verb(),  eval_verb(),         generate_verb(),     export_verb(),        plan_verb(),
      bench_verb(),    check_backend_verb(),
  };
  return table;
}

int dispatch(const std::vector<std::string>& argv, const VerbContext& context) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    print(overview());
    return argv.empty() ? 2 : 0;
  }
  if (argv[0] == "--version") {
    log::info("feast trainer 0.1 (" + describe_devices() + "; " + cpu::describe_blas() + "; MPI thread support " +
              context.thread_support + ")");
    return 0;
  }
  if (const Verb* verb = find(verbs(), argv[0]))
    return run_verb(*verb, std::vector<std::string>(argv.begin() + 1, argv.end()), context);
  // `trainer CONFIG.toml ...` trains; a word that is neither a verb nor a file ("trainer
  // evaluate") is a misspelt verb, not a config that cannot be read.
  const std::string& first = argv[0];
  if (first.rfind("-", 0) != 0 && first.find_first_of("./") == std::string::npos && !std::filesystem::exists(first)) {
    const std::string near = nearest_word(first, names(verbs()));
    throw ConfigError("unknown command '" + first + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
                      ": the commands are listed by `trainer --help`; to train, give a config file (trainer "
                      "CONFIG.toml)");
  }
  return run_verb(*find(verbs(), "train"), argv, context);
}

}  // namespace feast
