// `trainer prepare-data`: parses the verb's flags into a data/prepare.h call and reports what
// was written. All the work lives in feast_data; this file only owns the command line.
#include "trainer/prepare_data_command.h"

#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "data/prepare.h"

namespace feast {

namespace {

constexpr const char* kUsage =
    "usage: trainer prepare-data --out DIR [--val-fraction F] [--max-shard-tokens N] [--force] "
    "[--keep-binary] FILE...\n"
    "       trainer prepare-data --synthetic --out DIR [--tokens N] [--seed S] [--val-fraction F]"
    " [--force]\n"
    "  FILE...             text files, concatenated and tokenised byte by byte; files with NUL\n"
    "                      bytes (not text) are skipped and counted, much invalid UTF-8 is warned of\n"
    "  --keep-binary       tokenize files with NUL bytes too\n"
    "  --synthetic         generate text from the built-in order-2 Markov chain instead\n"
    "  --out DIR           writes DIR/train_NNN.bin, DIR/val_NNN.bin and DIR/meta.json\n"
    "  --val-fraction F    share of the tokens, from the end, kept for validation (default 0.05)\n"
    "  --max-shard-tokens N  tokens per shard at most (default 100000000)\n"
    "  --tokens N          synthetic corpus size in tokens (default 2000000)\n"
    "  --seed S            synthetic chain and text seed (default 1)\n"
    "  --force             rewrite even if DIR/meta.json records the same parameters";

[[noreturn]] void usage_error(const std::string& what) {
  throw Error("prepare-data: " + what + "\n" + kUsage);
}

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  std::istringstream is(text);
  T value{};
  if (!(is >> value) || !is.eof()) {
    usage_error(flag + " expects a number, got '" + text + "'");
  }
  return value;
}

std::string join(const std::vector<std::string>& paths) {
  std::string out;
  for (const auto& p : paths) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

int prepare_data_command(const std::vector<std::string>& args) {
  PrepareOptions options;
  bool synthetic = false;
  int64_t tokens = 2'000'000;
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    } else if (a == "--out") {
      options.out_dir = value();
    } else if (a == "--val-fraction") {
      options.val_fraction = parse_number<double>(a, value());
    } else if (a == "--max-shard-tokens") {
      options.max_shard_tokens = parse_number<int64_t>(a, value());
    } else if (a == "--tokens") {
      tokens = parse_number<int64_t>(a, value());
    } else if (a == "--seed") {
      seed = parse_number<uint64_t>(a, value());
    } else if (a == "--synthetic") {
      synthetic = true;
    } else if (a == "--force") {
      options.force = true;
    } else if (a == "--keep-binary") {
      options.keep_binary = true;
    } else if (a.size() > 1 && a[0] == '-') {
      usage_error("unknown flag '" + a + "'");
    } else {
      files.push_back(a);
    }
  }
  if (options.out_dir.empty()) usage_error("--out DIR is required");
  if (synthetic && !files.empty()) usage_error("--synthetic takes no input files");
  if (!synthetic && files.empty()) usage_error("give input text files or --synthetic");

  const PreparedData d = synthetic ? prepare_synthetic(tokens, seed, options)
                                   : prepare_text(files, options);
  for (const std::string& note : d.input_notes) log::info("prepare-data: warning: " + note);
  if (!synthetic && !d.reused)
    log::info("prepare-data: " + std::to_string(d.files_kept) + " input file(s) tokenized" +
              (d.files_skipped ? ", " + std::to_string(d.files_skipped) + " skipped (not text)" : ""));
  if (d.reused) {
    log::info("prepare-data: " + options.out_dir + " already prepared from these inputs (the same paths, sizes and "
              "CRC-32 of their contents) with these parameters; nothing written (--force rewrites it)");
  }
  std::ostringstream os;
  os << "prepare-data: train " << count_of(d.train_tokens, "token") << " in " << join(d.train_shards)
     << "\nprepare-data: val " << count_of(d.val_tokens, "token") << " in " << join(d.val_shards)
     << "\nprepare-data: byte tokenizer, vocab 256, metadata in " << options.out_dir
     << "/meta.json";
  if (d.entropy_floor) {
    os << "\nprepare-data: entropy floor " << *d.entropy_floor << " nats/token (unigram "
       << *d.unigram_entropy << "): the lowest loss any model can reach on this data";
  }
  log::info(os.str());
  return 0;
}

}  // namespace feast
