// The copies of an offloaded optimizer step (parallel.offload_optimizer), pipelined in chunks
// as ZeRO-Offload's swaps are: every chunk's gradients go to the host on a stream of their own,
// the host updates chunk k as soon as its gradients have landed, and chunk k's weights go back
// on another stream (through the device's cast buffers when the compute parameters are of a
// lower precision) while the host updates chunk k + 1. A step then costs about the slowest of
// the three (gradients out, host update, weights back), not their sum. run() does not wait for
// the last chunks' weights: the device's stream does, so nothing on the device reads a weight
// before it is back, and the host goes on to what follows while they travel: the next step
// under ZeRO 0 and 3 (its data, its launches), or under ZeRO 1 and 2 at dp > 1 the all-gather
// of the updated shards, which does wait for them.
//
// On the CPU every copy is done when it is enqueued and the same code runs in order: chunking
// changes no bit, since the update is element-wise. The update itself is the caller's
// (optim/adamw.h runs AdamW on a CPU backend); this is only the copies and their order.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/stream.h"
#include "core/tensor.h"

namespace feast {

// Elements per chunk of a range of `numel` elements: at least four chunks where the range is
// large enough to be worth it, and at most 8 Mi elements (32 MiB of float32) each.
size_t offload_chunk_elements(size_t numel);
// Device memory the pipeline keeps for a range of `numel` elements whose compute parameters are
// of `params_dtype`: two float32 cast buffers of a chunk each (none for float32 parameters).
size_t offload_device_bytes(size_t numel, DType params_dtype);

// The host's part of one step: how long it updated and how long it waited for gradients.
struct OffloadTimes {
  double update = 0;
  double waited = 0;
};

class OffloadPipeline {
 public:
  // device: the compute backend; params: the compute parameters of the range (on the device);
  // host_master, host_grads: float32 host memory (allocate_host) of as many elements.
  OffloadPipeline(Backend& device, const TensorView& params, const TensorView& host_master,
                  const TensorView& host_grads);
  OffloadPipeline(const OffloadPipeline&) = delete;
  OffloadPipeline& operator=(const OffloadPipeline&) = delete;
  // Copies still in flight (a step that threw) must not outlive the buffers they use.
  ~OffloadPipeline();

  // Enqueues every chunk's gradients (float32, on the device) to the host copy, behind the
  // device's work so far. A step may start them early (while the gradient norm is reduced) and
  // then skip its update (discard_gradients): the copies land where nothing reads them.
  void start_gradients(const TensorView& device_grads);
  // The started copies will not be used: the next run starts its own.
  void discard_gradients() { started_from_ = nullptr; }
  // For each chunk in order: waits for its gradients (starting them first unless
  // start_gradients did, from these same gradients), calls update(begin, end) on the host over the host copies, and
  // enqueues the chunk's weights back (params = master, cast to the parameters' dtype). Returns
  // once every chunk is updated and its copy queued; the device's stream waits for the copies.
  void run(const TensorView& device_grads, const std::function<void(size_t begin, size_t end)>& update);
  // Blocks until the last step's copies are done: before the host writes what they read.
  void wait() const;
  // master = params now, the whole range (the parameters were written from outside: imported
  // weights), through the cast buffers; blocking.
  void master_from_params();

  size_t device_bytes() const { return scratch_.bytes(); }
  OffloadTimes last_times() const { return times_; }

 private:
  Backend& device_;
  TensorView params_, master_, host_grads_;
  size_t chunk_, chunks_;
  // The parameters are not float32: the weights go back through scratch_.
  bool casts() const { return params_.dtype != DType::kFloat32; }
  Tensor scratch_;  // casts(): two float32 buffers of chunk_ elements, used in turn
  std::unique_ptr<Stream> to_host_, to_device_;
  std::unique_ptr<Event> device_ready_;            // the device's work before the step's copies
  std::vector<std::unique_ptr<Event>> landed_;     // per chunk: its gradients are on the host
  std::unique_ptr<Event> filled_[2], drained_[2];  // per cast buffer: the weights are in it; cast out of it
  std::unique_ptr<Event> back_;                    // the last weights copy of the step
  const void* started_from_ = nullptr;  // the gradients start_gradients copies, until run
  OffloadTimes times_;
};

}  // namespace feast
