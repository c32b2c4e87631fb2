// StagedCommunicator without a GPU, under mpirun (1, 2 and 3 ranks): buffers the test allocates
// play device memory (the decorator is told so through DeviceMemoryOps, and copies them with a
// counting memcpy), and a checking layer between the decorator and the real MPI world fails the
// test whenever MPI is handed one of them. So each case shows that the staging happened, that
// MPI saw host memory only, and that the results came back. Values are small integers, exact in
// float, int32 and bfloat16; every rank asserts (mpi_gtest_main.cpp collects the verdicts).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "comm/mpi_world.h"
#include "comm/staged_communicator.h"

namespace feast {
namespace {

using namespace std::chrono_literals;

// bfloat16 travels as its 16-bit pattern (uint16_t here); the rest as core/dtype.h names them.
template <typename T> constexpr DType dtype_in_test() {
  if constexpr (std::is_same_v<T, uint16_t>) return DType::kBFloat16;
  else return dtype_of<T>();
}

template <typename T> T as(int v) {
  if constexpr (std::is_same_v<T, uint16_t>) return float_to_bf16(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename T> std::vector<T> values(std::span<T> s) { return {s.begin(), s.end()}; }

std::vector<size_t> offsets_of(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), size_t{0});
  return offsets;
}

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Buffers that live as long as the test, each remembered with its extent.
class Arena {
 public:
  template <typename T> std::span<T> allocate(size_t count, T fill) {
    Block& b = blocks_.emplace_back(Block{std::make_unique<std::byte[]>(count * sizeof(T)), count * sizeof(T)});
    std::span<T> s(reinterpret_cast<T*>(b.bytes.get()), count);
    std::fill(s.begin(), s.end(), fill);
    return s;
  }
  // Whether p lies inside a buffer, and then whether [p, p + bytes) stays inside it.
  bool contains(const void* p) const { return holding(p) != nullptr; }
  bool holds_whole(const void* p, size_t bytes) const {
    const Block* b = holding(p);
    return b && address(p) + bytes <= address(b->bytes.get()) + b->size;
  }
  // Whether [p, p + bytes) shares a byte with any buffer.
  bool overlaps(const void* p, size_t bytes) const {
    const uintptr_t begin = address(p), end = begin + std::max<size_t>(bytes, 1);
    return std::any_of(blocks_.begin(), blocks_.end(), [&](const Block& b) {
      return begin < address(b.bytes.get()) + b.size && address(b.bytes.get()) < end;
    });
  }

 private:
  struct Block {
    std::unique_ptr<std::byte[]> bytes;
    size_t size;
  };
  const Block* holding(const void* p) const {
    for (const Block& b : blocks_)
      if (address(p) >= address(b.bytes.get()) && address(p) < address(b.bytes.get()) + b.size) return &b;
    return nullptr;
  }
  std::vector<Block> blocks_;
};

// The pretend GPU: its buffers are device memory, stages are plain host memory it hands out
// (and keeps, so no address is reused), and copies count by direction. A copy that is not between
// a device buffer and a stage, or that runs past the end of either, fails the test (and is not
// made).
class FakeDevice {
 public:
  template <typename T> std::span<T> allocate(size_t count, T fill) { return memory_.allocate(count, fill); }
  const Arena& memory() const { return memory_; }

  DeviceMemoryOps ops() {
    return {.is_device = [this](const void* p) { return memory_.contains(p); },
            .copy = [this](void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); },
            .host_buffer = [this](size_t bytes) {
              return std::shared_ptr<void>(stages_.allocate(bytes, std::byte{0xAB}).data(), [](void*) {});
            }};
  }

  // {copies to the host, copies to the device} since the last reset.
  std::pair<int, int> copies() const { return {to_host_, to_device_}; }
  void reset() { to_host_ = to_device_ = 0; }

 private:
  void copy(void* dst, const void* src, size_t bytes) {
    const bool from_device = memory_.contains(src);
    const void* device_side = from_device ? src : dst;
    const void* host_side = from_device ? dst : src;
    if (!memory_.holds_whole(device_side, bytes) || !stages_.holds_whole(host_side, bytes)) {
      ADD_FAILURE() << "a staging copy of " << bytes << " bytes is not between a device buffer and a stage, "
                    << "or runs past the end of one";
      return;
    }
    std::memcpy(dst, src, bytes);
    ++(from_device ? to_host_ : to_device_);
  }

