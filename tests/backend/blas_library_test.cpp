// OpenBLAS runs the kernels this CPU's features call for, not the ones its model table knows:
// Debian 12's 0.3.21 takes a current Xeon for a Pentium 4 (Prescott, SSE3) when left alone.
#include "backend/cpu/blas_library.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/blas.h"
#include "backend/cpu/onednn_library.h"

#include "core/cpu_peak.h"

namespace feast::cpu {
namespace {

TEST(BlasLibrary, KernelsUseTheWidestVectorExtensionTheCpuReports) {
  const BlasLibrary& b = blas_library();
  ASSERT_FALSE(b.core.empty());
  const int cpu = vector_level(cpu_flags());
  if (b.chosen_by.find("set by the user") != std::string::npos) {
    // The user's OPENBLAS_CORETYPE is theirs to choose; the description then warns when it is narrow.
    if (openblas_core_level(b.core) < cpu) {
      EXPECT_NE(describe_blas().find("warning"), std::string::npos);
    }
    return;
  }
  EXPECT_GE(openblas_core_level(b.core), cpu)
      << "OpenBLAS runs " << b.core << " kernels (" << vector_level_name(openblas_core_level(b.core))
      << ") on a CPU with " << vector_level_name(cpu) << "; chosen by " << b.chosen_by;
  EXPECT_EQ(describe_blas().find("warning"), std::string::npos) << describe_blas();
  EXPECT_NE(describe_blas().find(b.core + " kernels"), std::string::npos) << describe_blas();
  // And they compute: a product through the loaded library.
  const float a[4] = {1, 2, 3, 4}, x[4] = {5, 6, 7, 8};
  float c[4] = {};
  b.sgemm(101 /* CblasRowMajor */, 111 /* CblasNoTrans */, 111, 2, 2, 2, 1.0f, a, 2, x, 2, 0.0f, c, 2);
  EXPECT_EQ(c[0], 19.0f);
  EXPECT_EQ(c[3], 50.0f);
}

// oneDNN's sgemm, where the build has it, does the float32 products: with the CPU's widest
// extension, and the same products as OpenBLAS's (every transpose, leading dimensions wider than
// the matrices, beta accumulating), within float32 rounding.
TEST(BlasLibrary, OnednnProductsUseTheWidestExtensionAndMatchOpenblas) {
  const OnednnLibrary* onednn = onednn_library();
  if (!onednn) {
    // A build without libdnnl-dev, or FEAST_CPU_GEMM=openblas: OpenBLAS does every product, and
    // the description says so.
    EXPECT_EQ(describe_blas().find("oneDNN"), std::string::npos) << describe_blas();
    return;
  }
  const int cpu = vector_level(cpu_flags());
  if (!std::getenv("DNNL_MAX_CPU_ISA")) {
    EXPECT_GE(onednn->level, cpu) << onednn->version << " runs " << onednn->isa << " on a CPU with "
                                  << vector_level_name(cpu);
  }
  EXPECT_NE(describe_blas().find(onednn->version + " " + onednn->isa + " kernels"), std::string::npos)
      << describe_blas();
  EXPECT_NE(cpu_kernels_id().find("oneDNN " + onednn->isa), std::string::npos) << cpu_kernels_id();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const int M = 37, N = 29, K = 53, pad = 3;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      std::vector<float> a(size_t(ta ? K : M) * lda), b(size_t(tb ? N : K) * ldb), c(size_t(M) * ldc);
      for (float& v : a) v = u(rng);
      for (float& v : b) v = u(rng);
      for (float& v : c) v = u(rng);
      std::vector<float> ours = c, reference = c;
      gemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, ours.data(), ldc);
      blas_library().sgemm(101, ta ? 112 : 111, tb ? 112 : 111, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 1.0f,
                           reference.data(), ldc);
      double worst = 0;
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) worst = std::max(worst, double(std::fabs(ours[i * ldc + j] - reference[i * ldc + j])));
      EXPECT_LT(worst, 1e-5) << "transposes " << ta << tb;
      for (int i = 0; i < M; ++i)  // the padding between rows is left alone
        for (int j = N; j < ldc; ++j) EXPECT_EQ(ours[i * ldc + j], c[i * ldc + j]);
    }
  // An empty product leaves C as it is (oneDNN refuses zero leading dimensions; OpenBLAS takes it).
  float c0[2] = {1, 2};
  gemm(false, false, 1, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 1.0f, c0, 2);
  EXPECT_EQ(c0[0], 1.0f);
  EXPECT_EQ(c0[1], 2.0f);
}

TEST(BlasLibrary, OnednnIsaLevels) {
  EXPECT_EQ(onednn_isa_level(0xe7), 4);   // avx512_core_bf16
  EXPECT_EQ(onednn_isa_level(0x3e7), 4);  // avx512_core_amx
  EXPECT_EQ(onednn_isa_level(0x27), 4);   // avx512_core
  EXPECT_EQ(onednn_isa_level(0x407), 3);  // avx2_vnni
  EXPECT_EQ(onednn_isa_level(0x7), 3);    // avx2
  EXPECT_EQ(onednn_isa_level(0x3), 2);    // avx
  EXPECT_EQ(onednn_isa_level(0x1), 1);    // sse41
}

TEST(BlasLibrary, CoresChosenFromFeatureFlags) {
  const std::set<std::string> emerald = {"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                                         "avx512_bf16"};
  EXPECT_EQ(openblas_core_for(emerald), "COOPERLAKE");
  std::set<std::string> skylake = emerald;
  skylake.erase("avx512_bf16");
  EXPECT_EQ(openblas_core_for(skylake), "SKYLAKEX");
  EXPECT_EQ(openblas_core_for({"sse2", "avx", "avx2", "fma"}), "HASWELL");
  EXPECT_EQ(openblas_core_for({"sse2", "sse4a", "avx", "avx2", "fma"}), "ZEN");
  EXPECT_EQ(openblas_core_for({"sse2", "avx"}), "SANDYBRIDGE");
  EXPECT_EQ(openblas_core_for({"sse2", "sse3"}), "");
  EXPECT_EQ(openblas_core_for({"fp", "asimd"}), "");  // Arm: OpenBLAS's own choice
  EXPECT_EQ(vector_level(emerald), 4);
  EXPECT_EQ(vector_level({"avx", "avx2", "fma"}), 3);
  EXPECT_EQ(vector_level({"avx"}), 2);
  EXPECT_EQ(vector_level({"sse2"}), 1);
}

TEST(BlasLibrary, CoreNamesByTheExtensionTheirKernelsUse) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SAPPHIRERAPIDS"}) EXPECT_EQ(openblas_core_level(c), 4) << c;
  for (const char* c : {"Haswell", "Zen", "Excavator"}) EXPECT_EQ(openblas_core_level(c), 3) << c;
  for (const char* c : {"Sandybridge", "Piledriver"}) EXPECT_EQ(openblas_core_level(c), 2) << c;
  for (const char* c : {"Prescott", "Core2", "Nehalem", "Atom"}) EXPECT_EQ(openblas_core_level(c), 1) << c;
  // Every core the flags choose is one whose kernels reach the CPU's extension.
  for (const std::set<std::string>& f : std::vector<std::set<std::string>>{
           {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "avx"}, {"avx2", "fma", "avx"}, {"avx"}})
    EXPECT_EQ(openblas_core_level(openblas_core_for(f)), vector_level(f));
}

}  // namespace
}  // namespace feast::cpu
