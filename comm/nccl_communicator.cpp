#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/device_memory.h"
#include "core/error.h"
#include "comm/comm_error.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_library.h"
#include "comm/watchdog.h"

namespace feast {
namespace {

// How long an abort may take before the job ends without it (it never waits for peers, but
// NCCL's own teardown can hang).
constexpr std::chrono::seconds kAbortWait{10};
// What a timed-out wait says when the watchdog's survey learns nothing.
constexpr const char* kNoSurveyAnswer = "another rank has probably failed or is stuck elsewhere";

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kUInt8: return ncclUint8;
  }
  throw Error(std::string("NCCL: no type for ") + dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op, const std::string& subject) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kBitXor: break;
  }
  throw Error(subject + ": NCCL has no bitwise-xor reduction (checksums combine host values)");
}

class NcclCommunicator;

// Between two polls of a wait that began at `start`: yield while the wait is young (a short
// operation ends within microseconds, and NCCL's own launch thread may want the core), then
// sleep briefly, answering the watchdog (a rank whose own wait timed out may ask about this one).
void pause_between_polls(std::chrono::steady_clock::time_point start, const std::string& what) {
  if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(200)) {
    watchdog::serve(what);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  } else {
    std::this_thread::yield();
  }
}


// ncclGroupStart()..ncclGroupEnd() that ends the group however the scope is left: a group left
// open by a failed call would defer every later NCCL call of this thread, silently.
class NcclGroup {
 public:
  explicit NcclGroup(const nccl::Library& lib) : lib_(lib) { FEAST_NCCL_CHECK(lib_, GroupStart()); }
  ~NcclGroup() {
    if (open_) lib_.GroupEnd();
  }
  // On non-blocking communicators it may answer ncclInProgress: the caller settles them.
  void end() {
    open_ = false;
    FEAST_NCCL_ISSUE(lib_, GroupEnd());
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  const nccl::Library& lib_;
  bool open_ = true;
};

// An event owned until an NcclWork takes it, so that a failure while enqueueing leaks none.
struct EventDestroyer {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using OwnedEvent = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroyer>;
OwnedEvent new_event(unsigned flags) {
  cudaEvent_t e = nullptr;
  FEAST_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return OwnedEvent(e);
}

// One operation in flight: its completion event on the communication stream (and, when timed,
// the event that marks its start there).
class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& comm, cudaEvent_t started, cudaEvent_t done, std::string subject,
           std::chrono::milliseconds timeout)
      : comm_(comm), started_(started), done_(done), subject_(std::move(subject)), timeout_(timeout) {}
  ~NcclWork() override;
  void wait() override;
  // A failed operation counts as finished: wait() reports it.
  bool test() override;
  double device_seconds() const override;

