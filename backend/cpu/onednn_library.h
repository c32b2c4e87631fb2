// oneDNN's sgemm, for the CPU backend's float32 products. Measured side by side with OpenBLAS
// (with the kernels the CPU's features call for) and BLIS on every product of a GPT-2 training
// step, it was the fastest of the three (docs/benchmarks.md, "The CPU's BLAS"), and it picks its
// kernels by the CPU's features (cpuid), never by a table of CPU models. Like OpenBLAS it is not
// linked but opened on first use, so a build without it (no libdnnl-dev: the GPU machine) runs
// every product through OpenBLAS instead; FEAST_CPU_GEMM=openblas asks for that too.
#pragma once

#include <cstdint>
#include <string>

namespace feast::cpu {

struct OnednnLibrary {
  // dnnl_sgemm: row-major C (M, N) = alpha op(A) op(B) + beta C; returns dnnl_status_t (0: success).
  int (*sgemm)(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) = nullptr;
  std::string path;     // the file opened
  std::string version;  // "oneDNN 2.6.3"
  std::string isa;      // the widest instructions its kernels may use ("avx512_core_bf16")
  int level = 0;        // that, on vector_level's scale (core/cpu_peak.h)
};

// The library, opened on the first call (thread-safe), or nullptr: feast was built without it,
// or FEAST_CPU_GEMM=openblas. Throws feast::Error naming the path when a build with it cannot
// open it (reinstall libdnnl, or set FEAST_CPU_GEMM=openblas), and naming the variable when
// FEAST_CPU_GEMM is neither "onednn" nor "openblas".
const OnednnLibrary* onednn_library();

// A oneDNN ISA (dnnl_cpu_isa_t's value) on vector_level's scale: 4 any AVX-512, 3 AVX2, 2 AVX,
// 1 below.
int onednn_isa_level(unsigned isa);

}  // namespace feast::cpu
