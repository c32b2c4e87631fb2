#include "train/metrics/metrics.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace feast {

namespace {

// The lines of `path` that record steps up to `last_step`; lines that do not parse (a line cut
// short by a crash) are dropped.
std::string lines_up_to(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= last_step)
      kept += line + "\n";
  }
  return kept;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, std::optional<int64_t> resume_step) : path_(path) {
  if (resume_step) {
    // The kept history replaces the file atomically, so a crash now loses nothing.
    write_file_atomically(path, lines_up_to(path, *resume_step));
    out_.open(path, std::ios::app);
  } else {
    out_.open(path, std::ios::trunc);
  }
  if (!out_) throw Error(path + ": cannot write the metrics file; check that logging.dir is writable");
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},       {"loss", m.loss},
                      {"lr", m.lr},           {"grad_norm", m.grad_norm},
                      {"tokens_per_s", m.tokens_per_s}, {"ms_per_step", m.ms_per_step}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  j.update(split_json(m.split));
  j.update(reduction_json(m.split));
  j.update(offload_json(m.split));
  j["mfu"] = m.mfu;
  if (m.moe) {
    j["aux_loss"] = m.moe->aux_loss;
    j["z_loss"] = m.moe->z_loss;
    j["moe_dropped"] = m.moe->dropped;
    j["expert_load"] = m.moe->load;
    j["expert_imbalance"] = expert_imbalance(*m.moe);
  }
  out_ << j.dump() << '\n';
  out_.flush();
  if (!out_) throw Error(path_ + ": writing metrics failed (disk full?)");
}

double expert_imbalance(const MoeStepReport& moe) {
  double worst = 0;
  for (const std::vector<double>& layer : moe.load) {
    double total = 0, most = 0;
    for (double x : layer) {
      total += x;
      most = std::max(most, x);
    }
    if (total > 0) worst = std::max(worst, most / (total / double(layer.size())));
  }
  return worst;
}

std::string format_duration(double seconds) {
  const long long t = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

std::string format_progress(const StepMetrics& m, int64_t total_steps) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %6lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | MFU %.1f%%%s | %.1f ms | %s elapsed",
                static_cast<long long>(m.step), static_cast<long long>(total_steps), m.loss, m.lr, m.grad_norm,
                m.tokens_per_s, 100.0 * m.mfu, m.peak_kind.empty() ? "" : (" of " + m.peak_kind).c_str(),
                m.ms_per_step, format_duration(m.elapsed_s).c_str());
  std::string s = buf;
  if (m.eta_s >= 0 && m.step < total_steps) s += ", ETA " + format_duration(m.eta_s);
  if (m.moe) {
    std::snprintf(buf, sizeof buf, " | aux %.4f | experts' load max/mean %.2f", m.moe->aux_loss, expert_imbalance(*m.moe));
    s += buf;
  }
  if (m.val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.4f", *m.val_loss);
    s += buf;
  }
  return s;
}

}  // namespace feast
