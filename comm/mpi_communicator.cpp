// MpiCommunicator: MPI's non-blocking calls behind the Communicator interface, split into calls
// of at most max_count elements, and the handle that waits for all of a call's requests under a
// deadline without taking a core from the ranks it waits for.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <exception>
#include <functional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "core/log.h"
#include "comm/mpi_check.h"
#include "comm/mpi_world.h"
#include "comm/staged_communicator.h"
#include "comm/watchdog.h"

namespace feast {
namespace {

using Clock = std::chrono::steady_clock;

// Under WaitPolicy::kBackOff (mpi_world.h), a waiting rank tests its requests in a tight loop for
// this long (a collective between ranks that each own a core finishes in a few microseconds),
// then sleeps between tests; under kSpin it never sleeps. With more
// ranks than cores a spinning waiter takes the CPU from the very rank it waits for, and the
// kernel's round-robin makes every step of a collective cost a whole time slice. Measured with
// 8 ranks on 2 cores: 1 ms of compute + a 64K all-reduce per step took 5.0 ms sleeping against
// 10.1 ms spinning; the price is ~0.6 ms instead of 0.03-0.15 ms for a tiny all-reduce.
constexpr auto kSpinFor = std::chrono::microseconds(20);
constexpr auto kPollSleep = std::chrono::microseconds(50);
// A spinning waiter still answers the watchdog's survey (a rank whose wait timed out asks who is
// alive), at this interval.
constexpr auto kServeEvery = std::chrono::milliseconds(1);

std::atomic<WaitPolicy> g_wait_policy{WaitPolicy::kBackOff};

// bfloat16 travels as 16-bit words: MPI has no type for it, and moving bits needs none.
MPI_Datatype to_mpi(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kBFloat16: return MPI_UINT16_T;
    case DType::kUInt8: return MPI_UINT8_T;
  }
  throw Error("unknown DType");
}

// bfloat16 sums and maxima: MPI would treat the 16-bit words as integers, so these user
// operations widen each pair to float32, combine and round back (to nearest even), as NCCL's
// bfloat16 reductions do at every step of their ring.
template <typename Combine>
void combine_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(Combine{}(bf16_to_float(a[i]), bf16_to_float(b[i])));
}
struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Max {  // a NaN on any rank wins, whatever the order the ranks combine in
  float operator()(float a, float b) const { return a != a || b != b ? a + b : std::max(a, b); }
};

// Created once, on first use after MPI_Init; MPI_Finalize releases them.
MPI_Op bf16_op(ReduceOp op) {
  static const MPI_Op sum = [] {
    MPI_Op o;
    FEAST_MPI_CHECK(MPI_Op_create(&combine_bf16<Add>, /*commute=*/1, &o));
    return o;
  }();
  static const MPI_Op max = [] {
    MPI_Op o;
    FEAST_MPI_CHECK(MPI_Op_create(&combine_bf16<Max>, /*commute=*/1, &o));
    return o;
  }();
  return op == ReduceOp::kSum ? sum : max;
}

// Bitwise operations are defined on integers only.
MPI_Op to_mpi(ReduceOp op, DType dtype, const std::string& what) {
  if (op == ReduceOp::kBitXor && dtype != DType::kInt32 && dtype != DType::kInt64)
    throw Error(what + ": a bitwise reduction needs an integer type");
  if (dtype == DType::kBFloat16) return bf16_op(op);
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kBitXor: return MPI_BXOR;
  }
  throw Error("unknown ReduceOp");
}

std::string amount(size_t count, DType dtype) { return std::to_string(count) + " " + dtype_name(dtype); }

char* at(void* base, size_t elements, DType dtype) { return static_cast<char*>(base) + elements * dtype_size(dtype); }
const char* at(const void* base, size_t elements, DType dtype) {
  return static_cast<const char*>(base) + elements * dtype_size(dtype);
}

enum class Kind { kCollective, kSend, kRecv };

