#include "train/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace feast {
namespace {

// Lock-free atomics: the handler may run on any thread (OpenMP's, the checkpoint writer's) while
// the main thread reads the flags.
std::atomic<int> g_interrupted{0};
std::atomic<int> g_terminated{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");
struct sigaction g_previous[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGUSR1};

void on_signal(int sig) {
  if (sig == SIGINT) {
    if (g_interrupted.load()) {
      // The second Ctrl-C: give up on the clean stop and die of SIGINT now.
      signal(SIGINT, SIG_DFL);
      raise(SIGINT);
      return;
    }
    g_interrupted.store(1);
  } else {
    g_terminated.store(1);
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_interrupted.store(0);
  g_terminated.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight (file I/O, MPI's polling) just continue
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

bool StopSignals::interrupted() const { return g_interrupted.load() != 0; }
bool StopSignals::terminated() const { return g_terminated.load() != 0; }

}  // namespace feast
