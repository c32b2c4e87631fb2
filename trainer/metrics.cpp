#include "trainer/metrics.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace feast {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw Error(path + ": cannot write the metrics file; check that logging.dir is writable");
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},       {"loss", m.loss},
                      {"lr", m.lr},           {"grad_norm", m.grad_norm},
                      {"tokens_per_s", m.tokens_per_s}, {"ms_per_step", m.ms_per_step}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  out_ << j.dump() << '\n';
  out_.flush();
  if (!out_) throw Error(path_ + ": writing metrics failed (disk full?)");
}

std::string format_progress(const StepMetrics& m, int64_t total_steps) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %6lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | %.1f ms",
                static_cast<long long>(m.step), static_cast<long long>(total_steps), m.loss, m.lr,
                m.grad_norm, m.tokens_per_s, m.ms_per_step);
  std::string s = buf;
  if (m.val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.4f", *m.val_loss);
    s += buf;
  }
  return s;
}

}  // namespace feast
