#include "backend/cpu/blas_library.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "backend/cpu/onednn_library.h"
#include "backend/cpu/shared_library.h"
#include "core/cpu_peak.h"
#include "core/error.h"

#ifndef FEAST_OPENBLAS_LIB
#error "FEAST_OPENBLAS_LIB (the OpenBLAS library's path) comes from cmake/Dependencies.cmake"
#endif

namespace feast::cpu {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

BlasLibrary load() {
  BlasLibrary b;
  b.path = FEAST_OPENBLAS_LIB;
  const std::set<std::string>& flags = cpu_flags();
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  // A child of a feast process (plan --calibrate's bench comm) inherits the parent's choice.
  const char* ours = std::getenv("FEAST_CHOSEN_OPENBLAS_CORETYPE");
  std::string forced;
  if (user && ours && std::string(user) == ours) {
    b.chosen_by = std::string("the CPU's features: OPENBLAS_CORETYPE=") + user;
  } else if (user) {
    b.chosen_by = std::string("OPENBLAS_CORETYPE=") + user + ", set by the user";
  } else if (forced = openblas_core_for(flags); !forced.empty()) {
    // Read by OpenBLAS's constructor when the library loads, just below. Set once, on the first
    // product, before this process starts threads of its own that read the environment.
    setenv("OPENBLAS_CORETYPE", forced.c_str(), 0);
    setenv("FEAST_CHOSEN_OPENBLAS_CORETYPE", forced.c_str(), 1);
    b.chosen_by = "the CPU's features: OPENBLAS_CORETYPE=" + forced;
  } else {
    b.chosen_by = "OpenBLAS's own choice";
  }
  void* handle = open_shared_library(b.path, "OpenBLAS",
                                     "install Debian's libopenblas0-openmp (scripts/setup.sh) or rebuild with "
                                     "FEAST_OPENBLAS_DIR naming where it is");
  const auto resolve = [&](const char* name, auto& f) {
    resolve_symbol(handle, name, f, b.path,
                   "not an OpenBLAS library?; rebuild with FEAST_OPENBLAS_DIR naming Debian's libopenblas-openmp-dev");
  };
  resolve("cblas_sgemm", b.sgemm);
  resolve("cblas_dgemm", b.dgemm);
  resolve("cblas_sgemv", b.sgemv);
  char* (*corename)() = nullptr;
  char* (*config)() = nullptr;
  resolve("openblas_get_corename", corename);
  resolve("openblas_get_config", config);
  b.core = corename();
  b.config = config();
  return b;
}

}  // namespace

const BlasLibrary& blas_library() {
  static const BlasLibrary library = load();
  return library;
}

std::string describe_blas() {
  const BlasLibrary& b = blas_library();
  const OnednnLibrary* onednn = onednn_library();
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": its first two words.
  std::string version = b.config.substr(0, b.config.find(' ', b.config.find(' ') + 1));
  const int level = openblas_core_level(b.core), cpu = vector_level(cpu_flags());
  std::string s = version + " " + b.core + " kernels (" + vector_level_name(level) + "; " + b.chosen_by + ")";
  if (onednn)
    s = onednn->version + " " + onednn->isa + " kernels (" + vector_level_name(onednn->level) +
        ") for float32 products; " + s + " for float64 and GEMV";
  if (level < cpu)
    s += std::string("; warning: this CPU has ") + vector_level_name(cpu) +
         ", which these kernels do not use: unset OPENBLAS_CORETYPE or set it to " + openblas_core_for(cpu_flags());
  if (onednn && onednn->level < cpu)
    s += std::string("; warning: oneDNN's kernels do not use this CPU's ") + vector_level_name(cpu) +
         ": unset DNNL_MAX_CPU_ISA";
  return s;
}

std::string cpu_kernels_id() {
  const OnednnLibrary* onednn = onednn_library();
  return (onednn ? "oneDNN " + onednn->isa + " + " : std::string()) + "OpenBLAS " + blas_library().core;
}

int openblas_core_level(const std::string& core) {
  const std::string c = lower(core);
  for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"})
    if (c == n) return 4;
  for (const char* n : {"haswell", "zen", "excavator", "skylake"})
    if (c == n) return 3;
  for (const char* n : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (c == n) return 2;
  return 1;
}

std::string openblas_core_for(const std::set<std::string>& flags) {
  const auto has = [&](const char* f) { return flags.count(f) > 0; };
  if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq"))
    return has("avx512_bf16") ? "COOPERLAKE" : "SKYLAKEX";
  if (has("avx2") && has("fma")) return has("sse4a") ? "ZEN" : "HASWELL";
  if (has("avx")) return "SANDYBRIDGE";
  return "";
}

}  // namespace feast::cpu
