#include "trainer/train_loop.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "core/log.h"
#include "trainer/metrics.h"

namespace feast {

TrainSummary train(const Config& config, std::unique_ptr<Communicator> world, const TrainHooks& hooks) {
  const TrainingConfig& tc = config.training;
  TrainingRun run(config, std::move(world));

  std::optional<MetricsWriter> metrics;
  if (run.world().rank() == 0) {
    std::filesystem::create_directories(config.logging.dir);
    std::ofstream(config.logging.dir + "/config.toml") << to_toml(config);
    metrics.emplace(config.logging.dir + "/metrics.jsonl");
  }

  TrainSummary summary;
  double train_seconds = 0;
  while (run.state().step < tc.steps) {
    const StepResult r = run.step();
    train_seconds += r.timing.total;
    summary.timings.push_back(r.timing);
    if (hooks.after_step) hooks.after_step(run, r);

    StepMetrics mt;
    mt.step = run.state().step;
    mt.loss = r.loss;
    mt.lr = r.lr;
    mt.grad_norm = r.grad_norm;
    mt.ms_per_step = r.timing.total * 1e3;
    mt.tokens_per_s = double(run.tokens_per_step()) / r.timing.total;
    const bool last = mt.step == tc.steps;
    if (tc.eval_interval > 0 && (mt.step % tc.eval_interval == 0 || last)) mt.val_loss = run.validate();
    if (metrics) metrics->write(mt);
    if (mt.step % config.logging.interval == 0 || last || mt.step == 1 || mt.val_loss)
      log::info(format_progress(mt, tc.steps));
    summary.losses.push_back(r.loss);
    summary.grad_norms.push_back(r.grad_norm);
    summary.val_losses.push_back(mt.val_loss);
    summary.final_loss = r.loss;
    if (mt.val_loss) summary.final_val_loss = mt.val_loss;
  }
  summary.steps = tc.steps;
  summary.tokens_per_s = double(run.tokens_per_step()) * double(tc.steps) / train_seconds;
  if (hooks.at_end) hooks.at_end(run);
  return summary;
}

}  // namespace feast