class MpiWork final : public Work {
 public:
  // Requests are added as they are posted, so that if posting a later piece fails the pieces
  // already in flight are abandoned with the handle while the error unwinds.
  // group: the world ranks of the call's group, for the watchdog's report.
  MpiWork(Kind kind, std::string what, std::chrono::milliseconds timeout, std::shared_ptr<const std::vector<int>> group)
      : kind_(kind), what_(std::move(what)), timeout_(timeout), group_(std::move(group)) {}

  void add(MPI_Request request) {
    requests_.push_back(request);
    statuses_.resize(requests_.size());
  }
  // Keeps the counts and displacements a v-collective reads until it completes.
  void keep(std::vector<int> arrays) { arrays_ = std::move(arrays); }
  // Keeps a derived datatype the requests read until the handle goes (MPI allows freeing one
  // a pending call uses, but some implementations' non-blocking collectives did not keep it).
  void keep(MPI_Datatype type) { types_.types.push_back(type); }
  // What to do once every request has completed (move an in-place result into place).
  void then(std::function<void()> finish) { finish_ = std::move(finish); }

  ~MpiWork() override {
    if (done() && !finish_) return;
    if (std::uncaught_exceptions() > 0) {
      // Unwinding after an error: the job is ending, and waiting here (up to a timeout) would
      // only delay the abort. Abandon the requests.
      abandon();
      return;
    }
    try {
      wait();
    } catch (const std::exception& e) {
      if (std::uncaught_exceptions() > 0) return;  // the error already in flight is the one to report
      // A destructor cannot throw; a failed transfer nobody waited for must still end the job.
      log::error(std::string("un-waited communication failed: ") + e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  void wait() override {
    if (!done()) poll();
    if (finish_) std::exchange(finish_, nullptr)();
  }

  // Whether every request has completed. MPI_Testall drives progress only after it has found a
  // request incomplete and then returns without looking again, so a collective finished by that
  // progress would wait for the next poll (a sleep): look once more, as MPI_Test does itself.
  bool test() override {
    for (int attempt = 0; attempt < 2; ++attempt) {
      int all = 0;
      const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &all, statuses_.data());
      if (rc == MPI_ERR_IN_STATUS) {
        // The failed request's own error is in its status (MPI_ERR_TRUNCATE, say).
        for (const MPI_Status& st : statuses_)
          if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) fail(st.MPI_ERROR);
      }
      if (rc != MPI_SUCCESS) fail(rc);
      if (all) return true;
    }
    return false;
  }

 private:
  void poll() {
    const auto start = Clock::now();
    const auto deadline = start + timeout_;
    const bool back_off = g_wait_policy.load(std::memory_order_relaxed) == WaitPolicy::kBackOff;
    auto served = start;
    for (;;) {
      if (test()) return;
      const auto now = Clock::now();
      if (now >= deadline) {
        abandon();
        std::ostringstream os;
        os << what_ << " did not complete within " << static_cast<double>(timeout_.count()) / 1000.0
           << " s (parallel.timeout_s)";
        // Ask the other ranks who is alive, for a short part of the timeout.
        const auto grace = watchdog::grace_for(timeout_);
        const std::string report = watchdog::survey(*group_, what_, grace);
        os << (report.empty() ? ": another rank may have failed or is stuck" : ": " + report);
        throw CommTimeout(os.str());
      }
      if (back_off && now - start > kSpinFor) {
        watchdog::serve(what_);  // a rank whose wait timed out may be asking about us
        std::this_thread::sleep_for(kPollSleep);
      } else if (!back_off && now - served > kServeEvery) {
        watchdog::serve(what_);
        served = now;
      }
    }
  }

  bool done() const {
    return std::all_of(requests_.begin(), requests_.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
  }

  // A failed request is complete: report it with the call it belongs to; the others are
  // abandoned (the job is ending).
  [[noreturn]] void fail(int rc) {
    abandon();
    try {
      detail::throw_mpi_failure(rc, "MPI_Testall", __FILE__, __LINE__);
    } catch (const Error& e) {
      throw Error(what_ + " failed: " + e.what());
    }
  }

  // Gives up on the requests after the deadline so that neither a later wait() nor the
  // destructor blocks on them again. Error codes are ignored: the timeout is the error to report.
  void abandon() {
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      switch (kind_) {
        case Kind::kRecv:
          // An unmatched receive cancels at once; one matched meanwhile completes normally.
          MPI_Cancel(&request);
          MPI_Wait(&request, MPI_STATUS_IGNORE);
          break;
        case Kind::kSend:
          // Open MPI cannot cancel a send, so waiting could block forever; freeing lets it
          // finish (or not) in the background. The job is ending anyway.
          MPI_Request_free(&request);
          break;
        case Kind::kCollective:
          // MPI forbids cancelling or freeing a collective request: it is left in flight.
          break;
      }
      request = MPI_REQUEST_NULL;
    }
  }

  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
  Kind kind_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<const std::vector<int>> group_;
  std::vector<int> arrays_;
  std::function<void()> finish_;
  // Members are destroyed after the destructor's body has waited for (or abandoned) the requests.
  struct Types {
    std::vector<MPI_Datatype> types;
    ~Types() {
      for (MPI_Datatype& t : types) MPI_Type_free(&t);
    }
  } types_;
};

// Calls post(offset, n) for consecutive pieces [offset, offset + n) of `count` elements of at
// most `max` each (one call for count 0, so every rank posts the same number of calls).
template <typename Post>
void in_pieces(size_t count, size_t max, Post post) {
  size_t offset = 0;
  do {
    const size_t n = std::min(max, count - offset);
    post(offset, static_cast<int>(n));
    offset += n;
  } while (offset < count);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, std::chrono::milliseconds default_timeout,
                                 size_t max_count)
    : comm_(comm),
      name_(std::move(name)),
      default_timeout_(default_timeout),
      max_count_(std::clamp<size_t>(max_count, 1, size_t{INT_MAX})) {
  FEAST_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  FEAST_MPI_CHECK(MPI_Comm_set_name(comm_, name_.c_str()));
  FEAST_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  FEAST_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  world_ranks_ = std::make_shared<const std::vector<int>>(watchdog::world_ranks_of(comm_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::describe(const std::string& what) const {
  return what + " on group '" + name_ + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
}

std::chrono::milliseconds MpiCommunicator::timeout_for(const CollectiveOptions& opts) const {
  return opts.timeout.count() > 0 ? opts.timeout : default_timeout_;
}

WorkHandle MpiCommunicator::allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts) {
  const std::string what = describe("allreduce of " + amount(count, dtype));
  const MPI_Op op = to_mpi(opts.op, dtype, what);
  auto work = std::make_unique<MpiWork>(Kind::kCollective, what, timeout_for(opts), world_ranks_);
  in_pieces(count, max_count_, [&](size_t offset, int n) {
    MPI_Request r;
    FEAST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, at(data, offset, dtype), n, to_mpi(dtype), op, comm_, &r));
    work->add(r);
  });
  return work;
}

WorkHandle MpiCommunicator::reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                                           DType dtype, const CollectiveOptions& opts) {
  size_t total = 0, mine = 0;
  for (size_t r = 0; r < recv_counts.size(); ++r) {
    if (int(r) < rank_) mine += recv_counts[r];
    total += recv_counts[r];
  }
  const std::string what = describe("reduce_scatter of " + amount(total, dtype));
  const MPI_Op op = to_mpi(opts.op, dtype, what);
  FEAST_CHECK(recv_counts.size() == static_cast<size_t>(size_),
              what << ": got " << recv_counts.size() << " counts for " << size_ << " ranks");
  const size_t my_count = recv_counts[size_t(rank_)];
  // In place: this rank's block of send is where its result goes (even an empty block).
  const bool in_place = recv == at(send, mine, dtype) && total > 0;
  FEAST_CHECK(in_place || send != recv || total == 0,
              what << ": recv must be a separate buffer or this rank's block of send");
  auto work = std::make_unique<MpiWork>(Kind::kCollective, what, timeout_for(opts), world_ranks_);
  if (total <= max_count_) {
    std::vector<int> counts(recv_counts.size());
    for (size_t r = 0; r < counts.size(); ++r) counts[r] = static_cast<int>(recv_counts[r]);
    MPI_Request request;
    if (in_place) {
      // MPI's in-place form reads the whole input from the buffer and leaves this rank's result
      // at its start: move it to its block once it has landed.
      char* base = const_cast<char*>(static_cast<const char*>(send));
      FEAST_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, base, counts.data(), to_mpi(dtype), op, comm_, &request));
      work->then([base, recv, bytes = my_count * dtype_size(dtype)] { std::memmove(recv, base, bytes); });
    } else {
      FEAST_MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts.data(), to_mpi(dtype), op, comm_, &request));
    }
    work->add(request);
    work->keep(std::move(counts));
    return work;
  }
  // Too large for one call's int counts: reduce each rank's block to it, piece by piece (in
  // place, the owner's input is its result buffer).
  size_t block = 0;
  for (int r = 0; r < size_; ++r) {
    const size_t count = recv_counts[size_t(r)];
    in_pieces(count, max_count_, [&](size_t offset, int n) {
      MPI_Request request;
      const void* from = at(send, block + offset, dtype);
      void* into = r == rank_ ? at(recv, offset, dtype) : nullptr;
      if (r == rank_ && in_place) from = MPI_IN_PLACE;
      FEAST_MPI_CHECK(MPI_Ireduce(from, into, n, to_mpi(dtype), op, r, comm_, &request));
      work->add(request);
    });
    block += count;
  }
  return work;
}

