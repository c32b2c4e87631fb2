#include "backend/offload_pipeline.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace feast {

size_t offload_chunk_elements(size_t numel) {
  // Four chunks let the three phases overlap; below 4096 elements a chunk's copy is all
  // latency, and above 8 Mi the pipeline's fill and drain cost more than they save.
  constexpr size_t kSmallest = 4096, kLargest = size_t{8} << 20;
  return std::max<size_t>(1, std::min(numel, std::clamp((numel + 3) / 4, kSmallest, kLargest)));
}

size_t offload_device_bytes(size_t numel, DType params_dtype) {
  return params_dtype == DType::kFloat32 ? 0 : 2 * offload_chunk_elements(numel) * sizeof(float);
}

OffloadPipeline::OffloadPipeline(Backend& device, const TensorView& params, const TensorView& host_master,
                                 const TensorView& host_grads)
    : device_(device),
      params_(params),
      master_(host_master),
      host_grads_(host_grads),
      chunk_(offload_chunk_elements(params.numel)),
      chunks_((params.numel + chunk_ - 1) / chunk_),
      to_host_(device.create_stream()),
      to_device_(device.create_stream()),
      device_ready_(device.create_event()),
      back_(device.create_event()) {
  FEAST_CHECK(host_master.numel == params.numel && host_grads.numel == params.numel,
              "offloaded optimizer: " << params.numel << " parameters, " << host_master.numel
                                      << " master weights and " << host_grads.numel << " gradients on the host");
  FEAST_CHECK(host_master.dtype == DType::kFloat32 && host_grads.dtype == DType::kFloat32,
              "offloaded optimizer: the host's master weights and gradients are float32");
  if (casts()) scratch_ = device.allocate(DType::kFloat32, 2 * chunk_);
  for (size_t k = 0; k < chunks_; ++k) landed_.push_back(device.create_event());
  for (int s = 0; s < 2; ++s) {
    filled_[s] = device.create_event();
    drained_[s] = device.create_event();
  }
}

OffloadPipeline::~OffloadPipeline() {
  try {
    to_host_->synchronize();
    to_device_->synchronize();
  } catch (...) {  // a device that failed already: nothing more can be done here
  }
}

void OffloadPipeline::start_gradients(const TensorView& device_grads) {
  FEAST_CHECK(device_grads.numel == params_.numel && device_grads.dtype == DType::kFloat32,
              "offloaded optimizer: " << device_grads.numel << " " << dtype_name(device_grads.dtype)
                                      << " gradients for " << params_.numel << " float32 ones");
  // Behind the device's work so far, which waited for the last step's weights (run's end): so
  // once a chunk's gradients have landed, the host may write its master weights again.
  device_ready_->record(device_.stream());
  device_ready_->block(*to_host_);
  for (size_t k = 0; k < chunks_; ++k) {
    const size_t begin = k * chunk_, n = std::min(chunk_, params_.numel - begin);
    device_.copy_async(host_grads_.slice(begin, n), device_grads.slice(begin, n), *to_host_);
    landed_[k]->record(*to_host_);
  }
  started_from_ = device_grads.data;
}

void OffloadPipeline::run(const TensorView& device_grads,
                          const std::function<void(size_t begin, size_t end)>& update) {
  if (started_from_ != device_grads.data) start_gradients(device_grads);
  started_from_ = nullptr;
  times_ = {};
  // The weights are written once the passes that read them are done (the gradients' copies
  // wait for the same point).
  device_ready_->block(*to_device_);
  for (size_t k = 0; k < chunks_; ++k) {
    const size_t begin = k * chunk_, n = std::min(chunk_, params_.numel - begin);
    Timer waiting;
    landed_[k]->synchronize();
    times_.waited += waiting.seconds();
    Timer updating;
    update(begin, begin + n);
    times_.update += updating.seconds();
    if (!casts()) {
      device_.copy_async(params_.slice(begin, n), master_.slice(begin, n), *to_device_);
      continue;
    }
    // Cast buffer k % 2: filled by the copy once the cast two chunks ago has read it, cast out
    // of on the device's stream once filled.
    const int s = int(k % 2);
    const TensorView buffer = scratch_.view().slice(size_t(s) * chunk_, n);
    drained_[s]->block(*to_device_);
    device_.copy_async(buffer, master_.slice(begin, n), *to_device_);
    filled_[s]->record(*to_device_);
    filled_[s]->block(device_.stream());
    device_.cast(params_.slice(begin, n), buffer);
    drained_[s]->record(device_.stream());
  }
  back_->record(*to_device_);
  back_->block(device_.stream());
}

void OffloadPipeline::wait() const { back_->synchronize(); }

void OffloadPipeline::master_from_params() {
  wait();
  cast_across(device_, master_, params_, scratch_.view());
}

}  // namespace feast
