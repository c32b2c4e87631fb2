// OpenBLAS runs the kernels this CPU's features call for, not the ones its model table knows:
// Debian 12's 0.3.21 takes a current Xeon for a Pentium 4 (Prescott, SSE3) when left alone.
#include "backend/cpu/blas_library.h"

#include <gtest/gtest.h>

#include <cstdlib>

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
