#include "trainer/train_loop.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "model/gpt2.h"
#include "parallel/optimizer.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"

namespace feast {
namespace {

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

// Opens a split, naming the config key that chose it when anything is wrong.
Dataset open_split(const Config& config, const std::string& key, const std::string& pattern) {
  try {
    Dataset d(pattern);
    d.check_vocab(config.model.vocab_size);
    return d;
  } catch (const DataError& e) {
    throw DataError(std::string(e.what()) + " [" + key + " set at " + config.where(key) + "]");
  }
}

// Mean loss over eval_batches fixed validation batches.
double evaluate(GPT2& model, const ValSampler& val, const Config& config, std::vector<int32_t>& x,
                std::vector<int32_t>& y) {
  const int B = config.parallel.micro_batch_size, T = config.training.seq_len;
  double sum = 0;
  for (int b = 0; b < config.training.eval_batches; ++b) {
    val.fill(b, B, x.data(), y.data());
    sum += model.evaluate(x.data(), y.data(), B, T);
  }
  return sum / config.training.eval_batches;
}

}  // namespace

TrainSummary train(const Config& config) {
  const TrainingConfig& tc = config.training;
  if (config.data.train.empty())
    throw ConfigError("data.train is not set: name the training shards in [data] train = \"...\" or with "
                      "--set data.train=PATH (make them with `trainer prepare-data`)");
  if (tc.device != "cpu")
    throw ConfigError(config.where("training.device") + ": training.device = \"" + tc.device +
                      "\" is not available in this build yet; use \"cpu\"");
  if (config.checkpoint.interval > 0)
    throw ConfigError(config.where("checkpoint.interval") +
                      ": checkpoint.interval > 0, but checkpoints are not built yet and a run that "
                      "believes it saves would lose its work; set checkpoint.interval = 0");
  if (tc.threads > 0) omp_set_num_threads(tc.threads);

  // Everything that can be wrong with the data is found before the model is allocated.
  const Dataset train_data = open_split(config, "data.train", config.data.train);
  const TrainSampler sampler(train_data, tc.seed, tc.seq_len);
  std::optional<Dataset> val_data;
  std::optional<ValSampler> val_sampler;
  if (!config.data.val.empty()) {
    val_data.emplace(open_split(config, "data.val", config.data.val));
    val_sampler.emplace(*val_data, tc.seq_len);
  }
  std::filesystem::create_directories(config.logging.dir);
  {
    std::ofstream resolved(config.logging.dir + "/config.toml");
    resolved << to_toml(config);
  }
  MetricsWriter metrics(config.logging.dir + "/metrics.jsonl");

  const int B = config.parallel.micro_batch_size, T = tc.seq_len;
  const int micro_batches = config.parallel.num_micro_batches;
  GPT2 model(config.model, B, T);
  init_parameters(model.table(), tc.seed, model.params());
  AdamWConfig oc;
  oc.beta1 = tc.beta1;
  oc.beta2 = tc.beta2;
  oc.eps = tc.eps;
  oc.weight_decay = tc.weight_decay;
  oc.grad_clip = tc.grad_clip;
  AdamW optimizer(model.table(), oc);

  const int64_t tokens_per_step = int64_t{B} * T * micro_batches;
  log::info("data: train " + std::to_string(train_data.total_tokens()) + " tokens in " +
            std::to_string(train_data.num_shards()) + " shard(s)" +
            (val_data ? ", val " + std::to_string(val_data->total_tokens()) + " tokens" : ", no validation"));
  log::info("model: " + std::to_string(model.num_params()) + " parameters (vocabulary padded to " +
            std::to_string(config.model.padded_vocab()) + "); batch " + std::to_string(micro_batches) + " x " +
            std::to_string(B) + " x " + std::to_string(T) + " = " + std::to_string(tokens_per_step) +
            " tokens/step; " + std::to_string(omp_get_max_threads()) + " threads");
  log::info("memory: parameters " + mib(model.num_params() * 4) + ", gradients " + mib(model.num_params() * 4) +
            ", optimizer " + mib(optimizer.state_bytes()) + ", activations " + mib(model.activation_bytes()));

  std::vector<int32_t> x(size_t(B) * T), y(size_t(B) * T);
  const float loss_scale = 1.0f / float(tokens_per_step);
  TrainSummary summary;
  double train_seconds = 0;
  for (int64_t step = 0; step < tc.steps; ++step) {
    Timer timer;
    model.zero_grads();
    double loss = 0;
    for (int mb = 0; mb < micro_batches; ++mb) {
      sampler.fill(step, int64_t{mb} * B, B, x.data(), y.data());
      loss += model.forward_backward(x.data(), y.data(), B, T, loss_scale);
    }
    loss /= micro_batches;
    const double lr = learning_rate(tc, step);
    const double grad_norm = optimizer.step(model.params(), model.grads(), step + 1, lr);
    const double sec = timer.seconds();
    train_seconds += sec;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm))
      throw Error("step " + std::to_string(step + 1) + ": loss " + std::to_string(loss) + ", grad norm " +
                  std::to_string(grad_norm) + " is not finite; lower training.lr or raise training.warmup_steps");

    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.ms_per_step = sec * 1e3;
    m.tokens_per_s = double(tokens_per_step) / sec;
    const bool last = step + 1 == tc.steps;
    if (val_sampler && ((tc.eval_interval > 0 && m.step % tc.eval_interval == 0) || last))
      m.val_loss = evaluate(model, *val_sampler, config, x, y);
    metrics.write(m);
    if (m.step % config.logging.interval == 0 || last || m.step == 1 || m.val_loss)
      log::info(format_progress(m, tc.steps));
    summary.final_loss = loss;
    if (m.val_loss) summary.final_val_loss = m.val_loss;
  }
  summary.steps = tc.steps;
  summary.tokens_per_s = double(tokens_per_step) * double(tc.steps) / train_seconds;
  return summary;
}

}  // namespace feast