  Arena memory_, stages_;
  int to_host_ = 0, to_device_ = 0;
};

// Between the decorator and MPI: forwards every call, failing the test when a buffer of the
// fake device reaches it, and remembers the last call's buffers (to see what MPI was given).
class HostOnlyCommunicator final : public Communicator {
 public:
  HostOnlyCommunicator(std::unique_ptr<Communicator> inner, const FakeDevice& device)
      : inner_(std::move(inner)), device_(device) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  WorkHandle allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts) override {
    reached("allreduce", {{data, count * dtype_size(dtype)}});
    return inner_->allreduce(data, count, dtype, opts);
  }
  WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts, DType dtype,
                            const CollectiveOptions& opts) override {
    const size_t all = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
    reached("reduce_scatter",
            {{send, all * dtype_size(dtype)}, {recv, recv_counts[size_t(rank())] * dtype_size(dtype)}});
    return inner_->reduce_scatter(send, recv, recv_counts, dtype, opts);
  }
  WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                       const CollectiveOptions& opts) override {
    const size_t all = std::accumulate(counts.begin(), counts.end(), size_t{0});
    reached("allgather", {{send, counts[size_t(rank())] * dtype_size(dtype)}, {recv, all * dtype_size(dtype)}});
    return inner_->allgather(send, recv, counts, dtype, opts);
  }
  WorkHandle broadcast(void* data, size_t count, DType dtype, int root, const CollectiveOptions& opts) override {
    reached("broadcast", {{data, count * dtype_size(dtype)}});
    return inner_->broadcast(data, count, dtype, root, opts);
  }
  WorkHandle alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                      const CollectiveOptions& opts) override {
    const size_t bytes = count_per_rank * size_t(size()) * dtype_size(dtype);
    reached("alltoall", {{send, bytes}, {recv, bytes}});
    return inner_->alltoall(send, recv, count_per_rank, dtype, opts);
  }
  WorkHandle alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t> recv_counts, DType dtype, const CollectiveOptions& opts) override {
    const size_t out = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
    const size_t in = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
    reached("alltoallv", {{send, out * dtype_size(dtype)}, {recv, in * dtype_size(dtype)}});
    return inner_->alltoallv(send, send_counts, recv, recv_counts, dtype, opts);
  }
  WorkHandle send(const void* data, size_t count, DType dtype, int peer, int tag) override {
    reached("send", {{data, count * dtype_size(dtype)}});
    return inner_->send(data, count, dtype, peer, tag);
  }
  WorkHandle recv(void* data, size_t count, DType dtype, int peer, int tag) override {
    reached("recv", {{data, count * dtype_size(dtype)}});
    return inner_->recv(data, count, dtype, peer, tag);
  }
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    std::unique_ptr<Communicator> part = inner_->split(color, key, name);
    if (!part) return nullptr;
    return std::make_unique<HostOnlyCommunicator>(std::move(part), device_);
  }

  // The buffers of the last call, in the order of its arguments.
  const std::vector<const void*>& last_buffers() const { return last_; }

 private:
  void reached(const char* call, std::initializer_list<std::pair<const void*, size_t>> buffers) {
    last_.clear();
    for (const auto& [p, bytes] : buffers) {
      last_.push_back(p);
      if (device_.memory().overlaps(p, bytes)) ADD_FAILURE() << call << " reached MPI with device memory";
    }
  }

  std::unique_ptr<Communicator> inner_;
  const FakeDevice& device_;
  std::vector<const void*> last_;
};

enum class Where { kHost, kDevice };
constexpr Where kBoth[] = {Where::kHost, Where::kDevice};
const char* name_of(Where w) { return w == Where::kHost ? "host" : "device"; }
int on_device(Where w) { return w == Where::kDevice ? 1 : 0; }

// A private MPI world per test, checked by HostOnlyCommunicator and staged over the fake device.
// The timeout turns a rank that never arrives into a failure, not a hang.
class Staged : public ::testing::Test {
 protected:
  Staged() {
    auto checked = std::make_unique<HostOnlyCommunicator>(make_mpi_world(30s), device);
    mpi = checked.get();
    comm = std::make_unique<StagedCommunicator>(std::move(checked), device.ops());
    n = comm->size();
    me = comm->rank();
  }

  template <typename T> std::span<T> buffer(Where w, size_t count, T fill) {
    return w == Where::kDevice ? device.allocate(count, fill) : host.allocate(count, fill);
  }

