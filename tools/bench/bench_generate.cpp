#include "tools/bench/bench_generate.h"

#include <omp.h>

#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/architecture.h"
#include "model/kv_cache_decoder.h"
#include "model/token_sampling.h"
#include "tools/bench/bench_model.h"

namespace feast {
int run_generate_bench(const GenerateBenchOptions& o) {
  const std::string& arch = o.arch;
  const int prompt_tokens = o.prompt_tokens, new_tokens = o.new_tokens;
  const ModelConfig cfg = bench_model(arch);
  if (prompt_tokens + new_tokens > cfg.max_seq_len)
    throw ConfigError("bench generate: " + std::to_string(prompt_tokens + new_tokens) +
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
