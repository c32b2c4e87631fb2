// `[mpirun -np N] trainer bench comm`: the time of each collective by message size with algbw and
// busbw in nccl-tests' conventions, every result checked outside the timed loop; then a link
// model (latency alpha, seconds per byte beta) fitted to ping-pong times, and all-reduce three
// ways (the library's, a ring and a parameter server written over send/recv) against the
// model's predictions. The pieces are public so tests can feed the checker wrong buffers and
// drive the bench through a communicator that corrupts a result.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace feast {

// The collectives the bench times, in its order. kSendRecv: every rank sends to the next and
// receives from the previous at once (a ring shift), as nccl-tests' sendrecv.
enum class CommOp { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kAlltoall, kSendRecv };
inline constexpr CommOp kCommOps[] = {CommOp::kAllreduce, CommOp::kReduceScatter, CommOp::kAllgather,
                                      CommOp::kBroadcast, CommOp::kAlltoall,      CommOp::kSendRecv};

const char* comm_op_name(CommOp op);  // "allreduce", "reduce_scatter", ..., as --ops takes them

// nccl-tests' bus bandwidth factor (busbw = algbw * factor) for n ranks: what each rank's link
// carries relative to the size S: all-reduce 2(n-1)/n; reduce-scatter, all-gather and
// all-to-all (n-1)/n; broadcast and send/recv 1.
double busbw_factor(CommOp op, int n);

// The elements (float32) of the operation of S = `bytes` bytes at n ranks, as nccl-tests sizes
// it: the all-reduced or broadcast buffer, reduce-scatter's input, all-gather's output,
// all-to-all's and send/recv's buffer per rank. Rounded down to a multiple of n where the
// buffer is cut into one block per rank (at least one element per rank).
size_t comm_elements(CommOp op, size_t bytes, int n);

// Rank `rank`'s input for `op` over `elements`, in the buffer the call reads (for the in-place
// all-reduce and broadcast, the data buffer itself): small integers from the rank and the
// index, so every sum is exact in float32 in any order and each block says who sent it.
// Sizes: elements, except all-gather's elements / n.
void fill_comm_input(CommOp op, std::span<float> input, size_t elements, int rank, int n);

// The first wrong element of this rank's result of `op` (the data buffer of all-reduce and
// broadcast, otherwise the output: reduce-scatter's elements / n, the others' elements), with
// how many are wrong; nothing when it is right. Broadcast's root is rank 0; send/recv receives
// from rank - 1.
std::optional<std::string> find_wrong_comm_result(CommOp op, std::span<const float> result, size_t elements, int rank,
                                                  int n);

// T(bytes) = alpha + beta * bytes for one message over one link.
struct AlphaBeta {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per byte
  double seconds(double bytes) const { return alpha + beta * bytes; }
};

// Least squares on the relative error (weights 1 / t^2), so the small messages set alpha and the
// large ones beta instead of the largest swamping the rest; a negative alpha is refitted through
// zero. Needs two distinct sizes.
AlphaBeta fit_alpha_beta(std::span<const double> bytes, std::span<const double> seconds);

// Predicted all-reduce times of P bytes over n ranks. Ring (and the library, predicted as a
// ring): 2(n-1) steps of P/n bytes, 2(n-1)·alpha + 2(n-1)/n·P·beta. Parameter server: the
// server's link carries n-1 messages of P in and n-1 out, 2(n-1)·(alpha + P·beta).
double predicted_ring_allreduce(const AlphaBeta& link, double bytes, int n);
double predicted_parameter_server_allreduce(const AlphaBeta& link, double bytes, int n);

struct CommBenchOptions {
  size_t min_bytes = 1024;
  size_t max_bytes = size_t(64) << 20;
  int factor = 2;   // sizes multiply by this from min_bytes up to max_bytes
  int warmup = 2;   // untimed iterations before the timed ones
  int iters = 10;   // timed iterations; the table shows their median
  std::vector<CommOp> ops = {std::begin(kCommOps), std::end(kCommOps)};
  bool algorithms = true;  // the ping-pong fit and the library / ring / parameter-server table
  std::string json_path;   // rank 0 writes every measurement here as JSON ("" = none)
  std::string device = "cpu";   // where the collectives' buffers live: "cpu" or "cuda"
  std::string backend = "mpi";  // with device "cuda": "mpi" (staged through host memory) or "nccl"
};

// Runs the bench over `world` (collective; rank 0 prints). Throws AgreedError on every rank,
// naming the operation, the size and the rank, when any rank's result is wrong. With `device`
// (a GPU backend), the collectives' buffers are its memory: the host's input is copied there
// before each call and the result back for the check, outside the timing; the ping-pong and
// the algorithms table stay in host memory.
class Backend;
void run_comm_bench(const CommBenchOptions& options, Communicator& world, Backend* device = nullptr);

// The bench as `trainer bench comm` runs it: waits that spin or back off as training's do, and
// with device "cuda" a GPU per rank and the collectives through NCCL or staged MPI
// (comm/gpu_transport.h). Collective over `world`.
int run_comm_bench_job(const CommBenchOptions& options, std::unique_ptr<Communicator> world);

}  // namespace feast