  FakeDevice device;
  Arena host;
  HostOnlyCommunicator* mpi = nullptr;  // comm's inner layer
  std::unique_ptr<Communicator> comm;
  int n = 0, me = 0;
};

template <typename T> class StagedReducible : public Staged {};
using ReducibleTypes = ::testing::Types<float, int32_t>;
TYPED_TEST_SUITE(StagedReducible, ReducibleTypes);

template <typename T> class StagedMoved : public Staged {};
using MovedTypes = ::testing::Types<float, int32_t, uint16_t>;
TYPED_TEST_SUITE(StagedMoved, MovedTypes);

TYPED_TEST(StagedReducible, AllreduceSum) {
  using T = TypeParam;
  std::span<T> data = this->device.allocate(37, T{});
  for (size_t i = 0; i < data.size(); ++i) data[i] = as<T>((this->me + 1) * int(i + 1));
  WorkHandle work = this->comm->allreduce(data.data(), data.size(), dtype_in_test<T>());
  work->wait();
  work->wait();  // a second wait copies nothing more
  std::vector<T> expected(data.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = as<T>(this->n * (this->n + 1) / 2 * int(i + 1));
  EXPECT_EQ(values(data), expected);
  EXPECT_EQ(this->device.copies(), std::make_pair(1, 1));
}

TYPED_TEST(StagedReducible, AllreduceMax) {
  using T = TypeParam;
  // (rank + i) mod n takes every value 0..n-1 over the ranks, so the maximum is n - 1.
  std::span<T> data = this->device.allocate(29, T{});
  for (size_t i = 0; i < data.size(); ++i) data[i] = as<T>((this->me + int(i)) % this->n * int(i + 1) - 5);
  this->comm->allreduce(data.data(), data.size(), dtype_in_test<T>(), {.op = ReduceOp::kMax})->wait();
  std::vector<T> expected(data.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = as<T>((this->n - 1) * int(i + 1) - 5);
  EXPECT_EQ(values(data), expected);
  EXPECT_EQ(this->device.copies(), std::make_pair(1, 1));
}

TYPED_TEST(StagedReducible, ReduceScatterUnequalCounts) {
  using T = TypeParam;
  std::vector<size_t> counts(static_cast<size_t>(this->n));
  for (int b = 0; b < this->n; ++b) counts[size_t(b)] = size_t(2 * b + 1);
  const std::vector<size_t> offsets = offsets_of(counts);
  const size_t all = offsets.back() + counts.back();
  std::vector<T> expected(counts[size_t(this->me)]);
  for (size_t k = 0; k < expected.size(); ++k)
    expected[k] = as<T>(100 * this->n * (this->n - 1) / 2 + this->n * (this->me * 10 + int(k)));
  for (Where from : kBoth)
    for (Where to : kBoth) {
      SCOPED_TRACE(std::string("send on the ") + name_of(from) + ", recv on the " + name_of(to));
      this->device.reset();
      std::span<T> send = this->buffer(from, all, T{});
      for (int b = 0; b < this->n; ++b)
        for (size_t k = 0; k < counts[size_t(b)]; ++k)
          send[offsets[size_t(b)] + k] = as<T>(this->me * 100 + b * 10 + int(k));
      std::span<T> recv = this->buffer(to, counts[size_t(this->me)], as<T>(-1));
      this->comm->reduce_scatter(send.data(), recv.data(), counts, dtype_in_test<T>())->wait();
      EXPECT_EQ(values(recv), expected);
      EXPECT_EQ(this->device.copies(), std::make_pair(on_device(from), on_device(to)));
      if (from == Where::kHost && to == Where::kHost) {
        EXPECT_EQ(this->mpi->last_buffers(), (std::vector<const void*>{send.data(), recv.data()}));
      }
    }
}

TEST_F(Staged, Bfloat16AllreduceOfDeviceMemoryTravelsAsBfloat16) {
  // Tensor parallelism in bf16: the staged copy is reduced as bf16 by MPI itself (each rank
  // adds 1 + (rank + 1)/4, so every partial sum is exact), one copy each way.
  std::span<uint16_t> data = device.allocate(5, float_to_bf16(1.0f + float(me + 1) / 4.0f));
  comm->allreduce(data.data(), data.size(), DType::kBFloat16)->wait();
  const float want = float(n) + float(n * (n + 1) / 2) / 4.0f;
  for (uint16_t v : data) EXPECT_EQ(bf16_to_float(v), want);
  EXPECT_EQ(device.copies(), std::make_pair(1, 1));
}

TEST_F(Staged, RefusalOfTheInnerCommunicatorReachesTheCaller) {
  // MPI has no bitwise reduction of floats: the call passes through and throws as the plain one does.
  std::vector<float> data(4, 1.0f);
  EXPECT_THROW(comm->allreduce(data.data(), data.size(), DType::kFloat32, {.op = ReduceOp::kBitXor}), Error);
}

TEST_F(Staged, ReduceScatterInPlaceOfDeviceMemory) {
  // ZeRO 1 reduces each bucket into this rank's block of the same device buffer.
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) counts[size_t(b)] = size_t(b + 2);
  size_t mine = 0, total = 0;
  for (int b = 0; b < n; ++b) (b < me ? mine : total) += counts[size_t(b)];
  total += mine;
  std::span<float> data = device.allocate(total, float(me + 1));
  comm->reduce_scatter(data.data(), data.data() + mine, counts, DType::kFloat32)->wait();
  for (size_t k = 0; k < counts[size_t(me)]; ++k) EXPECT_EQ(data[mine + k], float(n * (n + 1) / 2)) << k;
}

TEST_F(Staged, TestSaysWhenTheHostOperationIsDoneAndWaitCopiesBack) {
  std::span<float> data = device.allocate(5, float(me + 1));
  WorkHandle h = comm->allreduce(data.data(), data.size(), DType::kFloat32);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) done = h->test();
  ASSERT_TRUE(done);
  EXPECT_EQ(data[0], float(me + 1));  // the copy back to the device is the wait's
  h->wait();
  for (float v : data) EXPECT_EQ(v, float(n * (n + 1) / 2));
}

