// The peak MFU divides by on the CPU: the FMA peak of the cores a rank may use, never less (a
// start-up measurement on a busy machine once put MFU at 175%), and a measured rate only where
// it is higher or no FMA peak is known; each named as it is printed.
#include "train/metrics/device_peak.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>

#include "comm/self_communicator.h"
#include "comm/topology/cpu_threads.h"
#include "core/cpu_peak.h"

namespace feast {
namespace {

TEST(DevicePeak, TheCpuPeakIsNeverBelowItsCoresFmaPeak) {
  const auto world = make_self_communicator();
  const DevicePeak alone = device_peak(*world, "cpu", 0, 1);
  const double cores = std::min(double(omp_get_max_threads()), double(available_cores()));
  if (const auto fma = cpu_fma_peak_tflops(cores)) {
    EXPECT_GE(alone.tflops_per_rank, fma->first);
    if (alone.kind == "FMA peak") {
      EXPECT_DOUBLE_EQ(alone.tflops_per_rank, fma->first);
      EXPECT_EQ(alone.source, fma->second);
    } else {  // the clock read is below the one the cores ran at: the measurement, saying so
      EXPECT_EQ(alone.kind, "measured sgemm");
      EXPECT_NE(alone.source.find("above the"), std::string::npos) << alone.source;
    }
  } else {
    EXPECT_EQ(alone.kind, "measured sgemm");
  }
  EXPECT_GT(alone.tflops_per_rank, 0);
}

TEST(DevicePeak, RanksSharingTheHostsCoresShareItsPeak) {
  const auto core = cpu_core_peak();
  const auto world = make_self_communicator();
  if (!core) {  // nothing to share: the measurement (the parsing is tested on texts in CpuPeak)
    EXPECT_EQ(device_peak(*world, "cpu", 0, 2).kind, "measured sgemm");
    return;
  }
  // More ranks than cores: each has a fraction of one, whatever its thread count.
  const int many = 4 * available_cores();
  const DevicePeak shared = device_peak(*world, "cpu", 0, many);
  EXPECT_GE(shared.tflops_per_rank, core->gflops() / 4 / 1e3 * 0.999);
  if (shared.kind == "FMA peak") {
    EXPECT_NEAR(shared.tflops_per_rank, core->gflops() / 4 / 1e3, 1e-12);
  }
  const auto fma = cpu_fma_peak_tflops(0.25);
  ASSERT_TRUE(fma);
  EXPECT_NE(fma->second.find("0.25 cores x"), std::string::npos) << fma->second;
  EXPECT_NE(fma->second.find("fp32 FLOP/cycle"), std::string::npos) << fma->second;
}

TEST(DevicePeak, ConfiguredAndUnknownGpuPeaks) {
  const auto world = make_self_communicator();
  const DevicePeak set = device_peak(*world, "cpu", 1.5, 1);
  EXPECT_DOUBLE_EQ(set.tflops_per_rank, 1.5);
  EXPECT_EQ(set.kind, "configured peak");
  EXPECT_EQ(set.source, "logging.peak_tflops");
}

}  // namespace
}  // namespace feast
