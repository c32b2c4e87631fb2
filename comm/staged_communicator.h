// Device buffers over a communicator that moves host memory (MPI here): a decorator that copies
// a GPU buffer into pinned host memory, runs the wrapped operation on the copy, and copies the
// result back when the operation is waited on. Host buffers pass straight through, so the same
// groups carry the trainer's host-side reductions (losses, norms) and the model's GPU tensors.
// It is the path for machines without NCCL and for several ranks sharing one GPU (which NCCL
// refuses); every copy waits for the device, so it is correct, not fast. Every operation first makes the device current that was
// current when the communicator was made, so a helper thread (the checkpoint writer's) does not
// open a context on GPU 0.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/device_memory.h"

namespace feast {

// Pinned host memory for a stage (core/device_memory.h's PinnedBuffer, from its cache); the
// memory lives while any copy of the pointer does.
std::shared_ptr<void> pinned_host_buffer(size_t bytes);

// What the decorator needs of the device: telling a device buffer from a host one, copying
// between them, and host memory for the copies. The real device's by default; a test
// substitutes a fake device (and plain host memory, since pinning needs a GPU) so the staging
// runs, and is checked, on machines without one.
struct DeviceMemoryOps {
  std::function<bool(const void*)> is_device = is_device_memory;
  std::function<void(void* dst, const void* src, size_t bytes)> copy = copy_memory;
  std::function<std::shared_ptr<void>(size_t bytes)> host_buffer = pinned_host_buffer;
};

class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(std::unique_ptr<Communicator> inner, DeviceMemoryOps memory = {});

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  WorkHandle allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts = {}) override;
  WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts, DType dtype,
                            const CollectiveOptions& opts = {}) override;
  WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                       const CollectiveOptions& opts = {}) override;
  WorkHandle broadcast(void* data, size_t count, DType dtype, int root, const CollectiveOptions& opts = {}) override;
  WorkHandle alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                      const CollectiveOptions& opts = {}) override;
  WorkHandle alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t> recv_counts, DType dtype, const CollectiveOptions& opts = {}) override;
  WorkHandle send(const void* data, size_t count, DType dtype, int peer, int tag) override;
  WorkHandle recv(void* data, size_t count, DType dtype, int peer, int tag) override;
  void barrier() override { inner_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  Communicator& inner() { return *inner_; }
  const Communicator& inner() const { return *inner_; }

 private:
  std::unique_ptr<Communicator> inner_;
  DeviceMemoryOps memory_;  // also given to the communicators split() makes
  int device_ = current_device();
};

// Wraps every group of `groups` (world included) in a StagedCommunicator.
struct ProcessGroups;
void stage_device_buffers(ProcessGroups& groups);

}  // namespace feast