// A one-rank group whose all-reduce never finishes by itself: its handle counts the waits.
class NeverDoneCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  WorkHandle allreduce(void*, size_t, DType, const CollectiveOptions&) override {
    return std::make_unique<CountedWork>(waits);
  }
  WorkHandle reduce_scatter(const void*, void*, std::span<const size_t>, DType, const CollectiveOptions&) override {
    throw Error("not used");
  }
  WorkHandle allgather(const void*, void*, std::span<const size_t>, DType, const CollectiveOptions&) override {
    throw Error("not used");
  }
  WorkHandle broadcast(void*, size_t, DType, int, const CollectiveOptions&) override { throw Error("not used"); }
  WorkHandle send(const void*, size_t, DType, int, int) override { throw Error("not used"); }
  WorkHandle recv(void*, size_t, DType, int, int) override { throw Error("not used"); }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int, const std::string&) override { return nullptr; }
  std::shared_ptr<int> waits = std::make_shared<int>(0);

 private:
  class CountedWork final : public Work {
   public:
    explicit CountedWork(std::shared_ptr<int> waits) : waits_(std::move(waits)) {}
    void wait() override { ++*waits_; }
    bool test() override { return false; }

   private:
    std::shared_ptr<int> waits_;
  };
  std::string name_ = "never-done";
};

TEST(StagedWork, AHandleDroppedWhileAnErrorUnwindsDoesNotWaitForItsOperation) {
  // Waiting there would hold the job's end for up to parallel.timeout_s per handle in flight.
  FakeDevice device;
  auto inner = std::make_unique<NeverDoneCommunicator>();
  const std::shared_ptr<int> waits = inner->waits;
  StagedCommunicator comm(std::move(inner), device.ops());
  std::span<float> data = device.allocate(3, 1.0f);
  try {
    WorkHandle h = comm.allreduce(data.data(), data.size(), DType::kFloat32);
    throw std::runtime_error("a failure elsewhere in the step");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(*waits, 0);
  EXPECT_EQ(device.copies(), std::make_pair(1, 0));  // staged out, never copied back
  // Dropped in the normal course, a handle still finishes its operation and copies back.
  comm.allreduce(data.data(), data.size(), DType::kFloat32);
  EXPECT_EQ(*waits, 1);
  EXPECT_EQ(device.copies(), std::make_pair(2, 1));
}

// Rank r contributes counts[r] = r + 2 elements, block b element k being b * 16 + k + 1.
std::vector<size_t> gather_counts(int n) {
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) counts[size_t(b)] = size_t(b + 2);
  return counts;
}

