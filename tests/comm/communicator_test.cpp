// MpiCommunicator and make_process_groups under mpirun (2, 3 and 4 ranks). Inputs are built
// from rank numbers so every expected result is exact. Every rank asserts; mpi_gtest_main.cpp
// prints rank 0's report and other ranks' failures, and fails the job if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "comm/comm_error.h"
#include "comm/topology/grid_report.h"
#include "comm/layout.h"
#include "comm/mpi_world.h"
#include "comm/process_groups.h"

namespace feast {
namespace {

using namespace std::chrono_literals;


// A fresh private communicator per test, so a test that fails half-way cannot leave messages
// for the next one. The timeout turns a rank that never arrives into a failure, not a hang.
// Each test runs twice: with whole MPI calls, and with every call split into calls of at most 5
// elements (what a call of more than 2^31 elements needs, without the gigabytes).
class Mpi : public ::testing::TestWithParam<size_t> {
 protected:
  std::unique_ptr<Communicator> world = make_mpi_world(30s, GetParam());
  const int n = world->size();
  const int me = world->rank();
};
INSTANTIATE_TEST_SUITE_P(WholeCalls, Mpi, ::testing::Values(size_t{INT_MAX}));
INSTANTIATE_TEST_SUITE_P(SplitCalls, Mpi, ::testing::Values(size_t{5}));

template <typename T>
class MpiTyped : public ::testing::Test {
 protected:
  std::unique_ptr<Communicator> world = make_mpi_world(30s);
  const int n = world->size();
  const int me = world->rank();
};
using ReduceTypes = ::testing::Types<float, double, int32_t>;
TYPED_TEST_SUITE(MpiTyped, ReduceTypes);

TYPED_TEST(MpiTyped, AllreduceSum) {
  using T = TypeParam;
  std::vector<T> data(1001);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<T>((this->me + 1) * static_cast<int>(i + 1));
  this->world->allreduce(data.data(), data.size(), dtype_of<T>())->wait();
  const int ranks_sum = this->n * (this->n + 1) / 2;
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<T>(ranks_sum * static_cast<int>(i + 1))) << i;
}

TYPED_TEST(MpiTyped, AllreduceMax) {
  using T = TypeParam;
  std::vector<T> data(777);
  // (rank + i) mod n takes every value 0..n-1 over the ranks, so the maximum is n - 1.
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<T>(((this->me + static_cast<int>(i)) % this->n) * static_cast<int>(i + 1) - 5);
  this->world->allreduce(data.data(), data.size(), dtype_of<T>(), {.op = ReduceOp::kMax})->wait();
  for (size_t i = 0; i < data.size(); ++i)
    ASSERT_EQ(data[i], static_cast<T>((this->n - 1) * static_cast<int>(i + 1) - 5)) << i;
}

TEST_P(Mpi, AllreduceSumAndMax) {
  std::vector<float> sum(23);
  std::vector<int64_t> mx(17);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = float((me + 1) * int(i + 1));
  for (size_t i = 0; i < mx.size(); ++i) mx[i] = int64_t((me + int(i)) % n);
  world->allreduce(sum.data(), sum.size(), DType::kFloat32)->wait();
  world->allreduce(mx.data(), mx.size(), DType::kInt64, {.op = ReduceOp::kMax})->wait();
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], float(n * (n + 1) / 2 * int(i + 1))) << i;
  for (size_t i = 0; i < mx.size(); ++i) ASSERT_EQ(mx[i], n - 1) << i;
}

TEST_P(Mpi, AllreduceBitXor) {
  // Rank r contributes bit r of word i (shifted by i): the XOR sets exactly the n low bits.
  std::vector<int64_t> words(13);
  for (size_t i = 0; i < words.size(); ++i) words[i] = int64_t{1} << (me + int(i));
  world->allreduce(words.data(), words.size(), DType::kInt64, {.op = ReduceOp::kBitXor})->wait();
  for (size_t i = 0; i < words.size(); ++i) ASSERT_EQ(words[i], ((int64_t{1} << n) - 1) << i) << i;
  std::vector<float> f(3, 1.0f);
  EXPECT_THROW(world->allreduce(f.data(), f.size(), DType::kFloat32, {.op = ReduceOp::kBitXor}), Error);
}

TEST_P(Mpi, BFloat16MovesBitForBit) {
  std::vector<uint16_t> data(9, 0);
  if (me == 0)
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint16_t(0x3F80 + 7 * i);
  world->broadcast(data.data(), data.size(), DType::kBFloat16, 0)->wait();
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], uint16_t(0x3F80 + 7 * i));
}

