// The verb table: every verb of `trainer` with its one-line summary, its command line (options and
// usage) and its runner. Dispatch, `trainer --help` and `trainer VERB --help` are all made from it,
// so a verb is added by writing its file and one row in verbs.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/options.h"

namespace feast {

// What a verb knows of the process it runs in.
struct VerbContext {
  int world_size = 1;          // mpirun's ranks
  std::string thread_support;  // MPI's thread level, for --version
  std::string command_line;    // how the trainer was started, for the run directory
};

struct Verb {
  std::string name;     // "eval"
  std::string summary;  // one line for `trainer --help`
  CommandLine command_line;
  bool single_process = false;  // refuses to run under mpirun with more than one rank
  std::function<int(const Args&, const VerbContext&)> run;
  // A verb of several jobs (bench) chooses one by its first argument; without one, the first.
  std::vector<Verb> modes;
};

// Each verb, defined in its own file.
Verb train_verb();
Verb print_config_verb();
Verb prepare_data_verb();
Verb check_data_verb();
Verb tokenize_verb();
Verb inspect_verb();
Verb eval_verb();
Verb generate_verb();
Verb export_verb();
Verb plan_verb();
Verb check_backend_verb();
Verb bench_verb();

// In the order `trainer --help` lists them.
const std::vector<Verb>& verbs();

// Runs the verb argv names (or training, for `trainer CONFIG.toml`); `trainer --help`,
// `trainer VERB --help` and `trainer --version` are answered here. Returns the exit status;
// throws ConfigError for a bad command line. Tests call it with argv as a user would type it.
int dispatch(const std::vector<std::string>& argv, const VerbContext& context);

}  // namespace feast