template <typename T> std::vector<T> gathered(const std::vector<size_t>& counts) {
  std::vector<T> all;
  for (size_t b = 0; b < counts.size(); ++b)
    for (size_t k = 0; k < counts[b]; ++k) all.push_back(as<T>(int(b) * 16 + int(k) + 1));
  return all;
}

TYPED_TEST(StagedMoved, AllgatherOutOfPlace) {
  using T = TypeParam;
  const std::vector<size_t> counts = gather_counts(this->n);
  const std::vector<T> expected = gathered<T>(counts);
  for (Where from : kBoth)
    for (Where to : kBoth) {
      SCOPED_TRACE(std::string("send on the ") + name_of(from) + ", recv on the " + name_of(to));
      this->device.reset();
      std::span<T> send = this->buffer(from, counts[size_t(this->me)], T{});
      for (size_t k = 0; k < send.size(); ++k) send[k] = as<T>(this->me * 16 + int(k) + 1);
      std::span<T> recv = this->buffer(to, expected.size(), as<T>(-1));
      this->comm->allgather(send.data(), recv.data(), counts, dtype_in_test<T>())->wait();
      EXPECT_EQ(values(recv), expected);
      EXPECT_EQ(this->device.copies(), std::make_pair(on_device(from), on_device(to)));
      if (from == Where::kHost && to == Where::kHost) {
        EXPECT_EQ(this->mpi->last_buffers(), (std::vector<const void*>{send.data(), recv.data()}));
      }
    }
}

TYPED_TEST(StagedMoved, AllgatherInPlace) {
  using T = TypeParam;
  const std::vector<size_t> counts = gather_counts(this->n);
  const size_t mine = offsets_of(counts)[size_t(this->me)];
  const std::vector<T> expected = gathered<T>(counts);
  for (Where w : kBoth) {
    SCOPED_TRACE(std::string("on the ") + name_of(w));
    this->device.reset();
    std::span<T> recv = this->buffer(w, expected.size(), as<T>(-1));
    for (size_t k = 0; k < counts[size_t(this->me)]; ++k) recv[mine + k] = as<T>(this->me * 16 + int(k) + 1);
    this->comm->allgather(recv.data() + mine, recv.data(), counts, dtype_in_test<T>())->wait();
    EXPECT_EQ(values(recv), expected);
    // The whole buffer goes up (this rank's block is in it) and comes back.
    EXPECT_EQ(this->device.copies(), std::make_pair(on_device(w), on_device(w)));
    // MPI still sees an in-place call: send at this rank's block of recv.
    const std::vector<const void*>& given = this->mpi->last_buffers();
    ASSERT_EQ(given.size(), 2u);
    EXPECT_EQ(given[0], static_cast<const void*>(static_cast<const char*>(given[1]) + mine * sizeof(T)));
  }
}

TYPED_TEST(StagedMoved, BroadcastFromTheLastRank) {
  using T = TypeParam;
  const int root = this->n - 1;
  std::vector<T> expected(21);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = as<T>(3 * int(i) + 1);
  for (Where w : kBoth) {
    SCOPED_TRACE(std::string("on the ") + name_of(w));
    this->device.reset();
    std::span<T> data = this->buffer(w, expected.size(), as<T>(-1));
    if (this->me == root) std::copy(expected.begin(), expected.end(), data.begin());
    this->comm->broadcast(data.data(), data.size(), dtype_in_test<T>(), root)->wait();
    EXPECT_EQ(values(data), expected);
    // Only the root's data goes up; every rank's comes back.
    EXPECT_EQ(this->device.copies(), std::make_pair(this->me == root ? on_device(w) : 0, on_device(w)));
    if (w == Where::kHost) {
      EXPECT_EQ(this->mpi->last_buffers(), (std::vector<const void*>{data.data()}));
    }
  }
}

