// ring_allreduce and parameter_server_allreduce under mpirun (1, 2, 3 and 4 ranks) against the
// library's allreduce. Inputs are small integers built from the rank and the index, so every
// sum is exact in float32 whatever order the algorithm adds in, and the results must be equal.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "tools/bench/collective_algorithms.h"
#include "comm/mpi_world.h"
#include "comm/self_communicator.h"

namespace feast {
namespace {

using namespace std::chrono_literals;

std::vector<float> input(size_t count, int rank) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float((rank * 7 + int(i) * 3) % 61 + 1);
  return v;
}

class Algorithms : public ::testing::Test {
 protected:
  std::unique_ptr<Communicator> world = make_mpi_world(30s);
  const int n = world->size();
  const int me = world->rank();

  // The library's answer for `count` elements.
  std::vector<float> expected(size_t count) {
    std::vector<float> v = input(count, me);
    world->allreduce(v.data(), v.size(), DType::kFloat32)->wait();
    return v;
  }
};

// Counts around the chunking: empty, fewer elements than ranks, not divisible by 3 or 4, larger.
const size_t kCounts[] = {0, 1, 2, 5, 7, 13, 1001, 4099};

TEST_F(Algorithms, RingEqualsTheLibrary) {
  for (size_t count : kCounts) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<float> data = input(count, me);
    ring_allreduce(*world, data.data(), data.size());
    EXPECT_EQ(data, expected(count));
  }
}

TEST_F(Algorithms, ParameterServerEqualsTheLibraryFromAnyServer) {
  for (int server = 0; server < n; ++server)
    for (size_t count : kCounts) {
      SCOPED_TRACE("server " + std::to_string(server) + ", count " + std::to_string(count));
      std::vector<float> data = input(count, me);
      parameter_server_allreduce(*world, data.data(), data.size(), server);
      EXPECT_EQ(data, expected(count));
    }
}

TEST_F(Algorithms, RingAndServerOnASubgroup) {
  // The odd ranks alone (a group of 1 or 2 at these sizes; none at one rank): the algorithms
  // address peers as ranks of the group they are given, not of the world.
  auto odd = world->split(me % 2 == 1 ? 1 : -1, me, "odd");
  if (!odd) return;
  std::vector<float> ring = input(11, odd->rank()), server = ring, library = ring;
  ring_allreduce(*odd, ring.data(), ring.size());
  parameter_server_allreduce(*odd, server.data(), server.size(), odd->size() - 1);
  odd->allreduce(library.data(), library.size(), DType::kFloat32)->wait();
  EXPECT_EQ(ring, library);
  EXPECT_EQ(server, library);
}

TEST_F(Algorithms, AreTheIdentityOnOneRank) {
  auto self = make_self_communicator("self");
  std::vector<float> data = input(9, 0), before = data;
  ring_allreduce(*self, data.data(), data.size());
  parameter_server_allreduce(*self, data.data(), data.size());
  EXPECT_EQ(data, before);
}

TEST_F(Algorithms, ServerOutsideTheGroupIsRefused) {
  std::vector<float> data(3);
  try {
    parameter_server_allreduce(*world, data.data(), data.size(), n);
    ADD_FAILURE() << "a server outside the group was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("server " + std::to_string(n) + " is not a rank"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace feast
