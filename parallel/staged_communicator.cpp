#include "parallel/staged_communicator.h"

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/device_memory.h"
#include "core/log.h"
#include "parallel/process_groups.h"

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
    // Unwinding after an error: the job is ending, and waiting (up to parallel.timeout_s, for
    // each handle in flight) would only delay the abort. The inner handle abandons its requests.
    if (done_ || std::uncaught_exceptions() > 0) return;
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
  // (a wait that threw) must not write into a buffer already handed back to the cache.
  std::vector<Stage> results_, inputs_;
  WorkHandle inner_;
  decltype(DeviceMemoryOps::copy) copy_;
  bool done_ = false;
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
  use_device(device_);
  if (!memory_.is_device(data)) return inner_->allreduce(data, count, dtype, opts);
  std::vector<Stage> results;
  results.emplace_back(data, count * dtype_size(dtype), true, memory_);
  WorkHandle h = inner_->allreduce(results.back().host.get(), count, dtype, opts);
  return std::make_unique<StagedWork>(std::move(h), std::move(results), std::vector<Stage>{}, memory_.copy);
}

WorkHandle StagedCommunicator::reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                                              DType dtype, const CollectiveOptions& opts) {
  use_device(device_);
  const bool send_dev = memory_.is_device(send), recv_dev = memory_.is_device(recv);
  if (!send_dev && !recv_dev) return inner_->reduce_scatter(send, recv, recv_counts, dtype, opts);
  const size_t elem = dtype_size(dtype);
  std::vector<Stage> inputs, results;
  const void* s = send;
  void* r = recv;
  if (send_dev) {
    inputs.emplace_back(send, total(recv_counts) * elem, true, memory_);
    s = inputs.back().host.get();
  }
  if (recv_dev) {
    results.emplace_back(recv, recv_counts[size_t(rank())] * elem, false, memory_);
    r = results.back().host.get();
  }
  WorkHandle h = inner_->reduce_scatter(s, r, recv_counts, dtype, opts);
  return std::make_unique<StagedWork>(std::move(h), std::move(results), std::move(inputs), memory_.copy);
}

WorkHandle StagedCommunicator::allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                                         const CollectiveOptions& opts) {
  use_device(device_);
  const bool send_dev = memory_.is_device(send), recv_dev = memory_.is_device(recv);
  if (!send_dev && !recv_dev) return inner_->allgather(send, recv, counts, dtype, opts);
  const size_t elem = dtype_size(dtype), all = total(counts) * elem;
  size_t my_offset = 0;
  for (int q = 0; q < rank(); ++q) my_offset += counts[size_t(q)] * elem;
  const char* recv_bytes = static_cast<const char*>(recv);
  const bool in_place = send == recv_bytes + my_offset;
  std::vector<Stage> inputs, results;
  void* r = recv;
  if (recv_dev) {
    // In place, this rank's own block is the input: fill the whole stage so the block is there.
    results.emplace_back(recv, all, in_place, memory_);
    r = results.back().host.get();
  }
  const void* s = send;
  if (in_place && recv_dev) {
    s = static_cast<char*>(r) + my_offset;
  } else if (send_dev) {
    inputs.emplace_back(send, counts[size_t(rank())] * elem, true, memory_);
    s = inputs.back().host.get();
  }
  WorkHandle h = inner_->allgather(s, r, counts, dtype, opts);
  return std::make_unique<StagedWork>(std::move(h), std::move(results), std::move(inputs), memory_.copy);
}

WorkHandle StagedCommunicator::broadcast(void* data, size_t count, DType dtype, int root,
                                         const CollectiveOptions& opts) {
  use_device(device_);
  if (!memory_.is_device(data)) return inner_->broadcast(data, count, dtype, root, opts);
  std::vector<Stage> results;
  results.emplace_back(data, count * dtype_size(dtype), rank() == root, memory_);
  WorkHandle h = inner_->broadcast(results.back().host.get(), count, dtype, root, opts);
  return std::make_unique<StagedWork>(std::move(h), std::move(results), std::vector<Stage>{}, memory_.copy);
}

WorkHandle StagedCommunicator::alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                                        const CollectiveOptions& opts) {
  use_device(device_);
  const bool send_dev = memory_.is_device(send), recv_dev = memory_.is_device(recv);
  if (!send_dev && !recv_dev) return inner_->alltoall(send, recv, count_per_rank, dtype, opts);
  const size_t bytes = count_per_rank * size_t(size()) * dtype_size(dtype);
  std::vector<Stage> inputs, results;
  const void* s = send;
  void* r = recv;
  if (send_dev) {
    inputs.emplace_back(send, bytes, true, memory_);
    s = inputs.back().host.get();
  }
  if (recv_dev) {
    results.emplace_back(recv, bytes, false, memory_);
    r = results.back().host.get();
  }
  WorkHandle h = inner_->alltoall(s, r, count_per_rank, dtype, opts);
  return std::make_unique<StagedWork>(std::move(h), std::move(results), std::move(inputs), memory_.copy);
}

WorkHandle StagedCommunicator::send(const void* data, size_t count, DType dtype, int peer, int tag) {
  use_device(device_);
  if (!memory_.is_device(data)) return inner_->send(data, count, dtype, peer, tag);
  std::vector<Stage> inputs;
  inputs.emplace_back(data, count * dtype_size(dtype), true, memory_);
  WorkHandle h = inner_->send(inputs.back().host.get(), count, dtype, peer, tag);
  return std::make_unique<StagedWork>(std::move(h), std::vector<Stage>{}, std::move(inputs), memory_.copy);
}

WorkHandle StagedCommunicator::recv(void* data, size_t count, DType dtype, int peer, int tag) {
  use_device(device_);
  if (!memory_.is_device(data)) return inner_->recv(data, count, dtype, peer, tag);
  std::vector<Stage> results;
  results.emplace_back(data, count * dtype_size(dtype), false, memory_);
  WorkHandle h = inner_->recv(results.back().host.get(), count, dtype, peer, tag);
  return std::make_unique<StagedWork>(std::move(h), std::move(results), std::vector<Stage>{}, memory_.copy);
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key, const std::string& name) {
  std::unique_ptr<Communicator> part = inner_->split(color, key, name);
  if (!part) return nullptr;
  return std::make_unique<StagedCommunicator>(std::move(part), memory_);
}

void stage_device_buffers(ProcessGroups& groups) {
  for (std::unique_ptr<Communicator>* g : {&groups.world, &groups.tp, &groups.pp, &groups.dp, &groups.embedding})
    if (*g) *g = std::make_unique<StagedCommunicator>(std::move(*g));
}

}  // namespace feast