TYPED_TEST(StagedMoved, Alltoall) {
  using T = TypeParam;
  constexpr size_t kPerRank = 3;
  // Element k of the block rank s sends to rank d is s * 16 + d * 4 + k + 1.
  std::vector<T> expected(kPerRank * size_t(this->n));
  for (int q = 0; q < this->n; ++q)
    for (size_t k = 0; k < kPerRank; ++k)
      expected[size_t(q) * kPerRank + k] = as<T>(q * 16 + this->me * 4 + int(k) + 1);
  for (Where from : kBoth)
    for (Where to : kBoth) {
      SCOPED_TRACE(std::string("send on the ") + name_of(from) + ", recv on the " + name_of(to));
      this->device.reset();
      std::span<T> send = this->buffer(from, expected.size(), T{});
      for (int q = 0; q < this->n; ++q)
        for (size_t k = 0; k < kPerRank; ++k)
          send[size_t(q) * kPerRank + k] = as<T>(this->me * 16 + q * 4 + int(k) + 1);
      std::span<T> recv = this->buffer(to, expected.size(), as<T>(-1));
      this->comm->alltoall(send.data(), recv.data(), kPerRank, dtype_in_test<T>())->wait();
      EXPECT_EQ(values(recv), expected);
      EXPECT_EQ(this->device.copies(), std::make_pair(on_device(from), on_device(to)));
      if (from == Where::kHost && to == Where::kHost) {
        EXPECT_EQ(this->mpi->last_buffers(), (std::vector<const void*>{send.data(), recv.data()}));
      }
    }
}

// Blocks of any size: rank s sends s + d + 1 elements to rank d, element k being
// s * 16 + d * 4 + k + 1, from and to each kind of memory.
TYPED_TEST(StagedMoved, Alltoallv) {
  using T = TypeParam;
  const int ranks = this->n, rank = this->me;
  std::vector<size_t> send_counts(static_cast<size_t>(ranks)), recv_counts(static_cast<size_t>(ranks));
  std::vector<T> expected;
  size_t out = 0;
  for (int q = 0; q < ranks; ++q) {
    send_counts[size_t(q)] = size_t(rank + q + 1);
    recv_counts[size_t(q)] = size_t(q + rank + 1);
    out += send_counts[size_t(q)];
    for (size_t k = 0; k < recv_counts[size_t(q)]; ++k) expected.push_back(as<T>(q * 16 + rank * 4 + int(k) + 1));
  }
  for (Where from : kBoth)
    for (Where to : kBoth) {
      SCOPED_TRACE(std::string("send on the ") + name_of(from) + ", recv on the " + name_of(to));
      this->device.reset();
      std::span<T> send = this->buffer(from, out, T{});
      size_t at = 0;
      for (int q = 0; q < ranks; ++q)
        for (size_t k = 0; k < send_counts[size_t(q)]; ++k) send[at++] = as<T>(rank * 16 + q * 4 + int(k) + 1);
      std::span<T> recv = this->buffer(to, expected.size(), as<T>(-1));
      this->comm->alltoallv(send.data(), send_counts, recv.data(), recv_counts, dtype_in_test<T>())->wait();
      EXPECT_EQ(values(recv), expected);
      EXPECT_EQ(this->device.copies(), std::make_pair(on_device(from), on_device(to)));
    }
}

TEST_F(Staged, SendRecvRingKeepsTagsApart) {
  // Each tag pairs a different placement of the two ends: tag 5 device to host, tag 9 host to
  // device, tag 7 device to device.
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::span<int32_t> got5 = host.allocate(2, -1), got9 = device.allocate(3, -1), got7 = device.allocate(4, -1);
  std::span<int32_t> out5 = device.allocate(2, 0), out9 = host.allocate(3, 0), out7 = device.allocate(4, 0);
  for (size_t i = 0; i < out5.size(); ++i) out5[i] = me * 10 + 5 + int(i);
  for (size_t i = 0; i < out9.size(); ++i) out9[i] = me * 10 + 9 + int(i);
  for (size_t i = 0; i < out7.size(); ++i) out7[i] = me * 10 + 7 + int(i);
  WorkHandle r9 = comm->recv(got9.data(), got9.size(), DType::kInt32, prev, 9);
  WorkHandle r5 = comm->recv(got5.data(), got5.size(), DType::kInt32, prev, 5);
  WorkHandle r7 = comm->recv(got7.data(), got7.size(), DType::kInt32, prev, 7);
  WorkHandle s7 = comm->send(out7.data(), out7.size(), DType::kInt32, next, 7);
  WorkHandle s5 = comm->send(out5.data(), out5.size(), DType::kInt32, next, 5);
  WorkHandle s9 = comm->send(out9.data(), out9.size(), DType::kInt32, next, 9);
  for (WorkHandle* w : {&r5, &r9, &r7, &s5, &s9, &s7}) (*w)->wait();
  EXPECT_EQ(values(got5), (std::vector<int32_t>{prev * 10 + 5, prev * 10 + 6}));
  EXPECT_EQ(values(got9), (std::vector<int32_t>{prev * 10 + 9, prev * 10 + 10, prev * 10 + 11}));
  EXPECT_EQ(values(got7), (std::vector<int32_t>{prev * 10 + 7, prev * 10 + 8, prev * 10 + 9, prev * 10 + 10}));
  // Up: out5 and out7; down: got9 and got7.
  EXPECT_EQ(device.copies(), std::make_pair(2, 2));
}

