#include "train/checkpointing.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "interop/hf/weights_fingerprint.h"
#include "optim/lr_schedule.h"
#include "comm/agreement.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

CheckpointMeta meta_of(TrainingRun& run, const Config& config) {
  const TrainingState& s = run.state();
  const ParallelLayout& layout = run.plan().layout;
  CheckpointMeta m;
  m.lora_base = run.base_fingerprint();
  m.step = s.step;
  m.tokens_seen = s.tokens_seen;
  m.seed = s.seed;
  m.data_step = s.data_step();
  m.lr_step = s.step;
  m.rng_seed = s.seed;
  m.skipped_steps = s.skipped_steps;
  m.config = to_toml(config);
  m.tp = layout.tp();
  m.pp = layout.pp();
  m.dp = layout.dp();
  m.cp = layout.cp();
  // ZeRO as it ran: with one rank to shard over, none.
  const int ep = run.plan().ep;
  m.zero_stage = run.plan().shard_ranks() > 1 ? config.parallel.zero_stage : 0;
  m.micro_batch_size = config.parallel.micro_batch_size;
  m.num_micro_batches = run.plan().micro_batches;
  m.global_batch = int64_t{m.dp} * m.num_micro_batches * m.micro_batch_size;
  m.layout = "tp" + std::to_string(m.tp) + " pp" + std::to_string(m.pp) + " dp" + std::to_string(m.dp) +
             (m.cp > 1 ? " cp" + std::to_string(m.cp) : "") + (ep > 1 ? " ep" + std::to_string(ep) : "") + " zero" +
             std::to_string(m.zero_stage) + ", " + std::to_string(m.num_micro_batches) + " micro-batch(es) of " +
             std::to_string(m.micro_batch_size) + " per dp rank";
  return m;
}

}  // namespace

std::vector<std::string> model_differences(const Config& config, const CheckpointMeta& meta, const std::string& path) {
  // Written by another tool, the file stores no config: the tensors' shapes decide.
  const std::optional<Config> saved = read_saved_config(meta.config, path + " (stored config)");
  if (!saved) return {};
  // The initialisation (random or imported) and the tokenizer's place do not matter once the
  // weights come from the checkpoint.
  std::vector<std::string> out;
  for (const KeyDifference& d : key_differences(*saved, config, [](const std::string& key) {
         return (key.starts_with("model.") && key != "model.init_std" && key != "model.init_from" &&
                 key != "model.tokenizer") ||
                key == "lora.rank" || key == "lora.alpha" || key == "lora.targets" || key == "lora.base_dtype" ||
                key == "lora.double_quant";
       }))
    out.push_back(d.key + ": " + d.theirs + " in the checkpoint, " + d.mine + " configured");
  return out;
}

bool may_resume(const Config& config) {
  return config.checkpoint.resume != "never" && (config.checkpoint.resume != "auto" || !config.checkpoint.dir.empty());
}

std::vector<std::string> checkpoint_candidates(const Config& config) {
  bool explicit_file = false;
  return checkpoint_candidates(config, explicit_file);
}

std::vector<std::string> checkpoint_candidates(const Config& config, bool& explicit_file) {
  const std::string& resume = config.checkpoint.resume;
  explicit_file = false;
  if (resume == "never") {
    const std::vector<std::string> old = CheckpointStore(config.checkpoint.dir).complete();
    if (!old.empty())
      log::info("checkpoint: warning: checkpoint.resume = \"never\", but " + config.checkpoint.dir + " holds " +
                std::to_string(old.size()) + " checkpoint(s) of an earlier run (newest " + old.front() +
                "); this run's saves replace those of the same steps and set later ones aside (*.superseded)");
    return {};
  }
  if (resume == "auto") return CheckpointStore(config.checkpoint.dir).complete();
  if (fs::is_directory(resume)) {
    // A directory named on purpose must hold something to resume: starting afresh there would
    // go unnoticed, and its saves would push the real checkpoints out.
    std::vector<std::string> found = CheckpointStore(resume).complete();
    if (found.empty())
      throw ConfigError(config.where("checkpoint.resume") + ": checkpoint.resume = \"" + resume +
                        "\" holds no complete checkpoint (step_*.h5); name the checkpoint directory itself, a "
                        "checkpoint file, \"auto\" or \"never\"");
    return found;
  }
  if (!fs::exists(resume))
    throw ConfigError(config.where("checkpoint.resume") + ": checkpoint.resume = \"" + resume +
                      "\": no such file or directory; name a checkpoint file, a checkpoint directory, \"auto\" or "
                      "\"never\"");
  explicit_file = true;
  return {resume};
}

