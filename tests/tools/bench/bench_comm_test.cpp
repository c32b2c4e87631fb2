// `trainer bench comm` under mpirun (1, 2 and 3 ranks): its checker against wrong buffers, the
// whole bench through a communicator that corrupts one element of one call's result (every rank
// must stop, naming the operation, the size and the rank), a clean run's JSON, and the
// alpha-beta fit and formulas on numbers worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "comm/mpi_world.h"
#include "tools/bench/bench_comm.h"

namespace feast {
namespace {

using namespace std::chrono_literals;

// What every rank's result of `op` must be, computed in one process from every rank's input:
// the checker and the filler agree with the operations' definitions, not only with each other.
std::vector<float> simulate(CommOp op, size_t elements, int rank, int n) {
  const size_t block = elements / size_t(n);
  auto input_of = [&](int r) {
    std::vector<float> in(op == CommOp::kAllgather ? block : elements);
    fill_comm_input(op, in, elements, r, n);
    return in;
  };
  std::vector<float> out;
  switch (op) {
    case CommOp::kAllreduce:
    case CommOp::kReduceScatter: {
      std::vector<double> sum(elements, 0.0);
      for (int r = 0; r < n; ++r) {
        const std::vector<float> in = input_of(r);
        for (size_t i = 0; i < elements; ++i) sum[i] += in[i];
      }
      const size_t from = op == CommOp::kAllreduce ? 0 : size_t(rank) * block;
      const size_t count = op == CommOp::kAllreduce ? elements : block;
      for (size_t i = 0; i < count; ++i) out.push_back(float(sum[from + i]));
      break;
    }
    case CommOp::kAllgather:
      for (int r = 0; r < n; ++r) {
        const std::vector<float> in = input_of(r);
        out.insert(out.end(), in.begin(), in.end());
      }
      break;
    case CommOp::kBroadcast: out = input_of(0); break;
    case CommOp::kAlltoall:
      for (int r = 0; r < n; ++r) {
        const std::vector<float> in = input_of(r);
        out.insert(out.end(), in.begin() + long(size_t(rank) * block), in.begin() + long(size_t(rank + 1) * block));
      }
      break;
    case CommOp::kSendRecv: out = input_of((rank + n - 1) % n); break;
  }
  return out;
}

TEST(BenchCommCheck, AcceptsTheRightResultAndCatchesOneWrongElement) {
  for (CommOp op : kCommOps)
    for (int n : {1, 2, 3, 4, 7})
      for (int rank : {0, n - 1}) {
        SCOPED_TRACE(std::string(comm_op_name(op)) + " n " + std::to_string(n) + " rank " + std::to_string(rank));
        const size_t elements = comm_elements(op, 1000, n);
        std::vector<float> result = simulate(op, elements, rank, n);
        EXPECT_EQ(find_wrong_comm_result(op, result, elements, rank, n), std::nullopt);
        result[result.size() / 2] += 1;
        const auto wrong = find_wrong_comm_result(op, result, elements, rank, n);
        ASSERT_TRUE(wrong.has_value());
        EXPECT_NE(wrong->find("1 of " + std::to_string(result.size()) + " elements wrong; element " +
                              std::to_string(result.size() / 2) + " is "),
                  std::string::npos)
            << *wrong;
      }
}

TEST(BenchCommCheck, CatchesBlocksFromTheWrongRankOrPlace) {
  const int n = 4;
  // All-to-all whose blocks arrive in the wrong order, all-gather whose ranks are swapped, a
  // broadcast that did nothing on a non-root rank, send/recv from the wrong neighbour, and a
  // reduce-scatter that kept another rank's block.
  {
    const size_t e = comm_elements(CommOp::kAlltoall, 4096, n), b = e / n;
    std::vector<float> r = simulate(CommOp::kAlltoall, e, 1, n);
    std::rotate(r.begin(), r.begin() + long(b), r.end());
    EXPECT_TRUE(find_wrong_comm_result(CommOp::kAlltoall, r, e, 1, n).has_value());
    // The blocks meant for rank 2, received by rank 1.
    EXPECT_TRUE(find_wrong_comm_result(CommOp::kAlltoall, simulate(CommOp::kAlltoall, e, 2, n), e, 1, n).has_value());
  }
  {
    const size_t e = comm_elements(CommOp::kAllgather, 4096, n), b = e / n;
    std::vector<float> r = simulate(CommOp::kAllgather, e, 0, n);
    std::swap_ranges(r.begin(), r.begin() + long(b), r.begin() + long(b));  // ranks 0 and 1 swapped
    EXPECT_TRUE(find_wrong_comm_result(CommOp::kAllgather, r, e, 0, n).has_value());
  }
  {
    std::vector<float> untouched(1024);
    fill_comm_input(CommOp::kBroadcast, untouched, 1024, 3, n);
    EXPECT_TRUE(find_wrong_comm_result(CommOp::kBroadcast, untouched, 1024, 3, n).has_value());
  }
  EXPECT_TRUE(
      find_wrong_comm_result(CommOp::kSendRecv, simulate(CommOp::kSendRecv, 512, 2, n), 512, 1, n).has_value());
  EXPECT_TRUE(find_wrong_comm_result(CommOp::kReduceScatter, simulate(CommOp::kReduceScatter, 512, 2, n), 512, 1, n)
                  .has_value());
  // A result of the wrong length is wrong too.
  EXPECT_TRUE(find_wrong_comm_result(CommOp::kAllreduce, std::vector<float>(10), 11, 0, n).has_value());
}

TEST(BenchCommFormulas, FitRecoversAlphaAndBetaAndPredictsTheTextbookForms) {
  const double alpha = 5e-6, beta = 1.0 / 2e9;  // 5 us, 2 GB/s
  std::vector<double> bytes, seconds;
  for (double b = 1024; b <= 64.0 * 1024 * 1024; b *= 4) {
    bytes.push_back(b);
    seconds.push_back(alpha + beta * b);
  }
  const AlphaBeta fit = fit_alpha_beta(bytes, seconds);
  EXPECT_NEAR(fit.alpha, alpha, 1e-12);
  EXPECT_NEAR(fit.beta * 1e9, beta * 1e9, 1e-9);
  // With noise of +-10% alternating, alpha is still found from the small messages.
  for (size_t i = 0; i < seconds.size(); ++i) seconds[i] *= i % 2 ? 1.1 : 0.9;
  const AlphaBeta noisy = fit_alpha_beta(bytes, seconds);
  EXPECT_NEAR(noisy.alpha, alpha, 0.25 * alpha);
  EXPECT_NEAR(noisy.beta, beta, 0.1 * beta);
  // Latency invisible below the sizes' resolution: a fit through zero, never a negative alpha.
  const AlphaBeta through_zero = fit_alpha_beta(std::vector<double>{1e6, 2e6}, std::vector<double>{1.0e-3, 2.1e-3});
  EXPECT_EQ(through_zero.alpha, 0.0);
  EXPECT_GT(through_zero.beta, 0.0);
  EXPECT_THROW(fit_alpha_beta(std::vector<double>{1e6}, std::vector<double>{1e-3}), Error);

  // 4 ranks, 1 MB, alpha 5 us, 1 GB/s: ring 6 alpha + 1.5 MB / (1 GB/s); server 6 (alpha + 1 ms).
  const AlphaBeta link{5e-6, 1e-9};
  EXPECT_NEAR(predicted_ring_allreduce(link, 1e6, 4), 6 * 5e-6 + 1.5e-3, 1e-15);
  EXPECT_NEAR(predicted_parameter_server_allreduce(link, 1e6, 4), 6 * (5e-6 + 1e-3), 1e-15);
  EXPECT_EQ(predicted_ring_allreduce(link, 1e6, 1), 0.0);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::kAllreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::kAlltoall, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::kSendRecv, 4), 1.0);
  EXPECT_EQ(comm_elements(CommOp::kReduceScatter, 1000, 3), 249u);  // 250 floats, 83 per rank
  EXPECT_EQ(comm_elements(CommOp::kAllgather, 4, 3), 3u);            // at least one per rank
}

