// Stopping a run cleanly when asked: SIGTERM and SIGUSR1 (what Slurm sends before preemption
// or the time limit, `--signal`; Open MPI's mpirun forwards SIGUSR1 to every rank) and SIGINT
// (Ctrl-C) only set a flag. The training loop votes on it in the next step's reduction, so every
// rank finishes the same step, saves a checkpoint and exits with the code below. A second
// Ctrl-C ends the process at once (default action). Fatal signals (SIGKILL, SIGSEGV, ...) are
// left alone, so a rank that dies still takes the job down at once through mpirun.
#pragma once

namespace feast {

// Exit codes of a run that stopped early after saving (docs/checkpoint-format.md lists them).
inline constexpr int kExitPreempted = 75;     // SIGTERM or SIGUSR1: EX_TEMPFAIL, "run it again to continue"
inline constexpr int kExitInterrupted = 130;  // SIGINT: the shell's 128 + SIGINT

// Installs the handlers for its lifetime (restoring the previous ones after).
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