WorkHandle MpiCommunicator::allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                                      const CollectiveOptions& opts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  const std::string what = describe("allgather of " + amount(total, dtype));
  FEAST_CHECK(counts.size() == static_cast<size_t>(size_),
              what << ": got " << counts.size() << " counts for " << size_ << " ranks");
  size_t own_offset = 0;
  for (int r = 0; r < rank_; ++r) own_offset += counts[size_t(r)];
  const void* own_block = at(static_cast<const void*>(recv), own_offset, dtype);
  auto work = std::make_unique<MpiWork>(Kind::kCollective, what, timeout_for(opts), world_ranks_);
  if (total <= max_count_) {
    // One array holding counts then displacements: MPI reads both until the call completes.
    std::vector<int> arrays(2 * counts.size());
    int offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      arrays[r] = static_cast<int>(counts[r]);
      arrays[counts.size() + r] = offset;
      offset += arrays[r];
    }
    const int* displs = arrays.data() + counts.size();
    const void* source = send == own_block ? MPI_IN_PLACE : send;
    MPI_Request request;
    FEAST_MPI_CHECK(MPI_Iallgatherv(source, arrays[size_t(rank_)], to_mpi(dtype), recv, arrays.data(), displs,
                                    to_mpi(dtype), comm_, &request));
    work->add(request);
    work->keep(std::move(arrays));
    return work;
  }
  // Too large for int displacements: each rank broadcasts its block from its place in recv.
  if (send != own_block && counts[size_t(rank_)] > 0)
    std::memcpy(at(recv, own_offset, dtype), send, counts[size_t(rank_)] * dtype_size(dtype));
  size_t block = 0;
  for (int r = 0; r < size_; ++r) {
    in_pieces(counts[size_t(r)], max_count_, [&](size_t offset, int n) {
      MPI_Request request;
      FEAST_MPI_CHECK(MPI_Ibcast(at(recv, block + offset, dtype), n, to_mpi(dtype), r, comm_, &request));
      work->add(request);
    });
    block += counts[size_t(r)];
  }
  return work;
}

