// GradientSync on its own, driven as a stage's backward drives it, over the real MPI world as the
// data-parallel group with a counting wrapper: how many reductions each bucket costs, and the
// shard's sums. The equivalence grid checks the losses; this checks the traffic.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/data_parallel/grad_sync.h"
#include "comm/mpi_world.h"

namespace feast {
namespace {

// Passes every call to another communicator; the tests below override the reductions.
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  WorkHandle allreduce(void* d, size_t n, DType t, const CollectiveOptions& o = {}) override {
    return inner_.allreduce(d, n, t, o);
  }
  WorkHandle reduce_scatter(const void* s, void* r, std::span<const size_t> c, DType t,
                            const CollectiveOptions& o = {}) override {
    return inner_.reduce_scatter(s, r, c, t, o);
  }
  WorkHandle allgather(const void* s, void* r, std::span<const size_t> c, DType t,
                       const CollectiveOptions& o = {}) override {
    return inner_.allgather(s, r, c, t, o);
  }
  WorkHandle broadcast(void* d, size_t n, DType t, int root, const CollectiveOptions& o = {}) override {
    return inner_.broadcast(d, n, t, root, o);
  }
  WorkHandle send(const void* d, size_t n, DType t, int peer, int tag) override { return inner_.send(d, n, t, peer, tag); }
  WorkHandle recv(void* d, size_t n, DType t, int peer, int tag) override { return inner_.recv(d, n, t, peer, tag); }
  void barrier() override { inner_.barrier(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& n) override {
    return inner_.split(color, key, n);
  }

 protected:
  Communicator& inner_;
};

// Counts the reductions and the bytes they send, by dtype.
class CountingCommunicator final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  WorkHandle allreduce(void* d, size_t n, DType t, const CollectiveOptions& o = {}) override {
    ++allreduces;
    count(n, t);
    return inner_.allreduce(d, n, t, o);
  }
  WorkHandle reduce_scatter(const void* s, void* r, std::span<const size_t> c, DType t,
                            const CollectiveOptions& o = {}) override {
    ++reduce_scatters;
    size_t n = 0;
    for (size_t k : c) n += k;
    count(n, t);
    return inner_.reduce_scatter(s, r, c, t, o);
  }
  int allreduces = 0, reduce_scatters = 0;
  size_t bytes = 0;           // the reductions' inputs, in their dtypes
  bool only_bf16 = true;      // every reduction carried bfloat16

