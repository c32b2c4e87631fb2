#include "tools/bench/bench_generate.h"

#include <omp.h>

#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/architecture.h"
#include "model/kv_cache_decoder.h"
#include "model/token_sampling.h"
#include "cli/cli_args.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: trainer bench --generate [--arch gpt2|llama] [--prompt-tokens N] [--new-tokens N]\n"
    "Times `trainer generate`'s decoder on one process: the prefill of an N-token prompt (default\n"
    "16), then greedy tokens one at a time with the key/value cache (default 64), for GPT-2 124M or\n"
    "a Llama of the same depth and width (4 key/value heads, SwiGLU width 2048, vocab 32000),\n"
    "random weights. Decoding one token reads every weight once, so its speed is bounded by memory\n"
    "bandwidth: the table gives the bandwidth it reached. OMP_WAIT_POLICY=passive helps when other\n"
    "work shares the cores (libgomp's threads otherwise spin between the small per-token ops).\n";

}  // namespace

int bench_generate_command(const std::vector<std::string>& args) {
  std::string arch = "gpt2";
  int prompt_tokens = 16, new_tokens = 64;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw ConfigError("bench --generate: " + a + " needs a value\n" + kUsage);
      return args[++i];
    };
    if (a == "--generate") continue;
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    }
    if (a == "--arch") arch = value();
    else if (a == "--prompt-tokens") prompt_tokens = parse_positive_int(a, value(), kUsage);
    else if (a == "--new-tokens") new_tokens = parse_positive_int(a, value(), kUsage);
    else throw ConfigError("bench --generate: unknown option '" + a + "'\n" + kUsage);
  }
  if (arch != "gpt2" && arch != "llama") throw ConfigError("bench --generate: --arch " + arch + ": expected gpt2 or llama");
  ModelConfig cfg = ModelConfig::gpt2_124m();
  if (arch == "llama") {
    cfg.arch = "llama";
    cfg.n_kv_head = 4;
    cfg.intermediate_size = 2048;
    cfg.vocab_size = 32000;
  }
  if (prompt_tokens + new_tokens > cfg.max_seq_len)
    throw ConfigError("bench --generate: " + std::to_string(prompt_tokens + new_tokens) +
                      " tokens exceed the model's context of " + std::to_string(cfg.max_seq_len));
  const ParamTable table = decoder_param_table(cfg);
  KvCacheDecoder decoder(cfg, [&](const std::string& name, std::span<const int64_t>, float* out) {
    const ParamSpec& s = table.at(name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(s.numel); ++i) out[i] = initial_value(s, 1234, i);
  });
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % size_t(cfg.vocab_size));
  SamplingOptions greedy;
  greedy.temperature = 0;
  Timer prefill;
  std::vector<float> logits = decoder.forward(prompt);
  const double prefill_s = prefill.seconds();
  // Each decoded token is one forward of one position: the token the prefill's logits chose, then
  // each next one. new_tokens forwards, so new_tokens positions after the prompt.
  Timer decode;
  for (int k = 0; k < new_tokens; ++k) {
    const int32_t next = sample_token(logits, greedy, uint64_t(k));
    logits = decoder.forward(std::span(&next, 1));
  }
  const double decode_s = decode.seconds();
  // What one decoded token reads: every matrix once, but of a lookup table (GPT-2's positions, an
  // untied token embedding) one row. A tied embedding is read whole, as the head.
  double read_floats = 0;
  for (const ParamSpec& spec : table.specs()) {
    if (spec.tied_to >= 0) continue;  // a tied head is the embedding, counted whole below
    const bool lookup = spec.name == "wpe.weight" || (spec.name == "wte.weight" && !cfg.tied());
    read_floats += lookup ? double(cfg.n_embd) : double(spec.numel);
  }
  const double weight_bytes = read_floats * sizeof(float);
  char line[200];
  log::info("generate bench: " + arch + " (" + std::to_string(table.total_numel() / 1000000) + "M parameters), " +
            std::to_string(omp_get_max_threads()) + " thread(s), float32, one process");
  log::info("  phase   | tokens | seconds | tokens/s | weight bandwidth GB/s");
  std::snprintf(line, sizeof line, "  prefill | %6d | %7.3f | %8.1f | %s", prompt_tokens, prefill_s,
                prompt_tokens / prefill_s, "-");
  log::info(line);
  std::snprintf(line, sizeof line, "  decode  | %6d | %7.3f | %8.1f | %.1f", new_tokens, decode_s,
                new_tokens / decode_s, weight_bytes * new_tokens / decode_s / 1e9);
  log::info(line);
  return 0;
}

}  // namespace feast