WorkHandle MpiCommunicator::broadcast(void* data, size_t count, DType dtype, int root, const CollectiveOptions& opts) {
  const std::string what = describe("broadcast of " + amount(count, dtype) + " from rank " + std::to_string(root));
  FEAST_CHECK(root >= 0 && root < size_, what << ": root is not a rank of the group");
  auto work = std::make_unique<MpiWork>(Kind::kCollective, what, timeout_for(opts), world_ranks_);
  in_pieces(count, max_count_, [&](size_t offset, int n) {
    MPI_Request r;
    FEAST_MPI_CHECK(MPI_Ibcast(at(data, offset, dtype), n, to_mpi(dtype), root, comm_, &r));
    work->add(r);
  });
  return work;
}

WorkHandle MpiCommunicator::alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                     const CollectiveOptions& opts) {
  const std::string what = describe("alltoall of " + amount(count_per_rank, dtype) + " per rank");
  FEAST_CHECK(send != recv || count_per_rank == 0, what << ": send and recv must be different buffers");
  auto work = std::make_unique<MpiWork>(Kind::kCollective, what, timeout_for(opts), world_ranks_);
  if (count_per_rank <= max_count_) {
    MPI_Request r;
    const int n = static_cast<int>(count_per_rank);
    FEAST_MPI_CHECK(MPI_Ialltoall(send, n, to_mpi(dtype), recv, n, to_mpi(dtype), comm_, &r));
    work->add(r);
    return work;
  }
  // Too large for int counts: one all-to-all per piece [offset, offset + n) of every block. The
  // piece's type is n contiguous elements whose extent is a whole block, so the q-th element of
  // that type (what goes to or comes from rank q) starts at block q.
  const MPI_Aint block_bytes = static_cast<MPI_Aint>(count_per_rank * dtype_size(dtype));
  in_pieces(count_per_rank, max_count_, [&](size_t offset, int n) {
    MPI_Datatype piece = MPI_DATATYPE_NULL, strided = MPI_DATATYPE_NULL;
    FEAST_MPI_CHECK(MPI_Type_contiguous(n, to_mpi(dtype), &piece));
    work->keep(piece);
    FEAST_MPI_CHECK(MPI_Type_create_resized(piece, 0, block_bytes, &strided));
    work->keep(strided);
    FEAST_MPI_CHECK(MPI_Type_commit(&strided));
    MPI_Request r;
    FEAST_MPI_CHECK(MPI_Ialltoall(at(send, offset, dtype), 1, strided, at(recv, offset, dtype), 1, strided, comm_, &r));
    work->add(r);
  });
  return work;
}

