// Per-step metrics: one JSON object per line in <logging.dir>/metrics.jsonl (flushed every
// line, so a crashed run keeps what it logged), and the human progress line on stdout.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "train/metrics/moe_report.h"
#include "train/metrics/run_summary.h"

namespace feast {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps taken
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double ms_per_step = 0;
  std::optional<double> val_loss;
  TimeSplit split;   // seconds, averaged over ranks; its parts sum to ms_per_step / 1000
  double mfu = 0;    // fraction of the job's peak
  std::string peak_kind;  // which peak MFU divides by, for the progress line (DevicePeak::kind)
  double elapsed_s = 0;  // wall time since training began (evaluations and checkpoints included)
  double eta_s = -1;     // estimated wall time to training.steps; < 0 = unknown
  std::optional<MoeStepReport> moe;  // a mixture-of-experts model's
};

// The load of the most unevenly loaded MoE block: its busiest expert's choices over the mean
// expert's (1 = perfectly balanced; n_experts = every token chose one expert).
double expert_imbalance(const MoeStepReport& moe);

class MetricsWriter {
 public:
  // Opens path, truncating it; or, with `resume_step`, keeps its lines of steps up to that one
  // and appends after them (a resumed run continues the file of the run it resumes). Throws
  // feast::Error naming the path when it cannot be written.
  explicit MetricsWriter(const std::string& path, std::optional<int64_t> resume_step = std::nullopt);
  void write(const StepMetrics& m);

 private:
  std::string path_;
  std::ofstream out_;
};

// "step   12/300 | loss 2.3456 | lr 1.00e-03 | grad norm 0.812 | 1234 tok/s | MFU 12.3% | 56.7 ms |
// 0:07 elapsed, ETA 2:51"
std::string format_progress(const StepMetrics& m, int64_t total_steps);

// Seconds as "m:ss" or "h:mm:ss".
std::string format_duration(double seconds);

}  // namespace feast