TEST_F(Staged, HostBuffersPassStraightThrough) {
  std::span<float> sum = host.allocate(5, float(me + 1));
  comm->allreduce(sum.data(), sum.size(), DType::kFloat32)->wait();
  EXPECT_EQ(mpi->last_buffers(), (std::vector<const void*>{sum.data()}));
  EXPECT_EQ(values(sum), std::vector<float>(5, float(n * (n + 1) / 2)));

  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::span<int32_t> got = host.allocate(3, -1), out = host.allocate(3, me);
  WorkHandle r = comm->recv(got.data(), got.size(), DType::kInt32, prev, 3);
  EXPECT_EQ(mpi->last_buffers(), (std::vector<const void*>{got.data()}));
  WorkHandle s = comm->send(out.data(), out.size(), DType::kInt32, next, 3);
  EXPECT_EQ(mpi->last_buffers(), (std::vector<const void*>{out.data()}));
  r->wait();
  s->wait();
  EXPECT_EQ(values(got), std::vector<int32_t>(3, prev));
  EXPECT_EQ(device.copies(), std::make_pair(0, 0));
}

TEST_F(Staged, UnwaitedHandlesCopyBackWhenDestroyed) {
  std::span<int32_t> data = device.allocate(64, me);
  { WorkHandle work = comm->allreduce(data.data(), data.size(), DType::kInt32); }
  EXPECT_EQ(values(data), std::vector<int32_t>(64, n * (n - 1) / 2));
  EXPECT_EQ(device.copies(), std::make_pair(1, 1));

  device.reset();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::span<int32_t> got = device.allocate(6, -1), out = device.allocate(6, me + 100);
  {
    WorkHandle r = comm->recv(got.data(), got.size(), DType::kInt32, prev, 1);
    WorkHandle s = comm->send(out.data(), out.size(), DType::kInt32, next, 1);
  }  // s goes first, then r, which must still bring its message down
  EXPECT_EQ(values(got), std::vector<int32_t>(6, prev + 100));
  EXPECT_EQ(device.copies(), std::make_pair(1, 1));
}

TEST_F(Staged, SplitStagesToo) {
  // Two groups by parity, each ordered by descending world rank.
  int members = 0, above = 0, ranks_sum = 0;
  for (int r = me % 2; r < n; r += 2) {
    ++members;
    above += r > me ? 1 : 0;
    ranks_sum += r;
  }
  std::unique_ptr<Communicator> part = comm->split(me % 2, n - me, "parity");
  ASSERT_NE(part.get(), nullptr);
  auto* staged = dynamic_cast<StagedCommunicator*>(part.get());
  ASSERT_NE(staged, nullptr);
  auto* checked = dynamic_cast<HostOnlyCommunicator*>(&staged->inner());
  ASSERT_NE(checked, nullptr);
  EXPECT_EQ(part->size(), members);
  EXPECT_EQ(part->rank(), above);

  std::span<float> data = device.allocate(7, float(me));
  part->allreduce(data.data(), data.size(), DType::kFloat32)->wait();
  EXPECT_EQ(values(data), std::vector<float>(7, float(ranks_sum)));
  EXPECT_EQ(device.copies(), std::make_pair(1, 1));

  // Each member contributes its world rank twice, in group order (descending world rank).
  device.reset();
  const std::vector<size_t> counts(size_t(members), 2);
  std::span<int32_t> mine = device.allocate(2, me), all = device.allocate(2 * size_t(members), -1);
  part->allgather(mine.data(), all.data(), counts, DType::kInt32)->wait();
  std::vector<int32_t> expected;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == me % 2) expected.insert(expected.end(), {r, r});
  EXPECT_EQ(values(all), expected);
  EXPECT_EQ(device.copies(), std::make_pair(1, 1));
  EXPECT_EQ(checked->last_buffers().size(), 2u);  // the call went through the checking layer

  EXPECT_EQ(comm->split(-1, me, "none").get(), nullptr);
}

}  // namespace
}  // namespace feast
