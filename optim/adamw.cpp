#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace feast {

AdamW::AdamW(Backend& backend, const LocalTable& table, const TensorView& params, size_t begin, size_t end,
             const AdamWConfig& config, MasterWeights master, Backend* host)
    : backend_(backend),
      host_(host),
      table_(table),
      config_(config),
      begin_(begin),
      end_(end),
      params_(params.slice(begin, end - begin)),
      m_(host ? backend.allocate_host(DType::kFloat32, end - begin) : backend.allocate(DType::kFloat32, end - begin)),
      v_(host ? backend.allocate_host(DType::kFloat32, end - begin) : backend.allocate(DType::kFloat32, end - begin)) {
  FEAST_CHECK(!host || host->device().is_cpu(), "offloaded optimizer state is updated by a CPU backend, not "
                                                     << host->name());
  for (const LocalParam& p : table.params()) {
    const size_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (b >= e) continue;
    const float wd = p.spec->weight_decay ? static_cast<float>(config.weight_decay) : 0.0f;
    if (!runs_.empty() && runs_.back().weight_decay == wd && runs_.back().end == b - begin) {
      runs_.back().end = e - begin;
    } else {
      runs_.push_back({b - begin, e - begin, wd});
    }
  }
  if (host) {
    master_copy_ = backend.allocate_host(DType::kFloat32, end - begin);
    host_grads_ = backend.allocate_host(DType::kFloat32, end - begin);
    master_ = master_copy_.view();
    offload_ = std::make_unique<OffloadPipeline>(backend, params_, master_, host_grads_.view());
  } else if (master == MasterWeights::kShareWhenFloat32 && params.dtype == DType::kFloat32) {
    master_ = params_;
  } else {
    master_copy_ = backend.allocate(DType::kFloat32, end - begin);
    master_ = master_copy_.view();
  }
  if (separate_master()) master_from_params();
}

void AdamW::master_from_params() {
  offload_ ? offload_->master_from_params() : backend_.cast(master_, params_);
}

void AdamW::reload_master_from_params() {
  if (separate_master()) master_from_params();
}

float clip_factor(double norm, double max_norm) {
  if (max_norm > 0 && norm > max_norm) return static_cast<float>(max_norm / (norm + 1e-6));
  return 1.0f;
}

void AdamW::step(const TensorView& grads, int64_t t, double lr, double grad_norm) {
  FEAST_CHECK(grads.numel == end_ - begin_, "AdamW over " << end_ - begin_ << " elements got " << grads.numel
                                                          << " gradients");
  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(config_.beta1, double(t)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(config_.beta2, double(t))));
  const float scale = clip_factor(grad_norm, config_.grad_clip);
  // Elements [begin, end) of the range, each run of one weight decay in one fused pass.
  auto update = [&](Backend& updater, const TensorView& g, size_t begin, size_t end) {
    for (const Run& r : runs_) {
      const size_t b = std::max(begin, r.begin), e = std::min(end, r.end);
      if (b >= e) continue;
      s.weight_decay = r.weight_decay;
      updater.adamw_step(master_.slice(b, e - b), m_.view().slice(b, e - b), v_.view().slice(b, e - b),
                         g.slice(b, e - b), s, scale);
    }
  };
  if (offload_) {
    offload_->run(grads, [&](size_t begin, size_t end) { update(*host_, host_grads_.view(), begin, end); });
    return;
  }
  update(backend_, grads, 0, end_ - begin_);
  if (separate_master()) backend_.cast(params_, master_);
}

std::vector<AdamW::TensorState> AdamW::tensor_states() const {
  if (offload_) offload_->wait();
  std::vector<TensorState> out;
  for (const LocalParam& p : table_.params()) {
    const size_t b = std::max(begin_, p.offset), e = std::min(end_, p.offset + p.numel);
    if (b >= e) continue;
    TensorState st;
    st.param = &p;
    st.local_begin = b - p.offset;
    st.local_end = e - p.offset;
    st.master = master_.slice(b - begin_, e - b);
    st.exp_avg = m_.view().slice(b - begin_, e - b);
    st.exp_avg_sq = v_.view().slice(b - begin_, e - b);
    out.push_back(st);
  }
  return out;
}

std::optional<AdamW::TensorState> AdamW::state_of(const std::string& name) const {
  for (const TensorState& st : tensor_states())
    if (st.param->spec->name == name) return st;
  return std::nullopt;
}

double counted_sum_of_squares(Backend& backend, const LocalTable& table, const TensorView& grads, size_t begin,
                              size_t end) {
  double total = 0;  // added in table order, as one tensor at a time would
  for (double s : counted_squares_per_tensor(backend, table, grads, begin, end)) total += s;
  return total;
}

std::vector<double> counted_squares_per_tensor(Backend& backend, const LocalTable& table, const TensorView& grads,
                                               size_t begin, size_t end) {
  // Every counted tensor's part of [begin, end) in one call: a GPU then waits once, not per tensor.
  std::vector<TensorView> parts;
  std::vector<size_t> slot;  // table index -> index into parts, or npos
  for (const LocalParam& p : table.params()) {
    const size_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (p.counts_in_norm && b < e) {
      slot.push_back(parts.size());
      parts.push_back(grads.slice(b - begin, e - b));
    } else {
      slot.push_back(std::string::npos);
    }
  }
  const std::vector<double> sums = backend.sums_of_squares(parts);
  std::vector<double> out;
  for (size_t i : slot) out.push_back(i == std::string::npos ? 0.0 : sums[i]);
  return out;
}

}  // namespace feast
