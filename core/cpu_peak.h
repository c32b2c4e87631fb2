// The fp32 peak of one CPU core, from what the kernel reports: its widest vector unit (the
// flags of /proc/cpuinfo) and its highest clock (cpufreq's cpuinfo_max_freq, cpuinfo's "cpu MHz",
// the GHz in the model name, whichever is highest). MFU divides by it on the CPU: unlike a
// measured GEMM rate it cannot come out low because the machine was busy at the moment it was
// measured. It is an upper bound by construction (two FMA units per core assumed, as on every
// x86 core since Haswell; a core with one, or an AVX-512 done in two halves, reaches half), so
// an MFU against it errs low, never above 100%, as long as the clock read is the highest the
// core runs at; device_peak (train/metrics) also takes a measured rate when that is higher.
#pragma once

#include <optional>
#include <set>
#include <string>

namespace feast {

// The feature flags of the first processor /proc/cpuinfo's text lists ("flags" on x86,
// "Features" on Arm); this machine's, read once.
std::set<std::string> cpu_flags_from(const std::string& cpuinfo);
const std::set<std::string>& cpu_flags();

// The widest x86 vector extension a set of those flags names: 4 AVX-512, 3 AVX2 with FMA, 2 AVX,
// 1 SSE or older (and any other architecture); its name.
int vector_level(const std::set<std::string>& flags);
const char* vector_level_name(int level);

struct CpuCorePeak {
  double ghz = 0;               // the highest clock reported
  std::string clock_from;       // where it was read: "cpuinfo_max_freq", "cpu MHz", "model name"
  int flops_per_cycle = 0;      // fp32, one core: lanes x 2 (multiply and add) x units
  std::string vector_unit;      // "AVX-512: 2 FMA units of 16 fp32 lanes"
  double gflops() const { return ghz * flops_per_cycle; }
};

// From the text of /proc/cpuinfo and the highest cpuinfo_max_freq of the CPUs in GHz (0: none).
// Nothing when the vector unit or every clock is unknown.
std::optional<CpuCorePeak> cpu_core_peak_from(const std::string& cpuinfo, double max_freq_ghz);

// This machine's, read once.
std::optional<CpuCorePeak> cpu_core_peak();

}  // namespace feast
