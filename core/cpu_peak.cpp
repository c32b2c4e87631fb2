#include "core/cpu_peak.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace feast {
namespace {

std::string proc_cpuinfo() {
  std::ifstream in("/proc/cpuinfo");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::set<std::string> cpu_flags_from(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key != "flags" && key != "Features") continue;
    std::istringstream words(line.substr(colon + 1));
    std::set<std::string> out;
    for (std::string w; words >> w;) out.insert(w);
    return out;
  }
  return {};
}

const std::set<std::string>& cpu_flags() {
  static const std::set<std::string> flags = cpu_flags_from(proc_cpuinfo());
  return flags;
}

int vector_level(const std::set<std::string>& flags) {
  const auto has = [&](const char* f) { return flags.count(f) > 0; };
  if (has("avx512f")) return 4;
  if (has("avx2") && has("fma")) return 3;
  if (has("avx")) return 2;
  return 1;
}

const char* vector_level_name(int level) {
  switch (level) {
    case 4: return "AVX-512";
    case 3: return "AVX2";
    case 2: return "AVX";
    default: return "SSE";
  }
}

std::optional<CpuCorePeak> cpu_core_peak_from(const std::string& cpuinfo, double max_freq_ghz) {
  CpuCorePeak p;
  const std::set<std::string> flags = cpu_flags_from(cpuinfo);
  const auto has = [&](const char* f) { return flags.count(f) > 0; };
  // Two FMA units per core everywhere: the most any of these cores has (Arm's Neoverse V2 has
  // four 128-bit units, counted as such), so the figure is an upper bound.
  const int level = vector_level(flags);
  if (level == 4) {
    p.flops_per_cycle = 16 * 2 * 2;
    p.vector_unit = "AVX-512: 2 FMA units of 16 fp32 lanes";
  } else if (level == 3) {
    p.flops_per_cycle = 8 * 2 * 2;
    p.vector_unit = "AVX2: 2 FMA units of 8 fp32 lanes";
  } else if (level == 2) {
    p.flops_per_cycle = 8 * 2;
    p.vector_unit = "AVX: a multiply and an add unit of 8 fp32 lanes";
  } else if (has("sse2")) {
    p.flops_per_cycle = 4 * 2;
    p.vector_unit = "SSE2: a multiply and an add unit of 4 fp32 lanes";
  } else if (has("sve")) {
    p.flops_per_cycle = 16 * 2 * 2;
    p.vector_unit = "SVE: 2 FMA units of up to 16 fp32 lanes";
  } else if (has("asimd")) {
    p.flops_per_cycle = 4 * 2 * 4;
    p.vector_unit = "NEON: 4 FMA units of 4 fp32 lanes";
  } else {
    return std::nullopt;
  }

  if (max_freq_ghz > 0) {
    p.ghz = max_freq_ghz;
    p.clock_from = "cpuinfo_max_freq";
  }
  std::istringstream in(cpuinfo);
  const std::regex mhz(R"(^cpu MHz\s*:\s*([0-9.]+))"), model(R"(^model name\s*:.*@\s*([0-9.]+)\s*GHz)");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    double ghz = 0;
    std::string from;
    if (std::regex_search(line, m, mhz)) {
      ghz = std::stod(m[1]) / 1e3;
      from = "cpu MHz";
    } else if (std::regex_search(line, m, model)) {
      ghz = std::stod(m[1]);
      from = "model name";
    }
    if (ghz > p.ghz) {
      p.ghz = ghz;
      p.clock_from = from;
    }
  }
  if (p.ghz <= 0) return std::nullopt;
  return p;
}

std::optional<CpuCorePeak> cpu_core_peak() {
  static const std::optional<CpuCorePeak> peak = [] {
    const std::string text = proc_cpuinfo();
    double max_ghz = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/sys/devices/system/cpu", ec), end; !ec && it != end;
         it.increment(ec)) {
      std::ifstream f(it->path() / "cpufreq" / "cpuinfo_max_freq");
      double khz = 0;
      if (f >> khz) max_ghz = std::max(max_ghz, khz / 1e6);
    }
    return cpu_core_peak_from(text, max_ghz);
  }();
  return peak;
}

}  // namespace feast
