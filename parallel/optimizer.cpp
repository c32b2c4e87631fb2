#include "parallel/optimizer.h"

#include <algorithm>
#include <cmath>

#include "model/cpu/adamw.h"

namespace feast {

AdamW::AdamW(const LocalTable& table, size_t begin, size_t end, const AdamWConfig& config)
    : config_(config), begin_(begin), end_(end), m_(end - begin), v_(end - begin) {
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
}

float clip_factor(double norm, double max_norm) {
  if (max_norm > 0 && norm > max_norm) return static_cast<float>(max_norm / (norm + 1e-6));
  return 1.0f;
}

void AdamW::step(float* params, const float* grads, int64_t t, double lr, double grad_norm) {
  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(config_.beta1, double(t)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(config_.beta2, double(t))));
  const float scale = clip_factor(grad_norm, config_.grad_clip);
  for (const Run& r : runs_) {
    s.weight_decay = r.weight_decay;
    cpu::adamw_step(params + r.begin, m_.data() + r.begin, v_.data() + r.begin, grads + r.begin, r.end - r.begin, s,
                    scale);
  }
}

double counted_sum_of_squares(const LocalTable& table, const float* grads, size_t begin, size_t end) {
  double total = 0;
  for (const LocalParam& p : table.params()) {
    if (!p.counts_in_norm) continue;
    const size_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel);
    if (b < e) total += cpu::sum_of_squares(grads + (b - begin), e - b);
  }
  return total;
}

}  // namespace feast
