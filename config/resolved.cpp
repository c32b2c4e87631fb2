// The config as it runs: the resolved TOML printed at start and saved in the run directory
// (every key, its value and where it came from; values left to inference filled in and marked),
// and every key's value as text, which the ranks' agreement and checkpoints compare.
#include "config/config.h"

#include <filesystem>

#include "config/key_table.h"
#include "core/error.h"

namespace feast {

using namespace config_table;

std::string to_toml(const Config& config) {
  // The accessors hand out mutable references; reading through a copy keeps `config` const.
  Config c = config;
  // Paths are written absolute: a file's relative paths are read relative to the file, so the
  // printed config (the run directory's config.toml, print-config's output) reads back the same
  // wherever it is kept.
  for (std::string* path : {&c.data.train, &c.data.val, &c.logging.dir, &c.checkpoint.dir, &c.model.init_from})
    if (!path->empty() && std::filesystem::path(*path).is_relative())
      *path = std::filesystem::absolute(*path).lexically_normal().string();
  if (!c.model.tokenizer.empty() && c.model.tokenizer != "byte" && std::filesystem::path(c.model.tokenizer).is_relative())
    c.model.tokenizer = std::filesystem::absolute(c.model.tokenizer).lexically_normal().string();
  if (c.checkpoint.resume != "auto" && c.checkpoint.resume != "never" &&
      std::filesystem::path(c.checkpoint.resume).is_relative())
    c.checkpoint.resume = std::filesystem::absolute(c.checkpoint.resume).lexically_normal().string();
  std::string out =
      "# feast config, fully resolved (docs/config.md describes every key).\n"
      "# Each comment ends with where the value came from when it is not the default.\n";
  for (const std::string& section : kSections) {
    out += "\n[" + section + "]\n";
    for (const KeyDesc& k : keys()) {
      if (section != k.section) continue;
      std::string line = std::string(k.name) + " = " + value_text(k, c);
      line.resize(std::max<size_t>(line.size() + 1, 32), ' ');
      line += std::string("# ") + k.doc;
      std::string from = c.where(k.full());
      if (from != "default") line += " [" + from + "]";
      if (from == "default" && k.inferred) line += " [inferred from model.arch]";
      out += line + "\n";
    }
  }
  return out;
}

Config with_inferred_values(const Config& config, const InferredValues& v) {
  Config c = config;
  ParallelConfig& p = c.parallel;
  TrainingConfig& t = c.training;
  const auto n = [](int64_t x) { return std::to_string(x); };
  if (p.dp == 0) {
    if (v.dp > 0) {
      p.dp = v.dp;
      c.origin["parallel.dp"] = "inferred: world size " + n(v.world_size) + " / (tp " + n(p.tp) + " * pp " + n(p.pp) +
                                (p.cp > 1 ? " * cp " + n(p.cp) : "") + ")";
    } else {
      c.origin["parallel.dp"] = p.cp > 1 ? "inferred at launch: world size / (tp * pp * cp)"
                                         : "inferred at launch: world size / (tp * pp)";
    }
  }
  if (t.batch_size > 0) {
    if (v.micro_batches > 0) {
      p.num_micro_batches = v.micro_batches;
      c.origin["parallel.num_micro_batches"] = "inferred: training.batch_size " + n(t.batch_size) + " / (dp " +
                                               n(p.dp) + " * micro_batch_size " + n(p.micro_batch_size) + ")";
    } else {
      c.origin["parallel.num_micro_batches"] = "inferred at launch from training.batch_size";
    }
  } else if (p.dp > 0) {
    t.batch_size = int64_t{p.dp} * p.num_micro_batches * p.micro_batch_size;
    c.origin["training.batch_size"] = "inferred: dp " + n(p.dp) + " * num_micro_batches " + n(p.num_micro_batches) +
                                      " * micro_batch_size " + n(p.micro_batch_size);
  } else {
    c.origin["training.batch_size"] = "inferred at launch: dp * num_micro_batches * micro_batch_size";
  }
  if (t.threads == 0) {
    if (v.threads > 0) {
      t.threads = v.threads;
      c.origin["training.threads"] = "inferred: " + v.threads_from;
    } else {
      c.origin["training.threads"] = "inferred at launch: OMP_NUM_THREADS or the rank's share of its CPUs";
    }
  }
  return c;
}

std::vector<std::pair<std::string, std::string>> config_values(const Config& config) {
  Config c = config;
  std::vector<std::pair<std::string, std::string>> out;
  for (const KeyDesc& k : keys()) out.emplace_back(k.full(), value_text(k, c));
  return out;
}

std::string config_value(const Config& config, const std::string& key) {
  Config c = config;
  for (const KeyDesc& k : keys())
    if (k.full() == key) return value_text(k, c);
  throw ConfigError("unknown key '" + key + "'");
}

std::vector<KeyDifference> key_differences(const Config& theirs, const Config& mine,
                                           const std::function<bool(const std::string&)>& compared) {
  const auto a = config_values(theirs), b = config_values(mine);  // both in the key table's order
  std::vector<KeyDifference> out;
  for (size_t i = 0; i < a.size(); ++i)
    if (compared(a[i].first) && a[i].second != b[i].second) out.push_back({a[i].first, a[i].second, b[i].second});
  return out;
}

}  // namespace feast
