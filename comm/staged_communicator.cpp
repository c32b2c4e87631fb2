#include "comm/staged_communicator.h"

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/device_memory.h"
#include "core/log.h"
#include "comm/process_groups.h"

namespace feast {
namespace {

// A device buffer's host copy: filled from the device at creation when asked (`fill`); the
// StagedWork writes it back to the device when the operation is waited on.
struct Stage {
  void* device;
  size_t bytes;
  std::shared_ptr<void> host;

  Stage(const void* d, size_t n, bool fill, const DeviceMemoryOps& memory)
      : device(const_cast<void*>(d)), bytes(n), host(memory.host_buffer(n)) {
    if (fill) memory.copy(host.get(), d, n);
  }
};

// The wrapped operation's handle plus the stages whose results go back to the device on wait().
// The stages live until then, so the operation's host buffers stay valid while it runs. It keeps
// its own copy function: a handle may outlive the communicator that made it.
class StagedWork final : public Work {
 public:
  StagedWork(WorkHandle inner, std::vector<Stage> results, std::vector<Stage> inputs,
             decltype(DeviceMemoryOps::copy) copy)
      : results_(std::move(results)), inputs_(std::move(inputs)), inner_(std::move(inner)), copy_(std::move(copy)) {}
  ~StagedWork() override {
    if (done_) return;
    if (std::uncaught_exceptions() > 0) {
      // Unwinding after an error: the job is ending, and waiting (up to parallel.timeout_s, for
      // each handle in flight) would only delay the abort. The inner handle abandons its
      // requests, which may still write into the host stages: those are left to the process's
      // end rather than handed back to the cache for another call to use.
      bool finished = false;
      try {
        finished = inner_->test();
      } catch (...) {  // a failed operation writes nothing more
        finished = true;
      }
      if (!finished) {
        static std::vector<std::vector<Stage>> kept_for_abandoned_operations;
        kept_for_abandoned_operations.push_back(std::move(results_));
        kept_for_abandoned_operations.push_back(std::move(inputs_));
      }
      return;
    }
    try {
      wait();
    } catch (const std::exception& e) {
      // A destructor cannot throw, and a failed transfer nobody waited for must still end the job.
      log::error(std::string("un-waited communication failed: ") + e.what());
      std::abort();
    }
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    inner_->wait();
    for (Stage& s : results_) copy_(s.device, s.host.get(), s.bytes);
  }
  // The copies back to the device happen in wait(), which no longer waits on other ranks.
  bool test() override { return done_ || inner_->test(); }

 private:
  // Declared before inner_, so they outlive it: an operation still running when the handle goes
  // must not write into a buffer already handed back to the cache (and one abandoned while an
  // error unwinds keeps them until the process ends: see the destructor).
  std::vector<Stage> results_, inputs_;
  WorkHandle inner_;
  decltype(DeviceMemoryOps::copy) copy_;
  bool done_ = false;
};

// The stages of one call, made as its buffers are named: a device input is copied to a host
// stage now; a device result gets a host stage (filled now when the call also reads it: in
// place, or a broadcast's root) that wait() copies back. Host buffers pass through.
class Staging {
 public:
  // Selects the communicator's device first: the copies run on it.
  Staging(const DeviceMemoryOps& memory, int device) : memory_(memory) { use_device(device); }

  const void* input(const void* p, size_t bytes) {
    if (!memory_.is_device(p)) return p;
    inputs_.emplace_back(p, bytes, true, memory_);
    return inputs_.back().host.get();
  }
  void* result(void* p, size_t bytes, bool fill) {
    if (!memory_.is_device(p)) return p;
    results_.emplace_back(p, bytes, fill, memory_);
    return results_.back().host.get();
  }
  // The call's handle, wrapped when anything was staged.
  WorkHandle finish(WorkHandle inner) {
    if (inputs_.empty() && results_.empty()) return inner;
    return std::make_unique<StagedWork>(std::move(inner), std::move(results_), std::move(inputs_), memory_.copy);
  }

