#include "parallel/optimizer.h"

#include <cmath>

#include "model/cpu/adamw.h"

namespace feast {

AdamW::AdamW(const ParamTable& table, const AdamWConfig& config)
    : config_(config), numel_(table.total_numel()), m_(numel_), v_(numel_) {
  for (const ParamSpec& s : table.specs()) {
    const float wd = s.weight_decay ? static_cast<float>(config.weight_decay) : 0.0f;
    if (!runs_.empty() && runs_.back().weight_decay == wd && runs_.back().end == s.offset) {
      runs_.back().end = s.offset + s.numel;
    } else {
      runs_.push_back({s.offset, s.offset + s.numel, wd});
    }
  }
}

double AdamW::step(float* params, const float* grads, int64_t t, double lr) {
  const double norm = std::sqrt(cpu::sum_of_squares(grads, numel_));
  // torch.nn.utils.clip_grad_norm_'s factor, so clipped runs match the reference.
  float scale = 1.0f;
  if (config_.grad_clip > 0 && norm > config_.grad_clip)
    scale = static_cast<float>(config_.grad_clip / (norm + 1e-6));
  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(config_.beta1, double(t)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(config_.beta2, double(t))));
  for (const Run& r : runs_) {
    s.weight_decay = r.weight_decay;
    cpu::adamw_step(params + r.begin, m_.data() + r.begin, v_.data() + r.begin, grads + r.begin,
                    r.end - r.begin, s, scale);
  }
  return norm;
}

}  // namespace feast