 private:
  void count(size_t n, DType t) {
    bytes += n * dtype_size(t);
    only_bf16 = only_bf16 && t == DType::kBFloat16;
  }
};

// A stage's backward as GradientSync sees it: a token embedding in two chunks that a tied head
// writes first and the embedding last (uses 2, standalone), and two blocks' ranges between.
// Each write adds value(rank, micro-batch, element) so the reduced sums are known.
struct Layout {
  static constexpr size_t kChunk = 6, kBlock = 5;
  std::vector<GradRange> ranges() const {
    return {{0, kChunk, 2, true, false}, {kChunk, 2 * kChunk, 2, true, false},
            {2 * kChunk, 2 * kChunk + kBlock, 1, false, false}, {2 * kChunk + kBlock, total(), 1, false, false}};
  }
  static size_t total() { return 2 * kChunk + 2 * kBlock; }
};

float value(int rank, int micro_batch, size_t element, int use) {
  return float(rank + 1) * 0.5f + float(micro_batch) + 0.01f * float(element) + 100.0f * float(use);
}

void write(GradientSync& sync, const GradRange& r, int rank, int micro_batch, int use) {
  const TensorView g = sync.acquire(r.begin, r.end);
  float* p = g.as<float>();
  for (size_t e = r.begin; e < r.end; ++e) p[e - r.begin] += value(rank, micro_batch, e, use);
  sync.release(r.begin, r.end);
}

// The sums every reduced element should hold: over ranks, micro-batches and uses.
double want_sum(size_t e, int dp, int micro_batches) {
  const bool chunk = e < 2 * Layout::kChunk;
  double want = 0;
  for (int r = 0; r < dp; ++r)
    for (int mb = 0; mb < micro_batches; ++mb)
      for (int use = 0; use < (chunk ? 2 : 1); ++use) want += value(r, mb, e, use);
  return want;
}

// Gradients travelling as float32 or bfloat16 (parallel.grad_reduce_dtype).
class GradientSyncWire : public ::testing::TestWithParam<DType> {};

TEST_P(GradientSyncWire, TiedEmbeddingOnOneStageIsReducedOncePerMicroBatch) {
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  const int dp = world->size(), rank = world->rank();
  if (dp < 2) GTEST_SKIP() << "needs a data-parallel group";
  const DType wire = GetParam();
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  const Layout layout;
  const std::vector<GradRange> ranges = layout.ranges();
  constexpr int kMicroBatches = 3;
  size_t zero0_gradient_bytes = 0;
  for (int zero = 0; zero <= 2; ++zero) {
    CountingCommunicator counting(*world);
    GradientSync sync(*backend, Layout::total(), ranges, zero, /*bucket_elems=*/64, &counting, nullptr, wire);
    sync.begin_step();
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      sync.set_last_micro_batch(mb == kMicroBatches - 1);
      // Backward order: the head (embedding chunks, use 0), the blocks (descending), the embedding (use 1).
      for (int c = 1; c >= 0; --c) write(sync, ranges[size_t(c)], rank, mb, 0);
      for (int b = 3; b >= 2; --b) write(sync, ranges[size_t(b)], rank, mb, 0);
      for (int c = 1; c >= 0; --c) write(sync, ranges[size_t(c)], rank, mb, 1);
    }
    sync.finish_step();
    // ZeRO 0 all-reduces each bucket once in the last micro-batch; ZeRO 1 reduce-scatters each
    // once; ZeRO 2 every micro-batch, and the shared chunks once per micro-batch, not twice.
    // Buckets: the two chunks stand alone; the two block ranges merge into one.
    const int buckets = 3;
    const int expected_allreduces = zero == 0 ? buckets : 0;
    const int expected_reduce_scatters = zero == 0 ? 0 : zero == 1 ? buckets : buckets * kMicroBatches;
    EXPECT_EQ(counting.allreduces, expected_allreduces) << "ZeRO " << zero;
    EXPECT_EQ(counting.reduce_scatters, expected_reduce_scatters) << "ZeRO " << zero;
    // Every reduction carries the whole of its bucket, in the wire dtype: bf16 halves the bytes.
    const size_t per_pass = Layout::total() * dtype_size(wire);
    EXPECT_EQ(counting.bytes, (zero == 2 ? kMicroBatches : 1) * per_pass) << "ZeRO " << zero;
    EXPECT_EQ(counting.only_bf16, wire == DType::kBFloat16) << "ZeRO " << zero;
    // ZeRO 1 reduces in place into its shard's part of the full buffer: no more gradient memory
    // than ZeRO 0.
    if (zero == 0) zero0_gradient_bytes = sync.gradient_bytes();
    if (zero == 1) {
      EXPECT_EQ(sync.gradient_bytes(), zero0_gradient_bytes);
    }

    // The reduced gradient of every element this rank owns. bf16 traffic rounds each bucket and
    // every partial sum to 8 significant bits.
    const double tolerance = wire == DType::kBFloat16 ? 2e-2 : 1e-3;
    const ShardRange mine = sync.shard();
    const TensorView got = sync.shard_grads();
    for (size_t e = mine.begin; e < mine.end; ++e) {
      const double want = want_sum(e, dp, kMicroBatches);
      EXPECT_NEAR(got.as<float>()[e - mine.begin], want, tolerance * want) << "ZeRO " << zero << " element " << e;
    }
  }
}