TEST_P(Mpi, BFloat16SumsAndMaximaAreBFloat16) {
  // Element i of rank r is (r + 1) * (i + 1) / 4: every partial sum is exact in bfloat16, so
  // any order of reduction gives the same bits, and integer addition of the words would not.
  std::vector<uint16_t> sum(11), max(11);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = max[i] = float_to_bf16(float((me + 1) * int(i + 1)) / 4.0f);
  world->allreduce(sum.data(), sum.size(), DType::kBFloat16)->wait();
  world->allreduce(max.data(), max.size(), DType::kBFloat16, {.op = ReduceOp::kMax})->wait();
  for (size_t i = 0; i < sum.size(); ++i) {
    ASSERT_EQ(bf16_to_float(sum[i]), float(n * (n + 1) / 2 * int(i + 1)) / 4.0f) << i;
    ASSERT_EQ(bf16_to_float(max[i]), float(n * int(i + 1)) / 4.0f) << i;
  }
  // A sum that bfloat16 cannot hold comes back rounded to nearest even (with two ranks there is
  // one addition, so no order to depend on): 256 + 1 is 256 in bfloat16.
  if (n == 2) {
    uint16_t x = float_to_bf16(me == 0 ? 256.0f : 1.0f);
    world->allreduce(&x, 1, DType::kBFloat16)->wait();
    EXPECT_EQ(bf16_to_float(x), 256.0f);
  }
}

// Block b has (b mod period) * scale elements: block 0 (and every period-th) is empty.
std::vector<size_t> uneven_counts(int n, int period, size_t scale) {
  std::vector<size_t> counts(n);
  for (int b = 0; b < n; ++b) counts[b] = static_cast<size_t>(b % period) * scale;
  return counts;
}

std::vector<size_t> offsets_of(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), size_t{0});
  return offsets;
}

TEST_P(Mpi, ReduceScatterUnevenSum) {
  const std::vector<size_t> counts = uneven_counts(n, 3, 5);
  const std::vector<size_t> offsets = offsets_of(counts);
  std::vector<float> send(offsets.back() + counts.back());
  for (int b = 0; b < n; ++b)
    for (size_t k = 0; k < counts[b]; ++k) send[offsets[b] + k] = static_cast<float>(me * 100 + b * 10 + k);
  std::vector<float> recv(counts[me], -1.0f);
  world->reduce_scatter(send.data(), recv.data(), counts, DType::kFloat32)->wait();
  for (size_t k = 0; k < recv.size(); ++k)
    ASSERT_EQ(recv[k], static_cast<float>(100 * n * (n - 1) / 2 + n * (me * 10 + static_cast<int>(k)))) << k;
}

// Spins on test() (which is what moves a non-blocking MPI collective on) until it says the
// work is done, for at most a few seconds.
bool tested_to_completion(Work& work) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline)
    if (work.test()) return true;
  return false;
}

TEST_P(Mpi, ReduceScatterUnevenSumInPlace) {
  // recv is this rank's own block of send: its result lands there (ZeRO 1's gradient buffer).
  // Finished by wait() alone, and by test() until done and then wait(), as GradientSync does
  // while the backward runs: the wait moves the result into place either way.
  for (const bool tested : {false, true}) {
    std::vector<size_t> counts = uneven_counts(n, 3, 5);
    counts[0] = 4;
    const std::vector<size_t> offsets = offsets_of(counts);
    std::vector<float> data(offsets.back() + counts.back());
    for (int b = 0; b < n; ++b)
      for (size_t k = 0; k < counts[b]; ++k) data[offsets[b] + k] = static_cast<float>(me * 100 + b * 10 + k);
    WorkHandle h = world->reduce_scatter(data.data(), data.data() + offsets[me], counts, DType::kFloat32);
    if (tested) {
      ASSERT_TRUE(tested_to_completion(*h));
      EXPECT_TRUE(h->test());  // and stays done
    }
    h->wait();
    for (size_t k = 0; k < counts[me]; ++k)
      ASSERT_EQ(data[offsets[me] + k],
                static_cast<float>(100 * n * (n - 1) / 2 + n * (me * 10 + static_cast<int>(k))))
          << k << (tested ? " (tested first)" : "");
  }
}

