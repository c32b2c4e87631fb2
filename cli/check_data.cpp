// `trainer check-data`: the full validation that start-up no longer does (a split of tens of
// billions of tokens opens in seconds because nothing is scanned). Parses the flags, picks the
// vocabulary size to check against, runs Dataset::scan on every core and prints a summary.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "cli/verb.h"
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

// The vocab_size of the meta.json prepare-data wrote beside the shards, and that file's path.
std::pair<int64_t, std::string> meta_vocab(const std::string& pattern, const Dataset& data) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(pattern, ec) ? fs::path(pattern) : fs::path(data.shard(0).path()).parent_path();
  const std::optional<DatasetMeta> meta = read_dataset_meta(dir.string());
  const std::optional<int64_t> vocab = meta ? meta->vocab_size() : std::nullopt;
  if (!vocab) return {0, ""};
  return {*vocab, dataset_meta_path(dir.string())};
}

int run_check_data(const Args& args, const VerbContext&) {
  const std::string pattern = args.positional().front();
  const std::string tokenizer = args.text("--tokenizer");
  int64_t vocab_size = args.integer("--vocab-size", 0);
  const int threads = int(args.integer("--threads", 0));
  const std::string split_name = args.text("--split");
  const Split split = split_name.empty() ? Split::kAny : split_name == "train" ? Split::kTrain : Split::kVal;
  if (vocab_size > 0 && !tokenizer.empty())
    throw ConfigError("check-data: give --vocab-size or --tokenizer, not both (trainer check-data --help)");

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

}  // namespace

Verb check_data_verb() {
  Verb v;
  v.name = "check-data";
  v.summary = "read token shards fully: headers, ids against the vocabulary, loss masks";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "check-data";
  cl.synopsis = "trainer check-data PATTERN [--vocab-size N | --tokenizer FOLDER] [--split train|val] [--threads N]";
  cl.description =
      "Reads every shard PATTERN names (a shard, a directory or a glob, as data.train takes them) and\n"
      "checks headers, file sizes, every token id against the vocabulary size, and the loss masks\n"
      "(present for every shard or none, one entry per token, each 0 or 1). Prints the shards,\n"
      "tokens, largest id and the share of targets masked; exits 1 naming the first bad shard and offset.";
  cl.positional = "the shards to check (a file, a directory or a quoted glob)";
  cl.min_positional = cl.max_positional = 1;
  cl.options = {
      {"--vocab-size", ValueKind::kInteger, "N", "ids must be < N (the model's model.vocab_size)", {}, 1},
      {"--tokenizer", ValueKind::kText, "FOLDER",
       "ids must be < that tokenizer's vocabulary size\n"
       "(default: the vocab_size in the data directory's meta.json, if any)"},
      {"--split", ValueKind::kText, "train|val", "of a directory, only that split's shards (default: every shard)",
       {"train", "val"}},
      {"--threads", ValueKind::kInteger, "N", "reading threads (default: this machine's CPUs, or OMP_NUM_THREADS)", {}, 1},
  };
  v.run = run_check_data;
  return v;
}

}  // namespace feast