namespace {

// A warning when the learning-rate schedule of `config` is not the one the checkpoint's run
// followed (training.steps raised to extend a finished run, say): the schedule is a function of
// the step and these keys, so the rate jumps at the resumed step. "" when they agree or the file
// stores no config.
std::string schedule_change(const Config& config, const CheckpointMeta& meta, const std::string& path, int64_t step) {
  const std::optional<Config> saved = read_saved_config(meta.config, path + " (stored config)");
  if (!saved) return "";
  std::vector<std::string> changed;
  for (const KeyDifference& d : key_differences(*saved, config, [](const std::string& key) {
         return key == "training.steps" || key == "training.lr" || key == "training.min_lr" ||
                key == "training.warmup_steps" || key == "training.lr_schedule";
       }))
    changed.push_back(d.key + " " + d.theirs + " in the checkpoint's run, " + d.mine + " here");
  if (changed.empty()) return "";
  const LrSchedule before = lr_schedule_of(saved->training), now = lr_schedule_of(config.training);
  char rates[200];
  if (step >= before.steps)  // the run that saved it had finished its schedule
    std::snprintf(rates, sizeof rates, "step %lld runs at lr %.3g, where that run's schedule ended at %.3g",
                  static_cast<long long>(step + 1), learning_rate(now, step), learning_rate(before, before.steps - 1));
  else
    std::snprintf(rates, sizeof rates, "step %lld runs at lr %.3g, where that run would have used %.3g",
                  static_cast<long long>(step + 1), learning_rate(now, step), learning_rate(before, step));
  std::string list;
  for (const std::string& c : changed) list += (list.empty() ? "" : "; ") + c;
  return "checkpoint: warning: the learning-rate schedule is not the one the checkpoint's run followed (" + list +
         "): it follows this config from here on, so " + rates + " (docs/config.md, training.steps)";
}

std::string join_lines(const std::vector<std::string>& lines, const std::string& separator = "\n") {
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) s += (i ? separator : "") + lines[i];
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find('\n', at);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace

std::string save_checkpoint(TrainingRun& run, const Config& config) {
  Timer timer;
  const CheckpointMeta meta = meta_of(run, config);
  const RankState st = run.rank_state();
  std::string path;
  try {
    path = CheckpointStore(config.checkpoint.dir)
               .save(run.world(), meta.step, config.checkpoint.keep,
                     [&](const std::string& tmp) { write_checkpoint(tmp, run.world(), st, meta); });
  } catch (const AgreedError&) {
    throw;
  } catch (const Error& e) {
    // The store's failures come alike on every rank: report once, every rank exits.
    throw AgreedError(std::string("saving the checkpoint of step ") + std::to_string(meta.step) + " failed: " + e.what(),
                      run.world().rank() == 0);
  }
  if (run.world().rank() == 0) {
    std::error_code ec;
    const double mib = double(fs::file_size(path, ec)) / (1024.0 * 1024.0);
    char buf[96];
    std::snprintf(buf, sizeof buf, " (%.1f MiB in %.2f s)", mib, timer.seconds());
    log::info("checkpoint: step " + std::to_string(meta.step) + " saved to " + path + buf);
  }
  return path;
}

CheckpointSaver::CheckpointSaver(TrainingRun& run, const Config& config) : run_(run), config_(config) {
  if (config.checkpoint.async)
    writer_ = std::make_unique<AsyncCheckpointWriter>(run.world().split(0, run.world().rank(), "checkpoint-writer"),
                                                      config.checkpoint.dir, config.checkpoint.keep);
}

CheckpointSaver::~CheckpointSaver() = default;

void CheckpointSaver::save(bool finish) {
  if (!writer_) {
    last_ = save_checkpoint(run_, config_);
    return;
  }
  Timer stall;
  writer_->begin(run_.rank_state(), meta_of(run_, config_), run_.world());
  if (finish) {
    last_ = writer_->wait(run_.world());
    return;
  }
  char took[64];
  std::snprintf(took, sizeof took, "%.3f s", stall.seconds());
  log::info("checkpoint: step " + std::to_string(run_.state().step) + " copied in " + took + "; writing it beside training");
}

std::optional<std::string> CheckpointSaver::finish() {
  if (writer_) {
    if (std::optional<std::string> p = writer_->wait(run_.world())) last_ = p;
  }
  return last_;
}

std::optional<CheckpointMeta> resume_from_checkpoint(TrainingRun& run, const Config& config) {
  Communicator& world = run.world();
  // Rank 0 decides which files to try, so every rank tries the same ones in the same order.
  std::string listing, error;
  bool explicit_file = false;
  if (world.rank() == 0) {
    try {
      listing = join_lines(checkpoint_candidates(config, explicit_file));
    } catch (const ConfigError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = config.where("checkpoint.resume") + ": listing the checkpoints failed: " + e.what();
    }
  }
  if (const auto e = first_error(world, error)) throw ConfigError(*e);
  int32_t explicit_flag = explicit_file ? 1 : 0;
  world.broadcast(&explicit_flag, 1, DType::kInt32, 0)->wait();
  explicit_file = explicit_flag != 0;
  const std::vector<std::string> files = split_lines(broadcast_string(world, listing, 0));
  if (files.empty()) {
    if (config.checkpoint.resume == "auto")
      log::info("checkpoint: none in " + config.checkpoint.dir +
                (run.purpose() == RunPurpose::kTrain ? "; starting fresh" : ""));
    return std::nullopt;
  }
  // Every rank must see the files rank 0 listed: otherwise each would fail to open them, and
  // they would look corrupt.
  std::string unseen;
  for (const std::string& path : files) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      unseen = path + " is listed by rank 0 but not visible on rank " + std::to_string(world.rank()) +
               "; put checkpoint.dir on a file system every node mounts (and use an absolute path)";
      break;
    }
  }
  agree_on_error(world, unseen);

  std::vector<std::string> failures, failed_paths;
  for (const std::string& path : files) {
    // The metadata, read by rank 0 and agreed on: a file whose attributes cannot be read is
    // corrupt like one whose data fails its checksum.
    std::string meta_error;
    CheckpointMeta meta;
    std::vector<std::string> differences;
    if (world.rank() == 0) {
      try {
        meta = read_checkpoint_meta(path);
        differences = model_differences(config, meta, path);
        const std::string base = lora_base_mismatch(meta.lora_base, run.base_fingerprint(), config.model.init_from);
        if (!base.empty()) differences.push_back(base);
        // The seed fixes the data order a resumed run continues; an evaluation reads no training data.
        if (run.purpose() == RunPurpose::kTrain && meta.seed != config.training.seed)
          differences.push_back("training.seed: " + std::to_string(meta.seed) + " in the checkpoint, " +
                                std::to_string(config.training.seed) + " configured (" +
                                config.where("training.seed") + "); a resumed run keeps the data order it began with");
      } catch (const CheckpointMismatch& e) {
        differences.push_back(e.what());
      } catch (const std::exception& e) {  // also a std::bad_alloc from a corrupt string's size
        meta_error = e.what();
      }
    }
    std::string mismatch;
    for (const std::string& d : differences) mismatch += "\n  " + d;
    if (!mismatch.empty()) mismatch = path + " was saved for another run:" + mismatch;
    if (const auto e = first_error(world, mismatch))
      throw ConfigError(*e + "\nset checkpoint.resume = \"never\" or another checkpoint.dir to start a new run");
    std::optional<std::string> problem = first_error(world, meta_error);
    if (!problem) {
      try {
        read_checkpoint(path, world, run.rank_state_to_load());
        run.rank_state_loaded();
      } catch (const CheckpointMismatch& e) {
        throw ConfigError(std::string(e.what()) + "\nset checkpoint.resume = \"never\" or another checkpoint.dir "
                          "to start a new run");
      } catch (const CheckpointError& e) {
        problem = e.what();
      }
    }
    if (problem) {
      // Every rank has the same message: report it once and let every rank exit.
      if (explicit_file) {
        // A file named on purpose has no fallback; naming its directory gives one.
        const std::string dir = fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string();
        throw AgreedError(*problem + "\n" + config.where("checkpoint.resume") + ": checkpoint.resume = \"" + path +
                              "\" must load; point it at another checkpoint (step_*.h5), or at its directory \"" + dir +
                              "\" to fall back automatically to the newest checkpoint there that loads",
                          world.rank() == 0);
      }
      log::info("checkpoint: " + *problem + "; trying an older one");
      failures.push_back(*problem);
      failed_paths.push_back(path);
      continue;
    }
    // Only now that an older checkpoint has loaded are the newer ones that failed set aside (so
    // a run that can load none, say a file system that fails every read, hides nothing).
    if (world.rank() == 0)
      for (const std::string& bad : failed_paths) {
        CheckpointStore::set_aside(bad, "corrupt");
        log::info("checkpoint: set " + bad + " aside as " + bad + ".corrupt");
      }
    // Every rank needs the position; rank 0 read it.
    int64_t position[4] = {meta.step, meta.tokens_seen, meta.skipped_steps, meta.global_batch};
    world.broadcast(position, 4, DType::kInt64, 0)->wait();
    TrainingState& s = run.state();
    s.step = position[0];
    s.tokens_seen = position[1];
    s.skipped_steps = position[2];
    const int64_t global = int64_t{run.plan().layout.dp()} * run.plan().micro_batches * config.parallel.micro_batch_size;
    const std::string layout = broadcast_string(world, meta.layout, 0);  // optional for other tools' files
    log::info("checkpoint: resumed from " + path + " at step " + std::to_string(s.step) + " (saved at " +
              (layout.empty() ? "a layout the file does not record" : layout) + ")");
    if (run.purpose() == RunPurpose::kTrain && world.rank() == 0)
      if (const std::string change = schedule_change(config, meta, path, s.step); !change.empty()) log::info(change);
    if (position[3] != 0 && position[3] != global)
      log::info("checkpoint: warning: the global batch changes from " + std::to_string(position[3]) + " to " +
                std::to_string(global) + " sequences; later steps see other data than the interrupted run would have");
    meta.step = position[0];
    meta.tokens_seen = position[1];
    return meta;
  }
  const std::string searched = config.checkpoint.resume == "auto" ? config.checkpoint.dir : config.checkpoint.resume;
  throw AgreedError("no checkpoint in " + searched + " could be loaded:\n  " +
                        join_lines(failures, "\n  ") + "\nmove the broken files away or set checkpoint.resume = \"never\"",
                    world.rank() == 0);
}

std::optional<CheckpointMeta> start_from_checkpoint_or_import(TrainingRun& run, const Config& config) {
  // LoRA's checkpoints hold the adapters only: the frozen base is imported every time, first, so
  // a resume can compare it with the one the adapters were trained on.
  const bool lora = config.lora.enabled();
  if (lora && !config.model.init_from.empty()) run.import_initial_weights();
  std::optional<CheckpointMeta> resumed;
  if (may_resume(config)) resumed = resume_from_checkpoint(run, config);
  if (!resumed && !lora && !config.model.init_from.empty()) run.import_initial_weights();
  if (!resumed && lora && !config.lora.init_from.empty()) run.import_initial_adapters();
  return resumed;
}

}  // namespace feast