TEST_P(Mpi, TestAloneCompletesAnAllreduce) {
  std::vector<int32_t> x(7, me + 1);
  WorkHandle a = world->allreduce(x.data(), x.size(), DType::kInt32);
  ASSERT_TRUE(tested_to_completion(*a));
  a->wait();
  for (int32_t v : x) ASSERT_EQ(v, n * (n + 1) / 2);
  EXPECT_LT(a->device_seconds(), 0);  // MPI has no clock of its own to offer
}

TEST_P(Mpi, ReduceScatterUnevenMaxInt64) {
  const std::vector<size_t> counts = uneven_counts(n, 2, 3);
  const std::vector<size_t> offsets = offsets_of(counts);
  std::vector<int64_t> send(offsets.back() + counts.back());
  for (int b = 0; b < n; ++b)
    for (size_t k = 0; k < counts[b]; ++k) send[offsets[b] + k] = me * 100 + b * 10 + static_cast<int64_t>(k);
  std::vector<int64_t> recv(counts[me]);
  world->reduce_scatter(send.data(), recv.data(), counts, DType::kInt64, {.op = ReduceOp::kMax})->wait();
  for (size_t k = 0; k < recv.size(); ++k) ASSERT_EQ(recv[k], (n - 1) * 100 + me * 10 + static_cast<int64_t>(k));
}

// Block b holds b * 100 + k for k < counts[b].
template <typename T>
void expect_gathered(const std::vector<T>& recv, const std::vector<size_t>& counts) {
  const std::vector<size_t> offsets = offsets_of(counts);
  for (size_t b = 0; b < counts.size(); ++b)
    for (size_t k = 0; k < counts[b]; ++k) ASSERT_EQ(recv[offsets[b] + k], static_cast<T>(b * 100 + k)) << b << " " << k;
}

TEST_P(Mpi, AllgatherUnevenOutOfPlace) {
  const std::vector<size_t> counts = uneven_counts(n, 3, 2);
  std::vector<double> send(counts[me]);
  for (size_t k = 0; k < send.size(); ++k) send[k] = static_cast<double>(me * 100 + static_cast<int>(k));
  std::vector<double> recv(offsets_of(counts).back() + counts.back(), -1.0);
  world->allgather(send.data(), recv.data(), counts, DType::kFloat64)->wait();
  expect_gathered(recv, counts);
}

TEST_P(Mpi, AllgatherUnevenInPlace) {
  std::vector<size_t> counts = uneven_counts(n, 3, 2);
  counts[0] = 3;  // rank 0 contributes too; rank 3 (if any) still contributes nothing
  const std::vector<size_t> offsets = offsets_of(counts);
  std::vector<int32_t> recv(offsets.back() + counts.back(), -1);
  for (size_t k = 0; k < counts[me]; ++k) recv[offsets[me] + k] = me * 100 + static_cast<int32_t>(k);
  world->allgather(recv.data() + offsets[me], recv.data(), counts, DType::kInt32)->wait();
  expect_gathered(recv, counts);
}

TEST_P(Mpi, BroadcastFromLastRank) {
  const int root = n - 1;
  std::vector<double> data(513, -1.0);
  if (me == root)
    for (size_t i = 0; i < data.size(); ++i) data[i] = 3.0 * static_cast<double>(i) + 0.5;
  world->broadcast(data.data(), data.size(), DType::kFloat64, root)->wait();
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], 3.0 * static_cast<double>(i) + 0.5) << i;
}

TEST_P(Mpi, SendRecvRingKeepsTagsApart) {
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> got5(2, -1), got9(3, -1);
  auto r9 = world->recv(got9.data(), got9.size(), DType::kInt32, prev, 9);
  auto r5 = world->recv(got5.data(), got5.size(), DType::kInt32, prev, 5);
  const std::vector<int32_t> out5 = {me, 5}, out9 = {me, 9, me * 9};
  auto s5 = world->send(out5.data(), out5.size(), DType::kInt32, next, 5);
  auto s9 = world->send(out9.data(), out9.size(), DType::kInt32, next, 9);
  r5->wait();
  r9->wait();
  s5->wait();
  s9->wait();
  EXPECT_EQ(got5, (std::vector<int32_t>{prev, 5}));
  EXPECT_EQ(got9, (std::vector<int32_t>{prev, 9, prev * 9}));
}

TEST_P(Mpi, UnwaitedHandleWaitsWhenDestroyed) {
  std::vector<int64_t> data(64, me);
  { auto work = world->allreduce(data.data(), data.size(), DType::kInt64); }
  for (int64_t x : data) ASSERT_EQ(x, static_cast<int64_t>(n) * (n - 1) / 2);
  world->barrier();
}

