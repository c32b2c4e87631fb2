#include "cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "train/stop_signals.h"

extern char** environ;

namespace feast {

int run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra, const std::string& log,
              double timeout_s) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.starts_with("PMIX_") || v.starts_with("PMI_") || v.starts_with("OMPI_COMM_WORLD") ||
        v.starts_with("OMPI_MCA_ess") || v.starts_with("OMPI_MCA_pmix") || v.starts_with("OMPI_MCA_orte") ||
        v.starts_with("OMPI_FILE_LOCATION") || v.starts_with("OMPI_UNIVERSE") || v.starts_with("OMPI_FIRST_RANKS"))
      continue;
    env.push_back(v);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  // The child starts with the stop signals unblocked and at their default actions: a signal
  // mask is inherited across exec, and this process blocks them in every thread.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &stop_signal_set());
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    std::ofstream(log, std::ios::app) << argv[0] << ": " << std::strerror(rc) << "\n";
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (done < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::ofstream(log, std::ios::app) << "killed after " << timeout_s << " s\n";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string last, line;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace feast