 private:
  const DeviceMemoryOps& memory_;
  std::vector<Stage> inputs_, results_;
};

size_t total(std::span<const size_t> counts) { return std::accumulate(counts.begin(), counts.end(), size_t{0}); }

}  // namespace

std::shared_ptr<void> pinned_host_buffer(size_t bytes) {
  auto buffer = std::make_shared<PinnedBuffer>(bytes);
  return std::shared_ptr<void>(buffer, buffer->data());
}

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> inner, DeviceMemoryOps memory)
    : inner_(std::move(inner)), memory_(std::move(memory)) {}

WorkHandle StagedCommunicator::allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts) {
  Staging staging(memory_, device_);
  void* d = staging.result(data, count * dtype_size(dtype), true);
  return staging.finish(inner_->allreduce(d, count, dtype, opts));
}

WorkHandle StagedCommunicator::reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                                              DType dtype, const CollectiveOptions& opts) {
  Staging staging(memory_, device_);
  const size_t elem = dtype_size(dtype);
  const void* s = staging.input(send, total(recv_counts) * elem);
  void* r = staging.result(recv, recv_counts[size_t(rank())] * elem, false);
  return staging.finish(inner_->reduce_scatter(s, r, recv_counts, dtype, opts));
}

WorkHandle StagedCommunicator::allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                                         const CollectiveOptions& opts) {
  Staging staging(memory_, device_);
  const size_t elem = dtype_size(dtype);
  size_t my_offset = 0;
  for (int q = 0; q < rank(); ++q) my_offset += counts[size_t(q)] * elem;
  const bool in_place = send == static_cast<const char*>(recv) + my_offset;
  // In place, this rank's own block is the input: fill the whole stage so the block is there.
  void* r = staging.result(recv, total(counts) * elem, in_place);
  const void* s =
      in_place ? static_cast<const char*>(r) + my_offset : staging.input(send, counts[size_t(rank())] * elem);
  return staging.finish(inner_->allgather(s, r, counts, dtype, opts));
}

WorkHandle StagedCommunicator::broadcast(void* data, size_t count, DType dtype, int root,
                                         const CollectiveOptions& opts) {
  Staging staging(memory_, device_);
  void* d = staging.result(data, count * dtype_size(dtype), rank() == root);
  return staging.finish(inner_->broadcast(d, count, dtype, root, opts));
}

WorkHandle StagedCommunicator::alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                        const CollectiveOptions& opts) {
  Staging staging(memory_, device_);
  const size_t bytes = count_per_rank * size_t(size()) * dtype_size(dtype);
  const void* s = staging.input(send, bytes);
  void* r = staging.result(recv, bytes, false);
  return staging.finish(inner_->alltoall(s, r, count_per_rank, dtype, opts));
}

WorkHandle StagedCommunicator::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                                         std::span<const size_t> recv_counts, DType dtype,
                                         const CollectiveOptions& opts) {
  Staging staging(memory_, device_);
  const void* s = staging.input(send, total(send_counts) * dtype_size(dtype));
  void* r = staging.result(recv, total(recv_counts) * dtype_size(dtype), false);
  return staging.finish(inner_->alltoallv(s, send_counts, r, recv_counts, dtype, opts));
}

WorkHandle StagedCommunicator::send(const void* data, size_t count, DType dtype, int peer, int tag) {
  Staging staging(memory_, device_);
  const void* d = staging.input(data, count * dtype_size(dtype));
  return staging.finish(inner_->send(d, count, dtype, peer, tag));
}

WorkHandle StagedCommunicator::recv(void* data, size_t count, DType dtype, int peer, int tag) {
  Staging staging(memory_, device_);
  void* d = staging.result(data, count * dtype_size(dtype), false);
  return staging.finish(inner_->recv(d, count, dtype, peer, tag));
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, const std::string& name) {
  std::unique_ptr<Communicator> part = inner_->split(color, key, name);
  if (!part) return nullptr;
  return std::make_unique<StagedCommunicator>(std::move(part), memory_);
}

void stage_device_buffers(ProcessGroups& groups) {
  for (std::unique_ptr<Communicator>* g : {&groups.world, &groups.tp, &groups.pp, &groups.dp, &groups.cp, &groups.embedding})
    if (*g) *g = std::make_unique<StagedCommunicator>(std::move(*g));
}

}  // namespace feast