TEST_P(Mpi, RejectsBadArgumentsLocally) {
  std::vector<float> buf(8);
  const std::vector<size_t> too_few(n - 1, 1);
  EXPECT_THROW(world->allgather(buf.data(), buf.data(), too_few, DType::kFloat32), Error);
  EXPECT_THROW(world->reduce_scatter(buf.data(), buf.data() + 4, too_few, DType::kFloat32), Error);
  EXPECT_THROW(world->send(buf.data(), 1, DType::kFloat32, n, 0), Error);
  EXPECT_THROW(world->recv(buf.data(), 1, DType::kFloat32, -1, 0), Error);
  EXPECT_THROW(world->broadcast(buf.data(), 1, DType::kFloat32, n), Error);
}

TEST_P(Mpi, MpiErrorNamesTheCall) {
  // Four elements into room for two: MPI reports truncation through the receive's handle.
  // (A ring, not a message to ourselves: Open MPI does not detect truncation on self-sends.)
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const std::vector<int32_t> out = {1, 2, 3, 4};
  std::vector<int32_t> in(2);
  auto r = world->recv(in.data(), in.size(), DType::kInt32, prev, 3);
  auto s = world->send(out.data(), out.size(), DType::kInt32, next, 3);
  s->wait();
  try {
    r->wait();
    ADD_FAILURE() << "a truncated receive did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("recv of 2 int32 from rank " + std::to_string(prev) + " (tag 3) on group 'world'"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("MPI_ERR_TRUNCATE"), std::string::npos) << what;
    EXPECT_NE(what.find("on rank " + std::to_string(me)), std::string::npos) << what;
  }
}

TEST_P(Mpi, UnmatchedRecvTimesOutNamingTheGroupAndCancels) {
  auto impatient = make_mpi_world(200ms);
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> in(4, -1);
  auto r = impatient->recv(in.data(), in.size(), DType::kInt32, prev, 42);
  const auto start = std::chrono::steady_clock::now();
  try {
    r->wait();
    FAIL() << "a receive nobody sends to did not time out";
  } catch (const CommTimeout& e) {
    EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
    const std::string what = e.what();
    EXPECT_NE(what.find("recv of 4 int32 from rank " + std::to_string(prev) + " (tag 42) on group 'world' (rank " +
                        std::to_string(me) + " of " + std::to_string(n) + ") did not complete within 0.2 s"),
              std::string::npos)
        << what;
  }
  r.reset();  // must return at once: the request was cancelled, not left to wait again
  world->barrier();

  // The cancelled receive must not swallow a later message with the same tag.
  const std::vector<int32_t> out = {me, 1, 2, 3};
  auto r2 = impatient->recv(in.data(), in.size(), DType::kInt32, prev, 42);
  auto s2 = impatient->send(out.data(), out.size(), DType::kInt32, next, 42);
  r2->wait();
  s2->wait();
  EXPECT_EQ(in, (std::vector<int32_t>{prev, 1, 2, 3}));
}

TEST_P(Mpi, SplitWithNegativeColorGivesNoCommunicator) {
  auto rest = world->split(me == 0 ? -1 : 7, -me, "rest");
  if (me == 0) {
    EXPECT_EQ(rest, nullptr);
    return;
  }
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->size(), n - 1);
  EXPECT_EQ(rest->rank(), n - 1 - me);  // keys -me reverse the order
  EXPECT_EQ(rest->name(), "rest");
}

// Checks one group against the layout's list: size, rank, name, and that an all-reduce over it
// sums exactly the world ranks the layout names.
void expect_group(Communicator* group, const std::vector<int>& ranks, int world_rank, const std::string& name) {
  SCOPED_TRACE(name);
  if (ranks.empty()) {
    EXPECT_EQ(group, nullptr);
    return;
  }
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->name(), name);
  EXPECT_EQ(group->size(), static_cast<int>(ranks.size()));
  ASSERT_LT(group->rank(), group->size());
  EXPECT_EQ(ranks[group->rank()], world_rank);
  int64_t sum = world_rank;
  group->allreduce(&sum, 1, DType::kInt64)->wait();
  EXPECT_EQ(sum, std::accumulate(ranks.begin(), ranks.end(), int64_t{0}));
}