WorkHandle MpiCommunicator::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                                      std::span<const size_t> recv_counts, DType dtype,
                                      const CollectiveOptions& opts) {
  size_t sent = 0, received = 0;
  for (size_t c : send_counts) sent += c;
  for (size_t c : recv_counts) received += c;
  const std::string what = describe("alltoallv of " + amount(sent, dtype) + " out, " + amount(received, dtype) + " in");
  FEAST_CHECK(send_counts.size() == size_t(size_) && recv_counts.size() == size_t(size_),
              what << ": counts for " << send_counts.size() << " and " << recv_counts.size() << " ranks, the group has "
                   << size_);
  FEAST_CHECK(send != recv || (sent == 0 && received == 0), what << ": send and recv must be different buffers");
  // Every block point to point (in pieces of int counts), under a tag of its own, the largest
  // every MPI allows: MPI_Alltoallv's int displacements would limit a rank's whole exchange to
  // 2^31 elements, and which ranks exceed that no rank can tell alone. Pieces between two ranks
  // arrive in the order they were posted.
  constexpr int kTag = 32767;
  auto work = std::make_unique<MpiWork>(Kind::kCollective, what, timeout_for(opts), world_ranks_);
  size_t so = 0, ro = 0;
  for (size_t q = 0; q < size_t(size_); ++q) {
    if (int(q) == rank_) {
      if (send_counts[q] > 0) std::memcpy(at(recv, ro, dtype), at(send, so, dtype), send_counts[q] * dtype_size(dtype));
    } else {
      if (recv_counts[q] > 0)
        in_pieces(recv_counts[q], max_count_, [&](size_t offset, int m) {
          MPI_Request r;
          FEAST_MPI_CHECK(MPI_Irecv(at(recv, ro + offset, dtype), m, to_mpi(dtype), int(q), kTag, comm_, &r));
          work->add(r);
        });
      if (send_counts[q] > 0)
        in_pieces(send_counts[q], max_count_, [&](size_t offset, int m) {
          MPI_Request r;
          FEAST_MPI_CHECK(MPI_Isend(at(send, so + offset, dtype), m, to_mpi(dtype), int(q), kTag, comm_, &r));
          work->add(r);
        });
    }
    so += send_counts[q];
    ro += recv_counts[q];
  }
  return work;
}

