// parallel.backend's decision: NCCL only on GPUs, only where it loads and no GPU is shared;
// an explicit "nccl" that cannot be had is an error naming the key, never a silent fallback.
#include "comm/transport_policy.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace feast {
namespace {

std::string error_of(const std::string& requested, const std::string& device, bool usable, bool shared) {
  try {
    choose_comm_backend(requested, device, usable, "cannot load NCCL (libnccl.so.2)", shared);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CommBackend, AutoTakesNcclOnlyWhereItCanRun) {
  EXPECT_TRUE(choose_comm_backend("auto", "cuda", true, "", false).nccl);
  const CommBackendChoice no_nccl = choose_comm_backend("auto", "cuda", false, "cannot load NCCL (libnccl.so.2)", false);
  EXPECT_FALSE(no_nccl.nccl);
  EXPECT_NE(no_nccl.why.find("cannot load NCCL"), std::string::npos) << no_nccl.why;
  const CommBackendChoice shared = choose_comm_backend("auto", "cuda", true, "", true);
  EXPECT_FALSE(shared.nccl);
  EXPECT_NE(shared.why.find("share a GPU"), std::string::npos) << shared.why;
  EXPECT_FALSE(choose_comm_backend("auto", "cpu", true, "", false).nccl);
}

TEST(CommBackend, MpiIsAlwaysAllowed) {
  EXPECT_FALSE(choose_comm_backend("mpi", "cuda", true, "", false).nccl);
  EXPECT_FALSE(choose_comm_backend("mpi", "cpu", false, "", false).nccl);
}

TEST(CommBackend, ExplicitNcclThatCannotRunIsAnError) {
  EXPECT_TRUE(choose_comm_backend("nccl", "cuda", true, "", false).nccl);
  EXPECT_NE(error_of("nccl", "cuda", false, false).find("cannot load NCCL"), std::string::npos);
  EXPECT_NE(error_of("nccl", "cuda", true, true).find("share a GPU"), std::string::npos);
  for (const auto& e : {error_of("nccl", "cuda", false, false), error_of("nccl", "cuda", true, true)})
    EXPECT_NE(e.find("parallel.backend"), std::string::npos) << e;
}

}  // namespace
}  // namespace feast