// Expert parallelism at ep 2: ranks 2i and 2i + 1 form an ep group, and the ranks of one parity
// hold the same experts. A dense range's gradient is summed over every rank, all-reduced whole
// (the ep ranks of a group share one shard); an expert range's over the ranks of its parity
// only, reduce-scattered over them under ZeRO 1 and 2; and the shards are cut over those ranks.
TEST_P(GradientSyncWire, ExpertGradientsAreSummedOverTheRanksHoldingThemOnly) {
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  const int dp = world->size(), rank = world->rank();
  if (dp < 4 || dp % 2 != 0) GTEST_SKIP() << "needs ep 2 over at least 4 data-parallel ranks";
  const DType wire = GetParam();
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  const std::unique_ptr<Communicator> holders = world->split(rank % 2, rank / 2, "ep-dp");
  constexpr size_t kTotal = 16;
  const std::vector<GradRange> ranges = {{0, 5}, {5, 12, 1, false, false, 0, true}, {12, kTotal}};
  constexpr int kMicroBatches = 3;
  for (int zero = 0; zero <= 2; ++zero) {
    CountingCommunicator dense(*world), experts(*holders);
    GradientSync sync(*backend, kTotal, ranges, zero, /*bucket_elems=*/64, &dense, nullptr, wire, &experts);
    sync.begin_step();
    for (int mb = 0; mb < kMicroBatches; ++mb) {
      sync.set_last_micro_batch(mb == kMicroBatches - 1);
      for (size_t r = ranges.size(); r-- > 0;) write(sync, ranges[r], rank, mb, 0);
    }
    sync.finish_step();
    // Three buckets (the expert range between two dense ones is never merged with them), each
    // reduced once, or under ZeRO 2 once per micro-batch, on its own group.
    const int passes = zero == 2 ? kMicroBatches : 1;
    EXPECT_EQ(dense.allreduces, 2 * passes) << "ZeRO " << zero;
    EXPECT_EQ(dense.reduce_scatters, 0) << "ZeRO " << zero;
    EXPECT_EQ(experts.allreduces, zero == 0 ? 1 : 0) << "ZeRO " << zero;
    EXPECT_EQ(experts.reduce_scatters, zero == 0 ? 0 : passes) << "ZeRO " << zero;
    const ShardRange mine = sync.shard();
    const ShardRange want_shard = shard_range(kTotal, dp / 2, rank / 2);
    EXPECT_EQ(mine.begin, want_shard.begin);
    EXPECT_EQ(mine.end, want_shard.end);
    const double tolerance = wire == DType::kBFloat16 ? 2e-2 : 1e-4;
    const TensorView got = sync.shard_grads();
    for (size_t e = mine.begin; e < mine.end; ++e) {
      const bool expert = e >= 5 && e < 12;
      double want = 0;
      for (int r = 0; r < dp; ++r)
        if (!expert || r % 2 == rank % 2)
          for (int mb = 0; mb < kMicroBatches; ++mb) want += value(r, mb, e, 0);
      EXPECT_NEAR(got.as<float>()[e - mine.begin], want, tolerance * want) << "ZeRO " << zero << " element " << e;
    }
  }
}

TEST(GradientSync, Zero2WithBf16TrafficStillAccumulatesInFloat32) {
  // Every write adds 1 (exact in bf16, as is every sum of a micro-batch over the ranks). After
  // 600 micro-batches an element holds dp x 600 x uses, far past where bf16 can count in ones
  // (256): a shard that passed through bf16 on each micro-batch would stop growing.
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  const int dp = world->size();
  if (dp < 2) GTEST_SKIP() << "needs a data-parallel group";
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  const std::vector<GradRange> ranges = Layout().ranges();
  constexpr int kMicroBatches = 600;
  GradientSync sync(*backend, Layout::total(), ranges, 2, /*bucket_elems=*/64, world.get(), nullptr, DType::kBFloat16);
  sync.begin_step();
  const auto add_one = [&](const GradRange& r) {
    const TensorView g = sync.acquire(r.begin, r.end);
    for (size_t e = 0; e < g.numel; ++e) g.as<float>()[e] += 1.0f;
    sync.release(r.begin, r.end);
  };
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    sync.set_last_micro_batch(mb == kMicroBatches - 1);
    for (int c = 1; c >= 0; --c) add_one(ranges[size_t(c)]);
    for (int b = 3; b >= 2; --b) add_one(ranges[size_t(b)]);
    for (int c = 1; c >= 0; --c) add_one(ranges[size_t(c)]);
  }
  sync.finish_step();
  const ShardRange mine = sync.shard();
  for (size_t e = mine.begin; e < mine.end; ++e) {
    const float want = float(dp * kMicroBatches * (e < 2 * Layout::kChunk ? 2 : 1));
    EXPECT_EQ(sync.shard_grads().as<float>()[e - mine.begin], want) << "element " << e;
  }
}

