// `trainer prepare-data`: parses the verb's flags into a data/prepare.h call, shows progress on
// stderr, and reports what was written. All the work lives in feast_data; this file only owns
// the command line and the display.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <type_traits>

#include "cli/verb.h"
#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "data/prepare.h"
#include "comm/topology/cpu_threads.h"

namespace feast {

namespace {

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

int run_prepare_data(const Args& args, const VerbContext&) {
  const auto usage_error = [](const std::string& what) {
    return ConfigError("prepare-data: " + what + " (trainer prepare-data --help)");
  };
  PrepareOptions options;
  const bool synthetic = args.flag("--synthetic");
  options.out_dir = args.text("--out");
  options.tokenizer = args.text("--tokenizer");
  options.val_fraction = args.number("--val-fraction", options.val_fraction);
  options.max_shard_tokens = args.integer("--max-shard-tokens", options.max_shard_tokens);
  options.threads = int(args.integer("--threads", 0));
  options.force = args.flag("--force");
  options.keep_binary = args.flag("--keep-binary");
  const bool pack = args.flag("--pack");
  options.pack_seq_len = args.integer("--seq-len", 0);
  const int64_t tokens = args.integer("--tokens", 2'000'000);
  const uint64_t seed = uint64_t(args.integer("--seed", 1));
  const std::vector<std::string>& files = args.positional();
  if (options.out_dir.empty()) throw usage_error("--out DIR is required");
  if (synthetic && !files.empty()) throw usage_error("--synthetic takes no input files");
  if (!synthetic && files.empty()) throw usage_error("give input text files or --synthetic");
  if (synthetic && !options.tokenizer.empty() && options.tokenizer != "byte")
    throw usage_error("--synthetic makes byte tokens; it takes no --tokenizer");
  if (pack && options.pack_seq_len == 0)
    throw usage_error("--pack needs --seq-len N: the training.seq_len the windows are for (each holds N + 1 tokens)");
  if (!pack && options.pack_seq_len > 0) throw usage_error("--seq-len N is the window of --pack; give --pack too");
  if (pack && synthetic) throw usage_error("--pack places samples into windows; the synthetic corpus has none");
  if (options.threads == 0) options.threads = thread_policy(1).threads;
  ProgressDisplay display;
  if (!args.flag("--quiet")) options.on_progress = [&display](const PrepareProgress& p) { display(p); };

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
    if (d.instruction_examples > 0)
      os << ", " << d.instruction_examples << " of them prompt/completion examples or conversations";
  }
  if (d.packing) {
    const PackingSummary& k = *d.packing;
    char efficiency[32];
    std::snprintf(efficiency, sizeof efficiency, "%.1f%%", 100.0 * k.efficiency());
    os << "\nprepare-data: packed " << count_of(k.documents, "sample") << " whole into "
       << count_of(k.train_windows + k.val_windows, "window") << " of " << k.window << " tokens (training.seq_len "
       << k.window - 1 << "; " << k.train_windows << " train, " << k.val_windows << " val) by first-fit decreasing: "
       << efficiency << " of their tokens are samples', " << count_of(k.padding_tokens, "padding token")
       << " (end-of-text, not counted in the loss)";
    os << "\nprepare-data: " << (k.split_documents == 0
                                     ? std::string("no sample was longer than a window")
                                     : count_of(k.split_documents, "sample") + " longer than a window split into " +
                                           count_of(k.pieces, "piece"));
    os << "; train with data.document_mask = true so that no sample attends to another";
  }
  if (d.has_loss_mask) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%",
                  100.0 * double(d.masked_tokens) / double(std::max<int64_t>(1, d.train_tokens + d.val_tokens)));
    os << "\nprepare-data: loss masks beside every shard (*.mask): " << count_of(d.masked_tokens, "token")
       << " (" << share << "; prompts, and chat turns other than the assistant's) do not count in the loss";
  }
  os << "\nprepare-data: " << d.tokenizer_kind << " tokenizer"
     << (d.tokenizer_folder.empty() ? "" : " (" + d.tokenizer_folder + ")") << ", vocab " << d.vocab_size
     << (d.eos_id ? ", end-of-text id " + std::to_string(*d.eos_id) : "") << ", metadata in " << options.out_dir
     << "/meta.json";
  if (d.entropy_floor) {
    os << "\nprepare-data: entropy floor " << *d.entropy_floor << " nats/token (unigram "
       << *d.unigram_entropy << "): the lowest expected loss any model can reach, over endless text of this chain";
    if (d.val_floor)
      os << "\nprepare-data: on the validation split itself the chain scores " << *d.val_floor
         << " nats/token (spread " << *d.val_floor_stddev
         << " per token): a val_loss over n of its tokens scatters by about spread / sqrt(n) around that, so it may "
            "end a little below the floor";
  }
  log::info(os.str());
  return 0;
}

}  // namespace

