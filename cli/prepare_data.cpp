// `trainer prepare-data`: parses the verb's flags into a data/prepare.h call, shows progress on
// stderr, and reports what was written. All the work lives in feast_data; this file only owns
// the command line and the display.
#include "cli/prepare_data.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "data/prepare.h"
#include "comm/topology/cpu_threads.h"

namespace feast {

namespace {

constexpr const char* kUsage =
    "usage: trainer prepare-data [--tokenizer FOLDER] --out DIR [--val-fraction F] [--max-shard-tokens N]\n"
    "                            [--threads N] [--quiet] [--force] [--keep-binary] FILE-or-GLOB...\n"
    "       trainer prepare-data --synthetic --out DIR [--tokens N] [--seed S] [--val-fraction F]"
    " [--force]\n"
    "  FILE-or-GLOB...     inputs in order; a quoted glob ('corpus/*.jsonl') is expanded, sorted:\n"
    "                      - a text file is one document; files with NUL bytes (not text) are\n"
    "                        skipped and counted, much invalid UTF-8 is warned of\n"
    "                      - a .jsonl (or .jsonl.gz) file holds one JSON object per line: {\"text\": ...}\n"
    "                        is a document; {\"prompt\": ..., \"completion\": ...} an instruction example\n"
    "                        whose completion (and end-of-text token) alone count in the loss: the\n"
    "                        shards then get loss masks (DIR/train_NNN.mask)\n"
    "  --tokenizer FOLDER  a Hugging Face tokenizer folder (tokenizer.json, vocab.json + merges.txt,\n"
    "                      or tokenizer.model); documents end with its end-of-text token. Default:\n"
    "                      the byte tokenizer (vocab 256), documents concatenated\n"
    "  --threads N         tokenizing threads (default: this machine's CPUs, or OMP_NUM_THREADS);\n"
    "                      the output is the same at any N\n"
    "  --quiet             no progress display (on stderr)\n"
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
  // An istream reads "-1" into an unsigned as 2^64 - 1 without complaint.
  if (std::is_unsigned_v<T> && text.find('-') != std::string::npos)
    usage_error(flag + " expects a number >= 0, got '" + text + "'");
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

std::string bytes_text(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string duration_text(double s) {
  char buf[32];
  const auto t = static_cast<long long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

// Progress on stderr: a bar redrawn in place on a terminal; otherwise (a log file, a CI job) a
// plain line every 10 seconds, so a short run prints none and a long one stays readable.
class ProgressDisplay {
 public:
  void operator()(const PrepareProgress& p) {
    const double rate = p.seconds > 0 ? double(p.bytes_done) / p.seconds : 0;
    const double share = p.bytes_total > 0 ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
    std::string eta = rate > 0 && !p.finished ? ", ETA " + duration_text(double(p.bytes_total - p.bytes_done) / rate) : "";
    char head[96];
    std::snprintf(head, sizeof head, "%3.0f%% %s of %s, %s/s", 100 * share, bytes_text(double(p.bytes_done)).c_str(),
                  bytes_text(double(p.bytes_total)).c_str(), bytes_text(rate).c_str());
    const std::string tokens = p.tokens > 0 ? ", " + count_of(p.tokens, "token") : "";
    if (tty_) {
      constexpr int kWidth = 30;
      const int full = static_cast<int>(share * kWidth);
      std::fprintf(stderr, "\r\033[K%s [%s%s] %s%s%s", p.phase, std::string(size_t(full), '#').c_str(),
                   std::string(size_t(kWidth - full), '.').c_str(), head, tokens.c_str(), eta.c_str());
      if (p.finished) std::fprintf(stderr, " in %s\n", duration_text(p.seconds).c_str());
      std::fflush(stderr);
    } else if (p.seconds - last_line_ >= 10 || (p.finished && last_line_ > 0)) {
      std::fprintf(stderr, "prepare-data: %s: %s%s%s\n", p.phase, head, tokens.c_str(), eta.c_str());
      last_line_ = p.finished ? 0 : p.seconds;
    }
  }

 private:
  bool tty_ = ::isatty(STDERR_FILENO) == 1;
  double last_line_ = 0;
};

}  // namespace

int prepare_data_command(const std::vector<std::string>& args) {
  PrepareOptions options;
  bool synthetic = false;
  int64_t tokens = 2'000'000;
  uint64_t seed = 1;
  bool quiet = false;
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
    } else if (a == "--tokenizer") {
      options.tokenizer = value();
    } else if (a == "--threads") {
      options.threads = parse_number<int>(a, value());
      if (options.threads < 1) usage_error("--threads expects a number >= 1, got " + args[i]);
    } else if (a == "--quiet") {
      quiet = true;
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
  if (synthetic && !options.tokenizer.empty() && options.tokenizer != "byte")
    usage_error("--synthetic makes byte tokens; it takes no --tokenizer");
  if (options.threads == 0) options.threads = thread_policy(1).threads;
  ProgressDisplay display;
  if (!quiet) options.on_progress = [&display](const PrepareProgress& p) { display(p); };

  const PreparedData d = synthetic ? prepare_synthetic(tokens, seed, options)
                                   : prepare_text(expand_input_patterns(files), options);
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
     << "\nprepare-data: val " << count_of(d.val_tokens, "token") << " in " << join(d.val_shards);
  if (!synthetic && d.documents > 0) {
    os << "\nprepare-data: " << count_of(d.documents, "document");
    if (d.instruction_examples > 0) os << ", " << d.instruction_examples << " of them prompt/completion examples";
  }
  if (d.has_loss_mask) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%",
                  100.0 * double(d.masked_tokens) / double(std::max<int64_t>(1, d.train_tokens + d.val_tokens)));
    os << "\nprepare-data: loss masks beside every shard (*.mask): " << count_of(d.masked_tokens, "prompt token")
       << " (" << share << ") do not count in the loss";
  }
  os << "\nprepare-data: " << d.tokenizer_kind << " tokenizer"
     << (d.tokenizer_folder.empty() ? "" : " (" + d.tokenizer_folder + ")") << ", vocab " << d.vocab_size
     << (d.eos_id ? ", end-of-text id " + std::to_string(*d.eos_id) : "") << ", metadata in " << options.out_dir
     << "/meta.json";
  if (d.entropy_floor) {
    os << "\nprepare-data: entropy floor " << *d.entropy_floor << " nats/token (unigram "
       << *d.unigram_entropy << "): the lowest loss any model can reach on this data";
  }
  log::info(os.str());
  return 0;
}

}  // namespace feast
