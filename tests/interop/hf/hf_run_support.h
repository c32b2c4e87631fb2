// What the Hugging Face tests under mpirun share: a directory every rank agrees on, a relative
// difference, a training run of this job's ranks with a model folder's weights imported, the
// fixtures' fine-tuning settings (AdamW at a constant rate, decay 0.1, clipping at 1, 5 steps)
// and the cached decoder generate builds over a folder.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/mpi_world.h"
#include "interop/hf/model_weights.h"
#include "model/architecture.h"
#include "model/kv_cache_decoder.h"
#include "tests/support/mpi_test_support.h"
#include "train/training_run.h"

namespace feast::testing {

// A fresh directory named after `name`, made by rank 0 and agreed on by every rank.
inline std::string shared_dir(const std::string& name) {
  char path[256] = {};
  if (world_rank() == 0) {
    std::snprintf(path, sizeof path, "%s",
                  (std::filesystem::temp_directory_path() / ("feast_hf_" + name + "_XXXXXX")).c_str());
    if (!mkdtemp(path)) std::abort();
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

inline double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// A run of `c` on this job's ranks with model.init_from's weights imported.
inline std::unique_ptr<TrainingRun> imported_run(const Config& c, RunPurpose purpose = RunPurpose::kTrain) {
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  const LayoutPlan plan = check_run(c, world->size(), purpose);
  auto run = std::make_unique<TrainingRun>(c, plan, std::move(world), purpose);
  run->import_initial_weights();
  return run;
}

// 5 steps of AdamW at a constant `lr` (betas 0.9, 0.95, eps 1e-8, decay 0.1, clipping at 1) on
// the window `data` holds, as the fixtures' scripts fine-tune.
inline std::vector<std::string> finetune_overrides(const std::string& data, const std::string& lr) {
  return {"data.train=\"" + data + "\"", "training.steps=5", "training.lr=" + lr, "training.min_lr=" + lr,
          "training.warmup_steps=0", "training.lr_schedule=\"constant\"", "training.weight_decay=0.1",
          "training.beta1=0.9", "training.beta2=0.95", "training.eps=1e-8", "training.grad_clip=1.0",
          "training.eval_interval=0"};
}

// trainer generate's key/value-cache decoder over model.init_from's weights, built as generate
// builds it.
inline KvCacheDecoder folder_decoder(const ModelConfig& model) {
  const ModelWeights weights(model, LoraSpec{}, 0, std::nullopt);
  const ParamTable table = decoder_param_table(model);
  return KvCacheDecoder(model, [&](const std::string& name, std::span<const int64_t>, float* out) {
    const std::vector<float> v = weights.tensor(table.at(name));
    std::copy(v.begin(), v.end(), out);
  });
}

}  // namespace feast::testing
