// Stopping a run cleanly when asked: SIGTERM and SIGUSR1 (what Slurm sends before preemption
// or the time limit, `--signal`; Open MPI's mpirun forwards SIGUSR1 to every rank) and SIGINT
// (Ctrl-C) only set a flag. The training loop votes on it in the next step's reduction, so every
// rank finishes the same step, saves a checkpoint and exits with the code below. A second
// Ctrl-C ends the process at once (default action). Fatal signals (SIGKILL, SIGSEGV, ...) are
// left alone, so a rank that dies still takes the job down at once through mpirun.
//
// The three signals never interrupt a computing thread: route_stop_signals() blocks them in the
// process's first thread, before any other starts (every later thread inherits the mask), and
// one thread of its own takes them with sigwait. An asynchronous handler would run on whatever
// stack the interrupted thread had, and oneDNN's JIT sgemm kernels (Debian 12's 2.6, fixed
// upstream in 3.11: oneDNN issue #4845) point rsp into a heap buffer while they run: a handler's
// frame there corrupted the heap (glibc aborted "corrupted size vs. prev_size" in tests that
// sent SIGUSR1 mid-step). With no StopSignals alive the thread does what the default action
// would: the process ends of that signal.
#pragma once

#include <signal.h>

namespace feast {

// Exit codes of a run that stopped early after saving (docs/checkpoint-format.md lists them).
inline constexpr int kExitPreempted = 75;     // SIGTERM or SIGUSR1: EX_TEMPFAIL, "run it again to continue"
inline constexpr int kExitInterrupted = 130;  // SIGINT: the shell's 128 + SIGINT

// Blocks SIGINT, SIGTERM and SIGUSR1 in the calling thread and starts the thread that takes them.
// Call it first in main, while the process has one thread; later calls do nothing.
void route_stop_signals();

// The signals route_stop_signals() takes, for a child process to unblock (posix_spawnattr_setsigmask:
// a mask is inherited across exec).
const sigset_t& stop_signal_set();

// Turns the signals into flags for its lifetime (after route_stop_signals(), which it calls).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool interrupted() const;  // SIGINT arrived
  bool terminated() const;   // SIGTERM or SIGUSR1 arrived
};

}  // namespace feast