// Forwards every call to `inner`, but on rank `rank` adds 1 to the middle element of the
// output of the first float32 call named `call` ("allreduce", ..., "recv") of `count` output
// elements, once that call completes.
class CorruptingCommunicator final : public Communicator {
 public:
  CorruptingCommunicator(Communicator& inner, std::string call, int rank, size_t count)
      : inner_(inner), call_(std::move(call)), rank_(rank), count_(count) {}
  int corrupted = 0;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  WorkHandle allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts) override {
    return maybe("allreduce", inner_.allreduce(data, count, dtype, opts), data, count, dtype);
  }
  WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                            const CollectiveOptions& opts) override {
    return maybe("reduce_scatter", inner_.reduce_scatter(send, recv, counts, dtype, opts), recv,
                 counts[size_t(rank())], dtype);
  }
  WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                       const CollectiveOptions& opts) override {
    size_t total = 0;
    for (size_t c : counts) total += c;
    return maybe("allgather", inner_.allgather(send, recv, counts, dtype, opts), recv, total, dtype);
  }
  WorkHandle broadcast(void* data, size_t count, DType dtype, int root, const CollectiveOptions& opts) override {
    return maybe("broadcast", inner_.broadcast(data, count, dtype, root, opts), data, count, dtype);
  }
  WorkHandle alltoall(const void* send, void* recv, size_t count, DType dtype, const CollectiveOptions& opts) override {
    return maybe("alltoall", inner_.alltoall(send, recv, count, dtype, opts), recv, count * size_t(size()), dtype);
  }
  WorkHandle send(const void* data, size_t count, DType dtype, int peer, int tag) override {
    return inner_.send(data, count, dtype, peer, tag);
  }
  WorkHandle recv(void* data, size_t count, DType dtype, int peer, int tag) override {
    return maybe("recv", inner_.recv(data, count, dtype, peer, tag), data, count, dtype);
  }
  void barrier() override { inner_.barrier(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return inner_.split(color, key, name);
  }

 private:
  class CorruptAfter final : public Work {
   public:
    CorruptAfter(WorkHandle inner, float* target) : inner_(std::move(inner)), target_(target) {}
    void wait() override {
      if (!inner_) return;
      inner_->wait();
      inner_.reset();
      *target_ += 1;
    }
    bool test() override { return !inner_ || inner_->test(); }

   private:
    WorkHandle inner_;
    float* target_;
  };

  WorkHandle maybe(const char* call, WorkHandle work, void* out, size_t count, DType dtype) {
    if (call_ != call || inner_.rank() != rank_ || dtype != DType::kFloat32 || count != count_) return work;
    ++corrupted;
    return std::make_unique<CorruptAfter>(std::move(work), static_cast<float*>(out) + count / 2);
  }

  Communicator& inner_;
  std::string call_;
  int rank_;
  size_t count_;
};