TEST_P(Mpi, ProcessGroupsFollowEveryLayoutOfTheWorld) {
  for (const std::string order : {"tp-dp-pp", "pp-dp-tp", "dp-tp-pp"})
    for (int tp = 1; tp <= n; ++tp)
      for (int pp = 1; pp <= n / tp; ++pp) {
        if (n % (tp * pp) != 0) continue;
        const ParallelLayout layout(tp, pp, n / (tp * pp), order);
        SCOPED_TRACE("tp " + std::to_string(tp) + " pp " + std::to_string(pp) + " dp " +
                     std::to_string(layout.dp()) + " order " + order);
        ProcessGroups groups = make_process_groups(make_mpi_world(30s), layout);
        ASSERT_NE(groups.world, nullptr);
        EXPECT_EQ(groups.world->size(), n);
        EXPECT_EQ(groups.world->rank(), me);
        expect_group(groups.tp.get(), layout.tp_group(me), me, "tp");
        expect_group(groups.pp.get(), layout.pp_group(me), me, "pp");
        expect_group(groups.dp.get(), layout.dp_group(me), me, "dp");
        expect_group(groups.embedding.get(), layout.embedding_group(me), me, "embedding");
      }
}

TEST_P(Mpi, ProcessGroupsRejectALayoutOfAnotherSize) {
  EXPECT_THROW(make_process_groups(make_mpi_world(30s), ParallelLayout(n + 1, 1, 1)), ConfigError);
}

TEST_P(Mpi, GathersEveryRanksHostName) {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  const std::vector<std::string> hosts = gather_host_names(*world);
  ASSERT_EQ(hosts.size(), static_cast<size_t>(n));
  EXPECT_EQ(hosts[me], std::string(name, length));
}

// Rank r sends q * 1000 + r * 10 + k to rank q (k < count): what rank q finds in block r says
// who sent it and whether it was meant for q. 7 elements per rank also go in pieces when calls
// are split (at most 5 elements each), and bfloat16 moves as words.
TEST_P(Mpi, AlltoallDeliversEachRanksBlock) {
  for (const size_t count : {size_t{7}, size_t{3}, size_t{0}}) {
    SCOPED_TRACE(count);
    std::vector<int32_t> send(count * n), recv(count * n, -1);
    for (int q = 0; q < n; ++q)
      for (size_t k = 0; k < count; ++k) send[q * count + k] = q * 1000 + me * 10 + int32_t(k);
    world->alltoall(send.data(), recv.data(), count, DType::kInt32)->wait();
    for (int r = 0; r < n; ++r)
      for (size_t k = 0; k < count; ++k) ASSERT_EQ(recv[r * count + k], me * 1000 + r * 10 + int32_t(k)) << r << " " << k;
  }
  std::vector<uint16_t> words(n * 6), got(n * 6);
  for (size_t i = 0; i < words.size(); ++i) words[i] = uint16_t(0x3F80 + me * 100 + i);
  world->alltoall(words.data(), got.data(), 6, DType::kBFloat16)->wait();
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < 6; ++k) ASSERT_EQ(got[r * 6 + k], uint16_t(0x3F80 + r * 100 + me * 6 + k));
  std::vector<int32_t> same(n);
  EXPECT_THROW(world->alltoall(same.data(), same.data(), 1, DType::kInt32), Error);  // no in-place form
}

// Rank r sends r + q + 1 elements to rank q, each q * 1000 + r * 10 + k: every block arrives
// whole, at its place, from its sender; empty blocks (rank 0's to itself below) cost nothing.
TEST_P(Mpi, AlltoallvDeliversBlocksOfAnySize) {
  auto count = [](int from, int to) { return from == 0 && to == 0 ? size_t{0} : size_t(from + to + 1); };
  std::vector<size_t> send_counts(n), recv_counts(n);
  std::vector<int32_t> send;
  for (int q = 0; q < n; ++q) {
    send_counts[size_t(q)] = count(me, q);
    recv_counts[size_t(q)] = count(q, me);
    for (size_t k = 0; k < send_counts[size_t(q)]; ++k) send.push_back(q * 1000 + me * 10 + int32_t(k));
  }
  size_t total = 0;
  for (size_t c : recv_counts) total += c;
  std::vector<int32_t> recv(total, -1);
  world->alltoallv(send.data(), send_counts, recv.data(), recv_counts, DType::kInt32)->wait();
  size_t at = 0;
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < recv_counts[size_t(r)]; ++k, ++at)
      ASSERT_EQ(recv[at], me * 1000 + r * 10 + int32_t(k)) << "block from rank " << r << ", element " << k;
  std::vector<int32_t> same(total + send.size());
  EXPECT_THROW(world->alltoallv(same.data(), send_counts, same.data(), recv_counts, DType::kInt32), Error);
}

}  // namespace
}  // namespace feast