// Contiguous ranges merge into buckets up to the size limit, but never across model chunks
// (interleaved 1F1B), whose backwards run at different times: a bucket spanning two would be
// counted complete after the wrong backward.
TEST(GradientSync, BucketsNeverSpanTwoModelChunks) {
  // Ranges [0,10) [10,20) of chunk 0 and [20,30) [30,40) of chunk 1, in flat order.
  std::vector<GradRange> ranges;
  for (size_t i = 0; i < 4; ++i) ranges.push_back({10 * i, 10 * i + 10, 1, false, false, int(i / 2)});
  const std::vector<GradBucket> merged = gradient_buckets(ranges, 1000);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].begin, 20u);  // backward order: descending offsets
  EXPECT_EQ(merged[0].end, 40u);
  EXPECT_EQ(merged[0].chunk, 1);
  EXPECT_EQ(merged[0].ranges, 2);
  EXPECT_EQ(merged[1].begin, 0u);
  EXPECT_EQ(merged[1].end, 20u);
  EXPECT_EQ(merged[1].chunk, 0);
  // One chunk: all four in one bucket.
  for (GradRange& r : ranges) r.chunk = 0;
  ASSERT_EQ(gradient_buckets(ranges, 1000).size(), 1u);
}

TEST(GradientSync, CoveredSecondsIsTheLengthOfTheUnionOfSpans) {
  EXPECT_DOUBLE_EQ(covered_seconds({}), 0.0);
  EXPECT_DOUBLE_EQ(covered_seconds({{1.0, 3.0}}), 2.0);
  EXPECT_DOUBLE_EQ(covered_seconds({{5.0, 6.0}, {0.0, 2.0}, {1.0, 3.0}}), 4.0);  // overlap, a gap, unsorted
  EXPECT_DOUBLE_EQ(covered_seconds({{0.0, 10.0}, {2.0, 3.0}, {4.0, 12.0}}), 12.0);  // nested, then past the end
}

// Passes reductions through, wrapping each handle so the test controls what test() says and
// what the library claims to have measured, and counts the tests.
class ScriptedCommunicator final : public ForwardingCommunicator {
 public:
  enum class Finish { kWhenTested, kOnlyByWait };
  ScriptedCommunicator(Communicator& inner, Finish finish, double device_seconds = -1)
      : ForwardingCommunicator(inner), finish_(finish), device_seconds_(device_seconds) {}
  WorkHandle allreduce(void* d, size_t n, DType t, const CollectiveOptions& o = {}) override {
    return wrap(inner_.allreduce(d, n, t, o));
  }
  WorkHandle reduce_scatter(const void* s, void* r, std::span<const size_t> c, DType t,
                            const CollectiveOptions& o = {}) override {
    return wrap(inner_.reduce_scatter(s, r, c, t, o));
  }
  std::vector<int> tests;  // per reduction, in launch order: how often it was tested

 private:
  class ScriptedWork final : public Work {
   public:
    ScriptedWork(WorkHandle inner, ScriptedCommunicator& owner, size_t index)
        : inner_(std::move(inner)), owner_(owner), index_(index) {}
    void wait() override { inner_->wait(); }
    bool test() override {
      ++owner_.tests[index_];
      if (owner_.finish_ == Finish::kOnlyByWait) return false;
      inner_->wait();  // every rank's first test comes from the same point of the same backward
      return true;
    }
    double device_seconds() const override { return owner_.device_seconds_; }

