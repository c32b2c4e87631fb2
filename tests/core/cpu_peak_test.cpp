// The CPU core's FMA peak read from /proc/cpuinfo's text: the widest vector unit its flags name,
// the highest clock any source gives, nothing when either is unknown.
#include "core/cpu_peak.h"

#include <gtest/gtest.h>

namespace feast {
namespace {

// Two processors of a Sapphire Rapids virtual machine, as its kernel lists them (abridged).
const char* kXeonVm =
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "cpu MHz\t\t: 2299.998\nflags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw avx512_bf16\n\n"
    "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "cpu MHz\t\t: 2300.010\nflags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw avx512_bf16\n";

TEST(CpuPeak, AvxFiveTwelveCoreAtItsHighestReportedClock) {
  const auto p = cpu_core_peak_from(kXeonVm, 0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->flops_per_cycle, 64);  // 16 lanes x 2 (multiply-add) x 2 units
  EXPECT_NEAR(p->ghz, 2.30001, 1e-9);
  EXPECT_EQ(p->clock_from, "cpu MHz");
  EXPECT_NEAR(p->gflops(), 147.2, 0.01);
  EXPECT_NE(p->vector_unit.find("AVX-512"), std::string::npos) << p->vector_unit;
}

TEST(CpuPeak, TheHighestClockOfAnySourceCounts) {
  const std::string cpuinfo =
      "model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\ncpu MHz\t\t: 1000.000\n"
      "flags\t\t: sse2 avx avx2 fma\n";
  auto p = cpu_core_peak_from(cpuinfo, 0);  // a core idling at 1 GHz: the model name's 2.4 GHz
  ASSERT_TRUE(p);
  EXPECT_EQ(p->flops_per_cycle, 32);
  EXPECT_DOUBLE_EQ(p->ghz, 2.4);
  EXPECT_EQ(p->clock_from, "model name");
  p = cpu_core_peak_from(cpuinfo, 3.7);  // cpufreq's turbo clock, higher still
  ASSERT_TRUE(p);
  EXPECT_DOUBLE_EQ(p->ghz, 3.7);
  EXPECT_EQ(p->clock_from, "cpuinfo_max_freq");
}

TEST(CpuPeak, ArmAndOlderX86AndTheUnknown) {
  // Arm lists "Features" and no clock: the clock comes from cpufreq or not at all.
  const std::string arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes sve\n";
  EXPECT_FALSE(cpu_core_peak_from(arm, 0));
  const auto sve = cpu_core_peak_from(arm, 3.0);
  ASSERT_TRUE(sve);
  EXPECT_EQ(sve->flops_per_cycle, 64);
  const auto neon = cpu_core_peak_from("Features\t: fp asimd\n", 3.0);
  ASSERT_TRUE(neon);
  EXPECT_EQ(neon->flops_per_cycle, 32);
  const auto sse = cpu_core_peak_from("cpu MHz\t\t: 3000.0\nflags\t\t: fpu sse sse2\n", 0);
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->flops_per_cycle, 8);
  EXPECT_FALSE(cpu_core_peak_from("cpu MHz\t\t: 3000.0\nflags\t\t: fpu\n", 0));
  EXPECT_FALSE(cpu_core_peak_from("", 0));
}

}  // namespace
}  // namespace feast
