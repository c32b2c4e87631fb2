#include "train/stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace feast {
namespace {

std::atomic<int> g_listening{0};  // a StopSignals is alive
std::atomic<int> g_interrupted{0};
std::atomic<int> g_terminated{0};

sigset_t make_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

// What the default action of `sig` does: ends the process of it. Unblocked in this thread only,
// so the raise below is delivered here, with SIG_DFL.
[[noreturn]] void die_of(int sig) {
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached: SIGINT, SIGTERM and SIGUSR1 all terminate by default
}

void take_signals(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (!g_listening.load()) die_of(sig);
    if (sig == SIGINT) {
      if (g_interrupted.load()) die_of(sig);  // the second Ctrl-C: give up on the clean stop
      g_interrupted.store(1);
    } else {
      g_terminated.store(1);
    }
  }
}

}  // namespace

const sigset_t& stop_signal_set() {
  static const sigset_t set = make_set();
  return set;
}

void route_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_sigmask(SIG_BLOCK, &stop_signal_set(), nullptr);
    std::thread(take_signals, stop_signal_set()).detach();
  });
}

StopSignals::StopSignals() {
  route_stop_signals();
  g_interrupted.store(0);
  g_terminated.store(0);
  g_listening.store(1);
}

StopSignals::~StopSignals() { g_listening.store(0); }

bool StopSignals::interrupted() const { return g_interrupted.load() != 0; }
bool StopSignals::terminated() const { return g_terminated.load() != 0; }

}  // namespace feast
