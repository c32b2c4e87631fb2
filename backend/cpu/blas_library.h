// OpenBLAS, loaded with the kernels this CPU's features call for. OpenBLAS picks its kernels once,
// when it loads, from a table of CPU models: one it does not know (Debian 12's 0.3.21 on any
// Sapphire or Emerald Rapids Xeon) gets its 2004 Pentium 4 kernels, SSE3 only, about 4x slower
// than the AVX-512 ones. So the library is not linked: it is opened here on first use, after
// OPENBLAS_CORETYPE has been set from the CPU's feature flags (a user's own OPENBLAS_CORETYPE is
// left as it is). Every process that computes on the CPU (each rank, each verb, each test) gets
// the same kernels this way, before any rank's first product. The library's path is the one the
// build found (FEAST_OPENBLAS_LIB in cmake/Dependencies.cmake).
#pragma once

#include <set>
#include <string>

#include "core/cpu_peak.h"  // vector_level: the CPU's widest extension, to which a core's is compared

namespace feast::cpu {

// The OpenBLAS entry points feast calls (cblas.h's signatures), resolved from the loaded library.
struct BlasLibrary {
  void (*sgemm)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc) = nullptr;
  void (*dgemm)(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                const double* b, int ldb, double beta, double* c, int ldc) = nullptr;
  void (*sgemv)(int order, int trans, int m, int n, float alpha, const float* a, int lda, const float* x, int incx,
                float beta, float* y, int incy) = nullptr;
  std::string path;        // the file opened
  std::string core;        // the kernels in use, as OpenBLAS names them ("SkylakeX", "Prescott")
  std::string config;      // openblas_get_config(): version and build options
  std::string chosen_by;   // "the CPU's features (OPENBLAS_CORETYPE=SKYLAKEX)", "OPENBLAS_CORETYPE set by the user", ...
};

// Opens the library on the first call (thread-safe); throws feast::Error naming the path when it
// cannot be opened or lacks an entry point.
const BlasLibrary& blas_library();

// One line for banners and summaries, naming the float32 products' library and OpenBLAS's kernels:
// "oneDNN 2.6.3 avx512_core_bf16 kernels (AVX-512) for float32 products; OpenBLAS 0.3.21 Cooperlake
// kernels (AVX-512; the CPU's features: OPENBLAS_CORETYPE=COOPERLAKE) for float64 and GEMV", or
// "OpenBLAS 0.3.21 SkylakeX kernels (AVX-512; ...)" alone where OpenBLAS does every product. A
// warning follows where either uses a narrower extension than the CPU has.
std::string describe_blas();

// The kernels, short, for comparing ranks: "oneDNN avx512_core_bf16 + OpenBLAS Cooperlake".
std::string cpu_kernels_id();

// The widest extension an OpenBLAS core's kernels use, on vector_level's scale, by the name
// openblas_get_corename() gives (case-insensitive): 4 SkylakeX, Cooperlake, SapphireRapids; 3
// Haswell, Zen, Excavator; 2 Sandybridge, Bulldozer, Piledriver, Steamroller; 1 the rest
// (Prescott, Core2, Nehalem, ...).
int openblas_core_level(const std::string& core);
// The OPENBLAS_CORETYPE for a CPU with these flags: COOPERLAKE (AVX-512 with BF16), SKYLAKEX
// (AVX-512 F/BW/VL/DQ), ZEN or HASWELL (AVX2 and FMA; AMD by its sse4a flag), SANDYBRIDGE (AVX);
// "" below that, where OpenBLAS's own choice is as good.
std::string openblas_core_for(const std::set<std::string>& flags);

}  // namespace feast::cpu
