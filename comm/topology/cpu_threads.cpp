#include "comm/topology/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <fstream>
#include <set>
#include <utility>
#include <string>

#include "core/error.h"

namespace feast {

int CpuSet::count() const {
  int n = 0;
  for (uint64_t w : words) n += std::popcount(w);
  return n;
}

bool CpuSet::overlaps(const CpuSet& other) const {
  const size_t n = std::min(words.size(), other.words.size());
  for (size_t i = 0; i < n; ++i)
    if (words[i] & other.words[i]) return true;
  return false;
}

CpuSet process_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CpuSet out;
  out.words.assign(CPU_SETSIZE / 64, 0);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    out.words[0] = 1;  // unknown: assume one CPU rather than oversubscribe
    return out;
  }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) out.words[size_t(cpu / 64)] |= uint64_t{1} << (cpu % 64);
  return out;
}

std::optional<int> cgroup_cpu_limit() {
  auto ceil_div = [](long long quota, long long period) -> std::optional<int> {
    if (quota <= 0 || period <= 0) return std::nullopt;
    return int((quota + period - 1) / period);
  };
  // cgroup v2: "max 100000" (no limit) or "200000 100000" (quota, period in microseconds).
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2) {
    std::string quota;
    long long period = 0;
    if (v2 >> quota >> period && quota != "max") {
      try {
        return ceil_div(std::stoll(quota), period);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
    return std::nullopt;
  }
  std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long long quota = -1, period = 0;
  if (q >> quota && p >> period) return ceil_div(quota, period);
  return std::nullopt;
}

std::optional<int> omp_num_threads_from_env() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || n <= 0 || (*end != '\0' && *end != ',')) return std::nullopt;
  return int(n);
}

int ranks_sharing_cpus(const std::vector<std::string>& hosts, const std::vector<CpuSet>& masks, int me) {
  int n = 0;
  for (size_t r = 0; r < hosts.size(); ++r)
    if (hosts[r] == hosts[size_t(me)] && masks[r].overlaps(masks[size_t(me)])) ++n;
  return std::max(1, n);
}

int choose_threads(std::optional<int> omp_num_threads, int available_cpus, int sharing_ranks) {
  if (omp_num_threads) return *omp_num_threads;
  return std::max(1, available_cpus / std::max(1, sharing_ranks));
}

int available_cpus() {
  int available = process_cpus().count();
  if (const std::optional<int> quota = cgroup_cpu_limit()) available = std::min(available, *quota);
  return available;
}

int available_cores() {
  const CpuSet mine = process_cpus();
  std::set<std::pair<std::string, std::string>> cores;
  for (size_t w = 0; w < mine.words.size(); ++w)
    for (int b = 0; b < 64; ++b) {
      if (!(mine.words[w] >> b & 1)) continue;
      const std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(w * 64 + size_t(b)) + "/topology/";
      std::string package, core;
      std::ifstream(topology + "physical_package_id") >> package;
      std::ifstream(topology + "core_id") >> core;
      if (package.empty() || core.empty()) return available_cpus();  // no topology: count CPUs
      cores.insert({package, core});
    }
  int available = std::max(1, int(cores.size()));
  if (const std::optional<int> quota = cgroup_cpu_limit()) available = std::min(available, *quota);
  return available;
}

bool threads_have_own_cores(int sharing_ranks, int threads, int available) {
  return int64_t{std::max(1, sharing_ranks)} * std::max(1, threads) <= available;
}

ThreadChoice thread_policy(int sharing_ranks) {
  const int available = available_cpus();
  const std::optional<int> env = omp_num_threads_from_env();
  return {choose_threads(env, available, sharing_ranks), describe_thread_choice(env, available, sharing_ranks)};
}

int ranks_sharing_my_cpus(Communicator& world, const std::vector<std::string>& hosts) {
  if (world.size() == 1) return 1;
  const CpuSet mine = process_cpus();
  const size_t words = mine.words.size();
  std::vector<uint64_t> all(words * size_t(world.size()));
  const std::vector<size_t> counts(size_t(world.size()), words);
  static_assert(sizeof(uint64_t) == sizeof(int64_t), "CPU masks travel as int64 words");
  world.allgather(mine.words.data(), all.data(), counts, DType::kInt64)->wait();
  std::vector<CpuSet> masks(size_t(world.size()));
  for (size_t r = 0; r < masks.size(); ++r)
    masks[r].words.assign(all.begin() + long(r * words), all.begin() + long((r + 1) * words));
  return ranks_sharing_cpus(hosts, masks, world.rank());
}

WaitPolicy choose_wait_policy(int sharing_ranks, int threads) {
  if (const char* forced = std::getenv("FEAST_COMM_WAIT")) {
    const std::string f = forced;
    if (f == "spin") return WaitPolicy::kSpin;
    if (f == "back-off") return WaitPolicy::kBackOff;
    throw ConfigError("FEAST_COMM_WAIT = '" + f + "': expected spin or back-off (or unset it to let the trainer "
                      "choose by whether each thread has a core)");
  }
  return threads_have_own_cores(sharing_ranks, threads, available_cpus()) ? WaitPolicy::kSpin : WaitPolicy::kBackOff;
}

std::string describe_thread_choice(std::optional<int> omp_num_threads, int available_cpus, int sharing_ranks) {
  if (omp_num_threads) return "OMP_NUM_THREADS = " + std::to_string(*omp_num_threads);
  return std::to_string(available_cpus) + " CPU(s) available / " + std::to_string(std::max(1, sharing_ranks)) +
         " rank(s) sharing them";
}

}  // namespace feast