Verb prepare_data_verb() {
  Verb v;
  v.name = "prepare-data";
  v.summary = "text files (or the built-in synthetic corpus) -> train/val token shards";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "prepare-data";
  cl.synopsis =
      "trainer prepare-data [--tokenizer FOLDER] --out DIR [--val-fraction F] [--max-shard-tokens N]\n"
      "                            [--threads N] [--quiet] [--force] [--keep-binary] [--pack --seq-len N]\n"
      "                            FILE-or-GLOB...\n"
      "       trainer prepare-data --synthetic --out DIR [--tokens N] [--seed S] [--val-fraction F] [--force]";
  cl.description =
      "FILE-or-GLOB... are the inputs in order; a quoted glob ('corpus/*.jsonl') is expanded, sorted:\n"
      "  - a text file is one document; files with NUL bytes (not text) are skipped and counted, much\n"
      "    invalid UTF-8 is warned of;\n"
      "  - a .jsonl (or .jsonl.gz) file holds one JSON object per line: {\"text\": ...} is a document;\n"
      "    {\"prompt\": ..., \"completion\": ...} an instruction example whose completion (and end-of-text\n"
      "    token) alone count in the loss: the shards then get loss masks (DIR/train_NNN.mask);\n"
      "    {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} a conversation, rendered by the\n"
      "    --tokenizer folder's chat template (chat_template.jinja, or \"chat_template\" in\n"
      "    tokenizer_config.json) as transformers' apply_chat_template renders it, whose assistant turns\n"
      "    (each reply and the template's end of turn) alone count in the loss; nothing is appended\n"
      "    after it (the template ends it);\n"
      "  - a .json (or .json.gz) file is a JSON array of such records (or of texts); anything else in it\n"
      "    is refused.\n"
      "With --pack --seq-len N the samples (documents, examples, conversations) are placed whole into\n"
      "windows of N + 1 tokens by first-fit decreasing (a sample longer than a window is split, and\n"
      "counted), each window padded with end-of-text tokens that do not count; train them at\n"
      "training.seq_len = N with data.document_mask = true (docs/finetune.md).";
  cl.positional = "input text files or --synthetic";
  cl.max_positional = -1;
  cl.options = {
      {"--out", ValueKind::kText, "DIR", "writes DIR/train_NNN.bin, DIR/val_NNN.bin and DIR/meta.json"},
      {"--tokenizer", ValueKind::kText, "FOLDER",
       "a Hugging Face tokenizer folder (tokenizer.json, vocab.json + merges.txt, or\n"
       "tokenizer.model); documents end with its end-of-text token. Default: the byte\n"
       "tokenizer (vocab 256), documents concatenated"},
      {"--val-fraction", ValueKind::kNumber, "F", "share of the tokens, from the end, kept for validation (default 0.05)",
       {}, 0, 1},
      {"--max-shard-tokens", ValueKind::kInteger, "N", "tokens per shard at most (default 100000000)", {}, 1, 9.007199254740992e15},
      {"--threads", ValueKind::kInteger, "N",
       "tokenizing threads (default: this machine's CPUs, or OMP_NUM_THREADS); the output is\n"
       "the same at any N",
       {}, 1},
      {"--quiet", ValueKind::kFlag, "", "no progress display (on stderr)"},
      {"--force", ValueKind::kFlag, "", "rewrite even if DIR/meta.json records the same parameters"},
      {"--keep-binary", ValueKind::kFlag, "", "tokenize files with NUL bytes too"},
      {"--pack", ValueKind::kFlag, "", "pack whole samples into windows of --seq-len + 1 tokens"},
      {"--seq-len", ValueKind::kInteger, "N", "the training.seq_len the --pack windows are for", {}, 1,
       9.007199254740992e15},
      {"--synthetic", ValueKind::kFlag, "", "generate text from the built-in order-2 Markov chain instead"},
      {"--tokens", ValueKind::kInteger, "N", "synthetic corpus size in tokens (default 2000000)", {}, 2, 9.007199254740992e15},
      {"--seed", ValueKind::kInteger, "S", "synthetic chain and text seed (default 1)", {}, 0, 9.007199254740992e15},
  };
  v.run = run_prepare_data;
  return v;
}

}  // namespace feast
