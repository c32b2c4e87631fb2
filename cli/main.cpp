// The `trainer` executable: MPI start-up, the verb table's dispatch (cli/verb.h), and the one
// place errors end the job. An error every rank finds alike (a bad config) is printed once by
// rank 0 and every rank exits 1; one that only this rank hit is printed with its rank and aborts
// the whole job, so no rank is left waiting.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/blas_library.h"
#include "backend/cpu/onednn_library.h"
#include "cli/verb.h"
#include "comm/runtime.h"
#include "core/error.h"
#include "core/log.h"
#include "train/stop_signals.h"

namespace {

// The command line as a shell would read it back: arguments with special characters quoted.
std::string quoted_command_line(const char* program, const std::vector<std::string>& args) {
  std::string line = program;
  for (const std::string& a : args) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789_-./=:,+@%") == std::string::npos;
    std::string quoted = "'";
    for (char ch : a) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    line += " " + (plain ? a : quoted + "'");
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any other thread starts (OpenMP's, MPI's, oneDNN's): Ctrl-C, SIGTERM and SIGUSR1 are
  // taken by a thread of their own, never by one computing (train/stop_signals.h says why).
  feast::route_stop_signals();
  // OpenBLAS is opened, its kernels chosen (setting OPENBLAS_CORETYPE), while this process has
  // one thread: setenv must not race with MPI's threads reading the environment. A failure here
  // is not fatal (a GPU run may not need it); the first product reports it.
  try {
    feast::cpu::blas_library();
    feast::cpu::onednn_library();
  } catch (const std::exception&) {
  }
  std::optional<feast::Runtime> runtime;
  try {
    runtime.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  feast::log::set_rank(runtime->rank(), runtime->world_size());
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return feast::dispatch(args, {runtime->world_size(), runtime->thread_support(), quoted_command_line(argv[0], args)});
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
}