 private:
  NcclCommunicator& comm_;
  cudaEvent_t started_;  // null unless CollectiveOptions::timed
  cudaEvent_t done_;
  std::string subject_;
  std::chrono::milliseconds timeout_;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, cudaStream_t compute, std::chrono::milliseconds timeout)
      : host_(std::move(host)), lib_(nccl::library()), compute_(compute), timeout_(timeout) {
    ncclUniqueId id{};
    if (host_->rank() == 0) FEAST_NCCL_CHECK(lib_, GetUniqueId(&id));
    static_assert(sizeof id % sizeof(int32_t) == 0);
    host_->broadcast(&id, sizeof id / sizeof(int32_t), DType::kInt32, 0)->wait();
    // The group's world ranks, for the watchdog's survey when a wait times out (none when the
    // group is not over MPI: a test's).
    if (const MPI_Comm comm = mpi_comm_of(*host_); comm != MPI_COMM_NULL) world_ranks_ = watchdog::world_ranks_of(comm);
    FEAST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      FEAST_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      init(id);
      warm_up();
    } catch (...) {
      abort();
      if (ready_) cudaEventDestroy(ready_);
      cudaStreamDestroy(stream_);
      throw;
    }
  }
  ~NcclCommunicator() override {
    // While an error unwinds the run, peers may be stuck: abort (which does not wait for them)
    // rather than finalize (which would).
    if (comm_) {
      if (std::uncaught_exceptions() > 0 || !finalized()) abort();
      else lib_.CommDestroy(comm_);
    }
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }

  WorkHandle allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts = {}) override {
    if (!on_device(data)) return host_->allreduce(data, count, dtype, opts);
    const std::string what = subject("allreduce", count, dtype);
    const ncclRedOp_t op = nccl_op(opts.op, what);
    return enqueue(what, opts, [&] { FEAST_NCCL_ISSUE(lib_, AllReduce(data, data, count, nccl_type(dtype), op, comm_, stream_)); });
  }

  WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts, DType dtype,
                            const CollectiveOptions& opts = {}) override {
    const size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
    // Decided by the send buffer, which every rank has: this rank's block of the output may be
    // empty, its pointer one past an allocation.
    if (!on_device(send, recv, recv_counts[size_t(rank())] > 0))
      return host_->reduce_scatter(send, recv, recv_counts, dtype, opts);
    const std::string what = subject("reduce_scatter", total, dtype);
    const ncclRedOp_t op = nccl_op(opts.op, what);
    const ncclDataType_t t = nccl_type(dtype);
    const size_t elem = dtype_size(dtype);
    return enqueue(what, opts, [&] {
      if (equal(recv_counts)) {
        FEAST_NCCL_ISSUE(lib_, ReduceScatter(send, recv, recv_counts[0], t, op, comm_, stream_));
        return;
      }
      // Unequal blocks (ZeRO's shards cut a bucket anywhere): a reduce to each block's owner,
      // all in one group so NCCL runs them together.
      NcclGroup group(lib_);
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t n = recv_counts[size_t(r)];
        const void* block = static_cast<const char*>(send) + offset * elem;
        // recv is read only on the block's owner; the others pass it as a valid pointer.
        if (n > 0) FEAST_NCCL_ISSUE(lib_, Reduce(block, recv, n, t, op, r, comm_, stream_));
        offset += n;
      }
      group.end();
    });
  }

  WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                       const CollectiveOptions& opts = {}) override {
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    // Decided by the output, which every rank has; this rank's own block may be empty.
    if (!on_device(recv, send, counts[size_t(rank())] > 0)) return host_->allgather(send, recv, counts, dtype, opts);
    const std::string what = subject("allgather", total, dtype);
    const ncclDataType_t t = nccl_type(dtype);
    const size_t elem = dtype_size(dtype);
    return enqueue(what, opts, [&] {
      if (equal(counts)) {  // in place too: NCCL accepts send == recv + rank * count
        FEAST_NCCL_ISSUE(lib_, AllGather(send, recv, counts[0], t, comm_, stream_));
        return;
      }
      // Unequal blocks: each rank broadcasts its block into place, in one group.
      NcclGroup group(lib_);
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        const size_t n = counts[size_t(r)];
        void* block = static_cast<char*>(recv) + offset * elem;
        if (n > 0) FEAST_NCCL_ISSUE(lib_, Broadcast(r == rank() ? send : block, block, n, t, r, comm_, stream_));
        offset += n;
      }
      group.end();
    });
  }

  WorkHandle broadcast(void* data, size_t count, DType dtype, int root, const CollectiveOptions& opts = {}) override {
    if (!on_device(data)) return host_->broadcast(data, count, dtype, root, opts);
    check_peer(root, "broadcast");
    return enqueue(subject("broadcast", count, dtype), opts,
                   [&] { FEAST_NCCL_ISSUE(lib_, Broadcast(data, data, count, nccl_type(dtype), root, comm_, stream_)); });
  }

  WorkHandle alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                      const CollectiveOptions& opts = {}) override {
    if (!on_device(send, recv, count_per_rank > 0)) return host_->alltoall(send, recv, count_per_rank, dtype, opts);
    const ncclDataType_t t = nccl_type(dtype);
    const size_t bytes = count_per_rank * dtype_size(dtype);
    return enqueue(subject("alltoall", count_per_rank * size_t(size()), dtype), opts, [&] {
      NcclGroup group(lib_);
      for (int q = 0; q < size(); ++q) {
        FEAST_NCCL_ISSUE(lib_, Send(static_cast<const char*>(send) + size_t(q) * bytes, count_per_rank, t, q, comm_, stream_));
        FEAST_NCCL_ISSUE(lib_, Recv(static_cast<char*>(recv) + size_t(q) * bytes, count_per_rank, t, q, comm_, stream_));
      }
      group.end();
    });
  }

  WorkHandle alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t> recv_counts, DType dtype, const CollectiveOptions& opts = {}) override {
    const size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
    const size_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
    if (!on_device(send, recv, sent > 0 && received > 0))
      return host_->alltoallv(send, send_counts, recv, recv_counts, dtype, opts);
    const ncclDataType_t t = nccl_type(dtype);
    const size_t elem = dtype_size(dtype);
    return enqueue(subject("alltoallv", sent, dtype), opts, [&] {
      // One group of sends and receives, every peer's block at its offset: NCCL runs them together.
      NcclGroup group(lib_);
      size_t so = 0, ro = 0;
      for (int q = 0; q < size(); ++q) {
        const size_t s = send_counts[size_t(q)], r = recv_counts[size_t(q)];
        if (s > 0) FEAST_NCCL_ISSUE(lib_, Send(static_cast<const char*>(send) + so * elem, s, t, q, comm_, stream_));
        if (r > 0) FEAST_NCCL_ISSUE(lib_, Recv(static_cast<char*>(recv) + ro * elem, r, t, q, comm_, stream_));
        so += s;
        ro += r;
      }
      group.end();
    });
  }

  WorkHandle send(const void* data, size_t count, DType dtype, int peer, int tag) override {
    if (!on_device(data)) return host_->send(data, count, dtype, peer, tag);
    check_peer(peer, "send");
    return enqueue(subject("send", count, dtype) + " to rank " + std::to_string(peer), {},
                   [&] { FEAST_NCCL_ISSUE(lib_, Send(data, count, nccl_type(dtype), peer, comm_, stream_)); });
  }

  WorkHandle recv(void* data, size_t count, DType dtype, int peer, int tag) override {
    if (!on_device(data)) return host_->recv(data, count, dtype, peer, tag);
    check_peer(peer, "recv");
    return enqueue(subject("recv", count, dtype) + " from rank " + std::to_string(peer), {},
                   [&] { FEAST_NCCL_ISSUE(lib_, Recv(data, count, nccl_type(dtype), peer, comm_, stream_)); });
  }

  // NCCL matches point-to-point transfers by their order between two ranks, not by tag.
  WorkHandle sendrecv(const void* send_data, size_t send_count, int to, int send_tag, void* recv_data,
                      size_t recv_count, int from, int recv_tag, DType dtype) override {
    if (!on_device(send_data, recv_data, recv_count > 0))
      return host_->sendrecv(send_data, send_count, to, send_tag, recv_data, recv_count, from, recv_tag, dtype);
    check_peer(to, "sendrecv");
    check_peer(from, "sendrecv");
    const ncclDataType_t t = nccl_type(dtype);
    return enqueue(subject("sendrecv", send_count, dtype) + " to rank " + std::to_string(to) + " and from rank " +
                       std::to_string(from),
                   {}, [&] {
                     NcclGroup group(lib_);
                     FEAST_NCCL_ISSUE(lib_, Send(send_data, send_count, t, to, comm_, stream_));
                     FEAST_NCCL_ISSUE(lib_, Recv(recv_data, recv_count, t, from, comm_, stream_));
                     group.end();
                   });
  }

  void barrier() override { host_->barrier(); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    std::unique_ptr<Communicator> part = host_->split(color, key, name);
    if (!part) return nullptr;
    return std::make_unique<NcclCommunicator>(std::move(part), compute_, timeout_);
  }

  // For NcclWork: the operation's failure, if NCCL reports one; and ending the communicator.
  std::string async_error() const {
    ncclResult_t result = ncclSuccess;
    if (lib_.CommGetAsyncError(comm_, &result) != ncclSuccess || result == ncclSuccess || result == ncclInProgress)
      return "";
    return lib_.GetErrorString(result);
  }
  // ncclCommAbort never waits for peers, but it can itself hang (NVIDIA/nccl#549, #1777), and the
  // job is ending either way: it runs on a thread of its own, given a bounded wait.
  // Called from destructors: never throws (without a thread to spare, it aborts on this one).
  void abort() noexcept {
    if (aborted_) return;
    aborted_ = true;
    const ncclComm_t comm = std::exchange(comm_, nullptr);
    if (!comm) return;
    std::shared_ptr<std::atomic<bool>> finished;
    try {
      finished = std::make_shared<std::atomic<bool>>(false);
      std::thread([abort = lib_.CommAbort, comm, finished] {
        abort(comm);
        finished->store(true, std::memory_order_release);
      }).detach();
    } catch (...) {
      lib_.CommAbort(comm);
      return;
    }
    const std::string what = "aborting NCCL group '" + name() + "'";
    const auto until = std::chrono::steady_clock::now() + kAbortWait;
    while (!finished->load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      try {
        watchdog::serve(what);  // a peer's survey meanwhile finds this rank alive
      } catch (...) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bool aborted() const { return aborted_; }

  // After a wait on `what` passed its `timeout`: asks the group which ranks are late and what the
  // others wait for (as MPI waits report; before the abort, which may take a while), aborts, and
  // throws CommTimeout naming `what` and them (or `hint` when the survey learns nothing).
  [[noreturn]] void time_out(const std::string& what, std::chrono::milliseconds timeout,
                             const std::string& hint = kNoSurveyAnswer) {
    const std::string late = watchdog::survey(world_ranks_, what, watchdog::grace_for(timeout));
    const bool made = comm_ != nullptr;  // not yet, while the initialisation itself is late
    abort();
    throw CommTimeout(what + " did not finish within " + std::to_string(double(timeout.count()) / 1000.0) +
                      " s (parallel.timeout_s): " + (late.empty() ? hint : late) +
                      (made ? "; the NCCL communicator was aborted" : ""));
  }
  cudaStream_t compute_stream() const { return compute_; }

 private:
  // The communicator is non-blocking (ncclConfig_t::blocking = 0): NCCL's calls return at once,
  // ncclInProgress while NCCL goes on in the background (joining the group, connecting peers on
  // a first use), and the communicator's state (ncclCommGetAsyncError) says when that settles.
  // Every wait for it runs here, under parallel.timeout_s and serving the watchdog, so no NCCL
  // call holds the host without a deadline: a rank that never joins, or dies before a peer
  // connects, ends the job with a message naming the group.
  // Non-blocking, ncclCommInitRankConfig returns at once and NCCL joins the group in the
  // background; it must be called on this thread, which outlives that work (NCCL before 2.27
  // keeps the background job in the calling thread's thread-local storage). NCCL_COMM_BLOCKING
  // (NCCL's own override) makes it block until every rank has joined: then it runs on a helper
  // thread while this one waits under the deadline (past it the helper is left behind: the job
  // ends), and nothing of it is left in the background.
  void init(const ncclUniqueId& id) {
    const std::string what = "NCCL initialisation of group '" + name() + "' (rank " + std::to_string(rank()) +
                             " of " + std::to_string(size()) + ")";
    const std::string hint = "a rank may have failed before it, or the ranks cannot reach each other "
                             "(NCCL_SOCKET_IFNAME, firewalls; NCCL_DEBUG=INFO says more)";
    struct Call {
      ncclComm_t comm = nullptr;
      ncclResult_t result = ncclSuccess;
      std::atomic<bool> done{false};
    };
    auto call = std::make_shared<Call>();
    int device = 0;
    FEAST_CUDA_CHECK(cudaGetDevice(&device));
    auto initialise = [call, device, init = lib_.CommInitRankConfig, id, n = size(), me = rank()] {
      cudaSetDevice(device);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      call->result = init(&call->comm, n, id, me, &config);
      call->done.store(true, std::memory_order_release);
    };
    if (nccl_calls_forced_blocking()) std::thread(initialise).detach();
    else initialise();
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    const auto start = std::chrono::steady_clock::now();
    while (!call->done.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) time_out(what, timeout_, hint);
      pause_between_polls(start, what);
    }
    if (call->result != ncclSuccess && call->result != ncclInProgress)
      throw Error(what + " failed: " + lib_.GetErrorString(call->result));
    comm_ = call->comm;
    settle(what, timeout_, hint, deadline);  // a non-blocking initialisation goes on in NCCL's background
  }

  // One all-reduce of a single value before training, through the path every operation takes:
  // NCCL connects the peers it needs here, under the deadline, and a transport that cannot work
  // fails at start-up, named, rather than in the first step.
  // (The value lives in stream order on the compute stream, so nothing here waits for the whole
  // device, where another group's operation could be waiting for its peers.)
  void warm_up() {
    float* value = nullptr;
    FEAST_CUDA_CHECK(cudaMallocAsync(&value, sizeof(float), compute_));
    try {
      FEAST_CUDA_CHECK(cudaMemsetAsync(value, 0, sizeof(float), compute_));
      allreduce(value, 1, DType::kFloat32)->wait();
    } catch (...) {
      cudaFreeAsync(value, compute_);
      throw;
    }
    FEAST_CUDA_CHECK(cudaFreeAsync(value, compute_));  // after the all-reduce, which wait() ordered before
  }

  // Waits until the communicator has no call in progress; throws naming `what` when it fails, or
  // when `timeout` passes (then with the ranks the watchdog finds late, or else `hint`).
  // `deadline`: when the wait began plus `timeout`, unless the caller's wait began earlier.
  void settle(const std::string& what, std::chrono::milliseconds timeout,
              const std::string& hint = kNoSurveyAnswer,
              std::optional<std::chrono::steady_clock::time_point> until = std::nullopt) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = until.value_or(start + timeout);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      if (const ncclResult_t r = lib_.CommGetAsyncError(comm_, &state); r != ncclSuccess) state = r;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        abort();
        throw Error(what + " failed: " + lib_.GetErrorString(state) + "; the NCCL communicator was aborted");
      }
      if (std::chrono::steady_clock::now() > deadline) time_out(what, timeout, hint);
      pause_between_polls(start, what);
    }
  }

  // For the destructor: ncclCommFinalize flushes what is in flight and, on a non-blocking
  // communicator, settles in the background; whether it did within the deadline (if not, the
  // destructor aborts instead of destroying). Never throws.
  bool finalized() noexcept {
    const ncclResult_t r = lib_.CommFinalize(comm_);
    return (r == ncclSuccess || r == ncclInProgress) && settled_quietly();
  }
  bool settled_quietly() noexcept {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      if (lib_.CommGetAsyncError(comm_, &state) != ncclSuccess) return false;
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Whether a call goes through NCCL (its primary buffer is device memory) or the host
  // communicator. The primary buffer is one every rank has, so all ranks take the same path; a
  // second buffer that holds elements must agree with it.
  bool on_device(const void* primary) const { return is_device_memory(primary); }
  bool on_device(const void* primary, const void* other, bool other_used) const {
    const bool device = is_device_memory(primary);
    FEAST_CHECK(!other_used || is_device_memory(other) == device,
                "group '" << name() << "': one buffer of a call is on the GPU and the other in host memory");
    return device;
  }
  static bool equal(std::span<const size_t> counts) {
    for (size_t c : counts)
      if (c != counts[0]) return false;
    return !counts.empty();
  }
  void check_peer(int peer, const char* op) const {
    FEAST_CHECK(peer >= 0 && peer < size(), op << " on group '" << name() << "': rank " << peer << " is not in a group of "
                                               << size());
  }
  std::string subject(const char* op, size_t count, DType dtype) const {
    std::ostringstream os;
    os << "NCCL " << op << " of " << count << " " << dtype_name(dtype) << " on group '" << name() << "' (rank "
       << rank() << " of " << size() << ")";
    return os.str();
  }
  // Orders the communication stream after the compute stream's queued work, runs `issue` (the
  // NCCL calls) and records their completion.
  template <typename Issue>
  WorkHandle enqueue(const std::string& what, const CollectiveOptions& opts, Issue&& issue) {
    FEAST_CHECK(!aborted_, what << ": the group's NCCL communicator was aborted by an earlier failure");
    // One event serves every call: a stream's wait takes the event as recorded at that moment.
    FEAST_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    FEAST_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    // Timing events cost more to record and query, so only a timed call gets them.
    const unsigned flags = opts.timed ? cudaEventDefault : cudaEventDisableTiming;
    OwnedEvent started = opts.timed ? new_event(flags) : nullptr;
    if (started) FEAST_CUDA_CHECK(cudaEventRecord(started.get(), stream_));  // once the compute it follows is done
    const std::chrono::milliseconds timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
    try {
      issue();
    } catch (...) {
      // A failed call leaves a non-blocking communicator in error (and a group may have gone on
      // in the background): later calls must not inherit it.
      abort();
      throw;
    }
    // A non-blocking communicator launches the call from NCCL's own thread (connecting peers
    // first if this is their first use); the stream holds it only once that settles.
    settle(what, timeout);
    OwnedEvent done = new_event(flags);
    FEAST_CUDA_CHECK(cudaEventRecord(done.get(), stream_));
    auto work = std::make_unique<NcclWork>(*this, started.get(), done.get(), what, timeout);
    started.release();  // the work destroys them now
    done.release();
    return work;
  }

  std::unique_ptr<Communicator> host_;
  const nccl::Library& lib_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // marks the compute stream's queued work for the next operation
  ncclComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  bool aborted_ = false;
  std::vector<int> world_ranks_;  // the group's members as world ranks, for the watchdog's survey
};

