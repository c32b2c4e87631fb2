// AdamW over one contiguous range of a stage's flat buffer: the whole buffer (ZeRO 0) or this
// data-parallel rank's shard (ZeRO 1 and 2). It owns the optimizer state for that range only,
// so sharding divides optimizer memory by dp: the float32 master weights and both moments. When
// the compute parameters are float32 (the CPU) the master weights are the parameters themselves
// (no copy, bit-for-bit the same update); otherwise (bf16 on a GPU) it keeps a float32 master
// copy and refreshes the compute parameters from it after each update. Weight decay follows the
// parameter table (matrices only); clipping uses the global norm the caller computes.
//
// Offloaded (parallel.offload_optimizer), the master weights and both moments live in host
// memory (the compute backend's allocate_host: pinned on a GPU) and a CPU backend updates them:
// each step copies the range's gradients to the host, updates there, and copies the weights
// back (cast to the compute dtype on the device), the three pipelined chunk by chunk
// (backend/offload_pipeline.h). The master copy is then always separate; on the CPU the same
// kernel runs on the same values, so the results are those of the optimizer that is not
// offloaded, to the bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "backend/backend.h"
#include "model/parameters.h"
#include "backend/offload_pipeline.h"

namespace feast {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // applied to tensors the table marks for decay (matrices)
  double grad_clip = 1.0;     // max global gradient norm; 0 disables clipping
};

enum class MasterWeights {
  kShareWhenFloat32,  // float32 compute parameters are the master weights
  kSeparate,          // always a float32 copy (the only choice for lower-precision parameters)
};

class AdamW {
 public:
  // Updates flat elements [begin, end) of `params` (a stage's compute parameters, laid out by
  // `table`).
  // host: the CPU backend that updates offloaded state; null keeps the state on `backend`.
  AdamW(Backend& backend, const LocalTable& table, const TensorView& params, size_t begin, size_t end,
        const AdamWConfig& config, MasterWeights master = MasterWeights::kShareWhenFloat32, Backend* host = nullptr);

  // One update at step t (1-based: the bias corrections use it) with learning rate lr, given
  // the global gradient norm (before clipping); grads (float32) hold elements [begin, end).
  // Offloaded, the device's stream waits for the weights to come back; the host does not.
  void step(const TensorView& grads, int64_t t, double lr, double grad_norm);
  // Offloaded: starts copying the step's final gradients to the host, so that they travel
  // while the gradient norm is reduced (step() starts them itself otherwise). Else nothing.
  void start_gradient_copies(const TensorView& grads) {
    if (offload_) offload_->start_gradients(grads);
  }
  // The step whose copies started is skipped: the next step copies its own gradients.
  void discard_gradient_copies() {
    if (offload_) offload_->discard_gradients();
  }
  // Offloaded: the host's part of the last step (its update, its waits for gradients).
  OffloadTimes offload_times() const { return offload_ ? offload_->last_times() : OffloadTimes{}; }

  // The parameters were replaced from outside (imported weights): the master copy, when there is
  // one, takes them again.
  void reload_master_from_params();
  // The same from float32 values of the whole flat buffer, for weights that had more precision
  // than the compute copy keeps (a bf16 run importing fp32 files).
  void load_master(const TensorView& flat_float32) {
    if (offload_) offload_->wait();
    if (separate_master()) backend_.copy(master_, flat_float32.slice(begin_, end_ - begin_));
  }

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  bool separate_master() const { return static_cast<bool>(master_copy_.data()); }
  bool offloaded() const { return host_ != nullptr; }
  // Bytes of optimizer state on the compute device: both moments, and the master copy when
  // there is one (0 when offloaded, but for the device's cast buffers).
  size_t state_bytes() const {
    return offloaded() ? offload_->device_bytes() : m_.bytes() + v_.bytes() + master_copy_.bytes();
  }
  // Bytes in host memory when offloaded: the state and the gradients' host copy.
  size_t offloaded_bytes() const {
    return offloaded() ? m_.bytes() + v_.bytes() + master_copy_.bytes() + host_grads_.bytes() : 0;
  }

  // The state of one local tensor's elements that fall in [begin, end): elements
  // [local_begin, local_end) of the tensor (LocalParam::logical_slices maps them to the logical
  // tensor), and its float32 master weights and moments (offloaded: once the last step's copies
  // are done, so they may be written).
  struct TensorState {
    const LocalParam* param = nullptr;
    size_t local_begin = 0, local_end = 0;
    TensorView master, exp_avg, exp_avg_sq;
  };
  std::vector<TensorState> tensor_states() const;
  // The state of the tensor stored under `name` (a tied copy is stored under its own name), or
  // nothing when no element of it is in this range.
  std::optional<TensorState> state_of(const std::string& name) const;

 private:
  // A contiguous piece of the range that shares one weight-decay value.
  struct Run {
    size_t begin, end;  // relative to begin_
    float weight_decay;
  };
  // master_ = params_ (as float32, through the device's cast buffers when they are not).
  void master_from_params();

  Backend& backend_;
  Backend* host_;  // updates offloaded state; null when not offloaded
  const LocalTable& table_;
  AdamWConfig config_;
  size_t begin_, end_;
  std::vector<Run> runs_;
  TensorView params_;   // the compute parameters of [begin, end)
  TensorView master_;   // float32 master weights of [begin, end): params_ or master_copy_
  Tensor master_copy_;
  Tensor m_, v_;
  Tensor host_grads_;  // offloaded: the range's gradients copied to the host
  std::unique_ptr<OffloadPipeline> offload_;
};

// Sum of squared gradients over flat elements [begin, end) of tensors whose
// LocalParam::counts_in_norm is set, so that summing it over all ranks of the job counts every
// logical element once. grads hold elements [begin, end).
double counted_sum_of_squares(Backend& backend, const LocalTable& table, const TensorView& grads, size_t begin,
                              size_t end);

// The same per tensor: element i is the counted sum of squares of table.params()[i] within
// [begin, end) (0 for tensors that do not count). Summed over the job, each logical tensor's
// squared gradient norm.
std::vector<double> counted_squares_per_tensor(Backend& backend, const LocalTable& table, const TensorView& grads,
                                               size_t begin, size_t end);

// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6) when the norm exceeds it.
float clip_factor(double norm, double max_norm);

}  // namespace feast