std::string MpiCommunicator::describe_p2p(const char* op, const char* direction, size_t count, DType dtype, int peer,
                                          int tag) const {
  const std::string what = describe(std::string(op) + " of " + amount(count, dtype) + " " + direction + " rank " +
                                    std::to_string(peer) + " (tag " + std::to_string(tag) + ")");
  FEAST_CHECK(peer >= 0 && peer < size_, what << ": peer is not a rank of the group");
  FEAST_CHECK(tag >= 0, what << ": tags must be non-negative");
  return what;
}

// Pieces of one message share its tag: MPI delivers messages with the same source, tag and
// communicator in the order they were sent, so the receiver's pieces match the sender's.
WorkHandle MpiCommunicator::send(const void* data, size_t count, DType dtype, int peer, int tag) {
  const std::string what = describe_p2p("send", "to", count, dtype, peer, tag);
  auto work = std::make_unique<MpiWork>(Kind::kSend, what, default_timeout_, world_ranks_);
  in_pieces(count, max_count_, [&](size_t offset, int n) {
    MPI_Request r;
    FEAST_MPI_CHECK(MPI_Isend(at(data, offset, dtype), n, to_mpi(dtype), peer, tag, comm_, &r));
    work->add(r);
  });
  return work;
}

WorkHandle MpiCommunicator::recv(void* data, size_t count, DType dtype, int peer, int tag) {
  const std::string what = describe_p2p("recv", "from", count, dtype, peer, tag);
  auto work = std::make_unique<MpiWork>(Kind::kRecv, what, default_timeout_, world_ranks_);
  in_pieces(count, max_count_, [&](size_t offset, int n) {
    MPI_Request r;
    FEAST_MPI_CHECK(MPI_Irecv(at(data, offset, dtype), n, to_mpi(dtype), peer, tag, comm_, &r));
    work->add(r);
  });
  return work;
}

void MpiCommunicator::barrier() {
  // Non-blocking underneath so that a barrier, too, ends in CommTimeout rather than a hang.
  MpiWork work(Kind::kCollective, describe("barrier"), default_timeout_, world_ranks_);
  MPI_Request request;
  FEAST_MPI_CHECK(MPI_Ibarrier(comm_, &request));
  work.add(request);
  work.wait();
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  // A negative color (-1 by convention) means "in no group": MPI_UNDEFINED, and no communicator.
  MPI_Comm child = MPI_COMM_NULL;
  FEAST_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child));
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(child, name, default_timeout_, max_count_);
}

MPI_Comm mpi_comm_of(const Communicator& c) {
  // A GPU run wraps its MPI groups to stage device buffers; parallel HDF5 still needs the MPI_Comm.
  if (const auto* staged = dynamic_cast<const StagedCommunicator*>(&c)) return mpi_comm_of(staged->inner());
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&c);
  return mpi ? mpi->comm_ : MPI_COMM_NULL;
}

void set_wait_policy(WaitPolicy policy) { g_wait_policy.store(policy, std::memory_order_relaxed); }
WaitPolicy wait_policy() { return g_wait_policy.load(std::memory_order_relaxed); }

std::unique_ptr<Communicator> make_mpi_world(std::chrono::milliseconds default_timeout, size_t max_count) {
  MPI_Comm world = MPI_COMM_NULL;
  FEAST_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  watchdog::start();
  return std::make_unique<MpiCommunicator>(world, "world", default_timeout, max_count);
}

}  // namespace feast