NcclWork::~NcclWork() {
  if (!waited_) {
    if (std::uncaught_exceptions() > 0) {
      // An error is already unwinding the run: do not sit out the deadline for an operation
      // whose peers may be gone; end it.
      comm_.abort();
    } else {
      try {
        wait();
      } catch (...) {  // a destructor must not throw; whoever waits sees the failure
      }
    }
  }
  if (started_) cudaEventDestroy(started_);
  if (done_) cudaEventDestroy(done_);
}

bool NcclWork::test() {
  if (waited_ || comm_.aborted()) return true;  // wait() reports an abort
  const cudaError_t state = cudaEventQuery(done_);
  if (state == cudaErrorNotReady) return false;
  // A failure is reported now, as wait() reports it, before a later kernel launch's check
  // finds CUDA's error state and blames itself.
  if (state != cudaSuccess) wait();
  return true;
}

double NcclWork::device_seconds() const {
  float ms = 0;
  if (!started_ || !waited_ || cudaEventElapsedTime(&ms, started_, done_) != cudaSuccess) return -1;
  return double(ms) / 1e3;
}

void NcclWork::wait() {
  if (waited_) return;
  waited_ = true;
  if (comm_.aborted())
    throw Error(subject_ + ": the group's NCCL communicator was aborted by an earlier failure; its result is lost");
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t state = cudaEventQuery(done_);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) {
      cudaGetLastError();
      comm_.abort();
      throw Error(subject_ + " failed on the GPU: " + cudaGetErrorString(state));
    }
    if (const std::string e = comm_.async_error(); !e.empty()) {
      comm_.abort();
      throw Error(subject_ + " failed: " + e);
    }
    if (std::chrono::steady_clock::now() > deadline) comm_.time_out(subject_, timeout_);
    pause_between_polls(start, subject_);
  }
  // Later compute work reads what the operation wrote.
  FEAST_CUDA_CHECK(cudaStreamWaitEvent(comm_.compute_stream(), done_, 0));
}

}  // namespace

bool nccl_available(std::string* why) { return nccl::load(why) != nullptr; }

bool nccl_calls_forced_blocking() {
  const char* v = std::getenv("NCCL_COMM_BLOCKING");
  return v && std::atoi(v) != 0;  // read as NCCL reads it: any non-zero integer
}


std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, void* compute_stream,
                                                     std::chrono::milliseconds timeout) {
  return std::make_unique<NcclCommunicator>(std::move(host), static_cast<cudaStream_t>(compute_stream), timeout);
}

}  // namespace feast