   private:
    WorkHandle inner_;
    ScriptedCommunicator& owner_;
    size_t index_;
  };
  WorkHandle wrap(WorkHandle w) {
    tests.push_back(0);
    return std::make_unique<ScriptedWork>(std::move(w), *this, tests.size() - 1);
  }
  Finish finish_;
  double device_seconds_;
};

// One step of the tied-embedding layout's backward (one micro-batch), every range its own bucket.
ReductionTimes one_step(GradientSync& sync, int rank) {
  const std::vector<GradRange> ranges = Layout().ranges();
  sync.begin_step();
  sync.set_last_micro_batch(true);
  for (int c = 1; c >= 0; --c) write(sync, ranges[size_t(c)], rank, 0, 0);
  for (int b = 3; b >= 2; --b) write(sync, ranges[size_t(b)], rank, 0, 0);
  for (int c = 1; c >= 0; --c) write(sync, ranges[size_t(c)], rank, 0, 1);
  sync.finish_step();
  return sync.reduction_times();
}

TEST(GradientSync, ReductionsInFlightAreTestedAsTheBackwardGoesOnAndTimed) {
  // MPI advances a non-blocking collective only inside MPI calls: GradientSync tests what is in
  // flight whenever the backward hands over gradients, and times the reductions by it.
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  const int dp = world->size(), rank = world->rank();
  if (dp < 2) GTEST_SKIP() << "needs a data-parallel group";
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  const std::vector<GradRange> ranges = Layout().ranges();
  for (int zero = 0; zero <= 2; ++zero) {
    // Left to the wait: every reduction is exposed, and the waits lie inside the spans.
    {
      ScriptedCommunicator comm(*world, ScriptedCommunicator::Finish::kOnlyByWait);
      GradientSync sync(*backend, Layout::total(), ranges, zero, /*bucket_elems=*/5, &comm, nullptr);
      const ReductionTimes t = one_step(sync, rank);
      // Launched in order: the second block, the first, then the embedding chunks. The first
      // was tested when the next range was handed over, and at every release after.
      ASSERT_EQ(comm.tests.size(), 4u) << "ZeRO " << zero;
      EXPECT_GE(comm.tests[0], 3) << "ZeRO " << zero;
      EXPECT_GT(t.exposed, 0.0) << "ZeRO " << zero;
      EXPECT_LE(t.exposed, t.in_flight) << "ZeRO " << zero;
    }
    // Seen finished by a test before anything waits: in flight, but nothing exposed.
    {
      ScriptedCommunicator comm(*world, ScriptedCommunicator::Finish::kWhenTested);
      GradientSync sync(*backend, Layout::total(), ranges, zero, /*bucket_elems=*/5, &comm, nullptr);
      const ReductionTimes t = one_step(sync, rank);
      for (size_t k = 0; k < comm.tests.size(); ++k) EXPECT_EQ(comm.tests[k], 1) << "ZeRO " << zero << " reduction " << k;
      EXPECT_GT(t.in_flight, 0.0) << "ZeRO " << zero;
      EXPECT_EQ(t.exposed, 0.0) << "ZeRO " << zero;
    }
    // A library that times its own operations (NCCL's events): their sum is the time in flight.
    {
      ScriptedCommunicator comm(*world, ScriptedCommunicator::Finish::kOnlyByWait, 0.25);
      GradientSync sync(*backend, Layout::total(), ranges, zero, /*bucket_elems=*/5, &comm, nullptr);
      const ReductionTimes t = one_step(sync, rank);
      EXPECT_DOUBLE_EQ(t.in_flight, 0.25 * double(comm.tests.size())) << "ZeRO " << zero;
      // The next step starts from nothing.
      sync.begin_step();
      EXPECT_EQ(sync.reduction_times().in_flight, 0.0);
      EXPECT_EQ(sync.reduction_times().exposed, 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Wire, GradientSyncWire, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace feast
