// `trainer check-data`: the full validation that start-up no longer does (a split of tens of
// billions of tokens opens in seconds because nothing is scanned). Parses the flags, picks the
// vocabulary size to check against, runs Dataset::scan on every core and prints a summary.
#include "cli/check_data.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "data/dataset.h"
#include "data/dataset_meta.h"
#include "data/tokenizer/tokenizer.h"
#include "comm/topology/cpu_threads.h"

namespace feast {

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "usage: trainer check-data PATTERN [--vocab-size N | --tokenizer FOLDER] [--split train|val] [--threads N]\n"
    "Reads every shard PATTERN names (a shard, a directory or a glob, as data.train takes them) and\n"
    "checks headers, file sizes, every token id against the vocabulary size, and the loss masks\n"
    "(present for every shard or none, one entry per token, each 0 or 1). Prints the shards,\n"
    "tokens, largest id and the share of targets masked; exits 1 naming the first bad shard and offset.\n"
    "  --vocab-size N      ids must be < N (the model's model.vocab_size)\n"
    "  --tokenizer FOLDER  ids must be < that tokenizer's vocabulary size\n"
    "                      (default: the vocab_size in the data directory's meta.json, if any)\n"
    "  --split train|val   of a directory, only that split's shards (default: every shard)\n"
    "  --threads N         reading threads (default: this machine's CPUs, or OMP_NUM_THREADS)";

[[noreturn]] void usage_error(const std::string& what) { throw Error("check-data: " + what + "\n" + kUsage); }

int64_t parse_positive(const std::string& flag, const std::string& text) {
  std::istringstream is(text);
  int64_t value = 0;
  if (!(is >> value) || !is.eof() || value < 1) usage_error(flag + " expects a number >= 1, got '" + text + "'");
  return value;
}

// The vocab_size of the meta.json prepare-data wrote beside the shards, and that file's path.
std::pair<int64_t, std::string> meta_vocab(const std::string& pattern, const Dataset& data) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(pattern, ec) ? fs::path(pattern) : fs::path(data.shard(0).path()).parent_path();
  const std::optional<DatasetMeta> meta = read_dataset_meta(dir.string());
  const std::optional<int64_t> vocab = meta ? meta->vocab_size() : std::nullopt;
  if (!vocab) return {0, ""};
  return {*vocab, dataset_meta_path(dir.string())};
}

}  // namespace

int check_data_command(const std::vector<std::string>& args) {
  std::string pattern, tokenizer;
  int64_t vocab_size = 0;
  int threads = 0;
  Split split = Split::kAny;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    } else if (a == "--vocab-size") {
      vocab_size = parse_positive(a, value());
    } else if (a == "--tokenizer") {
      tokenizer = value();
    } else if (a == "--threads") {
      threads = static_cast<int>(parse_positive(a, value()));
    } else if (a == "--split") {
      const std::string& s = value();
      if (s != "train" && s != "val") usage_error("--split expects train or val, got '" + s + "'");
      split = s == "train" ? Split::kTrain : Split::kVal;
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown flag '" + a + "'");
    } else if (pattern.empty()) {
      pattern = a;
    } else {
      usage_error("more than one PATTERN given ('" + pattern + "' and '" + a + "'); quote a glob");
    }
  }
  if (pattern.empty()) usage_error("name the shards to check (a file, a directory or a quoted glob)");
  if (vocab_size > 0 && !tokenizer.empty()) usage_error("give --vocab-size or --tokenizer, not both");

  // Opening checks every header, size and mask (that masks are all or none, their entries, and
  // that they leave a target), and that meta.json parses.
  Dataset data = [&] {
    try {
      return Dataset(pattern, split);
    } catch (const DataError& e) {
      throw DataError(std::string("check-data: ") + e.what());
    }
  }();
  std::string limit_from;
  if (vocab_size > 0) {
    limit_from = "--vocab-size";
  } else if (!tokenizer.empty()) {
    vocab_size = load_tokenizer(tokenizer)->vocab_size();
    limit_from = "the tokenizer " + tokenizer;
  } else {
    std::tie(vocab_size, limit_from) = meta_vocab(pattern, data);
  }
  // The start-up check training makes: a meta.json recording a larger vocabulary is refused
  // even when no id in the shards reaches it.
  try {
    data.set_vocab_limit(vocab_size, limit_from);
  } catch (const DataError& e) {
    throw DataError(std::string("check-data: ") + e.what());
  }

  const DatasetScan scan = data.scan(vocab_size, threads > 0 ? threads : thread_policy(1).threads);
  std::string formats = data.shard(0).format().name;
  for (size_t i = 1; i < data.num_shards(); ++i)
    if (data.shard(i).format().name != data.shard(0).format().name) formats = "mixed formats";
  log::info("check-data: " + count_of(int64_t(data.num_shards()), "shard") + ", " + count_of(scan.tokens, "token") +
            " (" + formats + ")");
  if (vocab_size > 0) {
    log::info("check-data: largest id " + std::to_string(scan.max_id) + (scan.max_id < vocab_size ? " < " : " >= ") +
              "vocabulary size " + std::to_string(vocab_size) + " (from " + limit_from + ")");
  } else {
    log::info("check-data: largest id " + std::to_string(scan.max_id) +
              "; no vocabulary size to check it against (give --vocab-size N or --tokenizer FOLDER)");
  }
  if (data.has_loss_mask()) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * double(scan.masked) / double(std::max<int64_t>(1, scan.tokens)));
    log::info("check-data: loss masks on every shard: " + count_of(scan.masked, "target") + " (" + share +
              ") masked, not counted in the loss");
  } else {
    log::info("check-data: no loss masks (every target counts)");
  }
  if (scan.problem) {
    std::string fix = "; re-run `trainer prepare-data --force`";
    if (scan.problem->find("vocabulary size") != std::string::npos)
      fix = " (from " + limit_from + "): the data was prepared with another tokenizer than the model's; prepare it "
            "again with the model's tokenizer, or give the model that tokenizer's vocabulary size";
    throw DataError("check-data: " + *scan.problem + fix);
  }
  log::info("check-data: ok");
  return 0;
}

}  // namespace feast