class BenchComm : public ::testing::Test {
 protected:
  std::unique_ptr<Communicator> world = make_mpi_world(30s);
  const int n = world->size();
  const int me = world->rank();

  // Three sizes, two timed iterations: the bench's checks, not its numbers.
  static CommBenchOptions small(std::vector<CommOp> ops, bool algorithms) {
    CommBenchOptions o;
    o.min_bytes = 1024;
    o.max_bytes = 4096;
    o.iters = 2;
    o.warmup = 1;
    o.ops = std::move(ops);
    o.algorithms = algorithms;
    return o;
  }

  // Runs the bench through `comm` and expects every rank to stop with `expected` in its message.
  void expect_caught(CorruptingCommunicator& comm, const CommBenchOptions& o, const std::string& expected) {
    const log::Quiet quiet;
    try {
      run_comm_bench(o, comm);
      ADD_FAILURE() << "a corrupted result was not caught";
    } catch (const AgreedError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_EQ(e.report(), me == 0);  // rank 0, which prints the table, reports it once
    }
    if (me == n - 1) {
      EXPECT_GT(comm.corrupted, 0);
    }
  }
};

TEST_F(BenchComm, CatchesAWrongResultOfEveryCollectiveOnOneRank) {
  for (CommOp op : kCommOps) {
    SCOPED_TRACE(comm_op_name(op));
    const size_t elements = comm_elements(op, 2048, n);
    const std::string call = op == CommOp::kSendRecv ? "recv" : comm_op_name(op);
    const size_t count = op == CommOp::kReduceScatter ? elements / size_t(n) : elements;
    CorruptingCommunicator comm(*world, call, n - 1, count);
    expect_caught(comm, small({op}, false),
                  std::string(comm_op_name(op)) + " of " + std::to_string(elements * 4) +
                      " bytes gave a wrong result on rank " + std::to_string(n - 1) + ": 1 of ");
  }
}

TEST_F(BenchComm, CatchesAWrongRingOrParameterServerResult) {
  // One rank has nobody to send to: the ring and the server never call recv.
  if (n < 2) return;
  // One size, 2048 bytes or 512 floats: the ring receives chunks of 512 / n (rounded down: some
  // chunk has that length) and the parameter server's workers whole buffers of 512 (as does the
  // unchecked ping-pong).
  CommBenchOptions o = small({}, true);
  o.min_bytes = o.max_bytes = 2048;
  CorruptingCommunicator ring(*world, "recv", n - 1, 512 / size_t(n));
  // (A chunk corrupted while it is reduced reaches other ranks too; the lowest one reports.)
  expect_caught(ring, o, "ring all-reduce of 2048 bytes gave a wrong result on rank ");
  CorruptingCommunicator server(*world, "recv", n - 1, 512);
  expect_caught(server, o,
                "parameter server all-reduce of 2048 bytes gave a wrong result on rank " + std::to_string(n - 1));
}

TEST_F(BenchComm, CleanRunChecksEveryRowAndWritesItsJson) {
  CorruptingCommunicator untouched(*world, "none", -1, 0);
  CommBenchOptions o = small({std::begin(kCommOps), std::end(kCommOps)}, true);
  o.json_path = ::testing::TempDir() + "bench_comm_test_" + std::to_string(n) + ".json";
  {
    const log::Quiet quiet;
    run_comm_bench(o, untouched);
  }
  if (me != 0) return;
  std::ifstream in(o.json_path);
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["ranks"], n);
  ASSERT_EQ(report["ops"].size(), 6u * 3u);  // six operations at 1K, 2K and 4K
  for (const auto& row : report["ops"]) {
    EXPECT_EQ(row["check"], "ok") << row.dump();
    EXPECT_GT(row["time_s"].get<double>(), 0.0);
  }
  ASSERT_EQ(report["allreduce_algorithms"].size(), 3u * 3u);
  EXPECT_EQ(report["allreduce_algorithms"][1]["algorithm"], "ring");
  EXPECT_EQ(report["allreduce_algorithms"][2]["algorithm"], "parameter server");
  for (const auto& row : report["allreduce_algorithms"]) EXPECT_EQ(row["check"], "ok") << row.dump();
  EXPECT_EQ(report.contains("fit"), n >= 2);
  std::remove(o.json_path.c_str());
}

}  // namespace
}  // namespace feast
