#include "model/token_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace feast {

void validate_sampling_options(const SamplingOptions& o) {
  auto fail = [](const char* flag, double value, const char* expected) {
    std::ostringstream os;
    os << flag << " " << value << ": expected " << expected;
    throw ConfigError(os.str());
  };
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    fail("--temperature", o.temperature, "a finite number >= 0 (0 = greedy)");
  if (o.top_k < 0) fail("--top-k", o.top_k, "an integer >= 0 (0 = all tokens)");
  if (!(o.top_p > 0 && o.top_p <= 1)) fail("--top-p", o.top_p, "a number in (0, 1] (1 = all tokens)");
}

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t step) {
  validate_sampling_options(o);
  const size_t V = logits.size();
  if (V == 0) throw Error("sample_token: the logits row is empty");
  size_t best = 0;
  for (size_t i = 0; i < V; ++i) {
    if (std::isnan(logits[i])) throw Error("sample_token: logit " + std::to_string(i) + " is NaN");
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest id
  }
  if (o.temperature == 0 || o.top_k == 1) return int32_t(best);

  // Probabilities in double, shifted by the maximum: (l - max) / T <= 0 never overflows, even
  // for a tiny temperature.
  const double mx = logits[best];
  std::vector<double> p(V);
  for (size_t i = 0; i < V; ++i) p[i] = std::exp((double(logits[i]) - mx) / o.temperature);

  // The candidates, most likely first (ties by the lower id, so the order is deterministic).
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int32_t a, int32_t b) {
    const double pa = p[size_t(a)], pb = p[size_t(b)];
    return pa > pb || (pa == pb && a < b);
  };
  size_t keep = V;
  if (o.top_k > 0 && size_t(o.top_k) < V) {
    keep = size_t(o.top_k);
    std::partial_sort(ids.begin(), ids.begin() + long(keep), ids.end(), more_likely);
  } else if (o.top_p < 1) {
    std::sort(ids.begin(), ids.end(), more_likely);
  }
  double total = 0;
  for (size_t r = 0; r < keep; ++r) total += p[size_t(ids[r])];
  if (o.top_p < 1) {
    // The smallest prefix whose share of the kept mass reaches top_p (at least one token).
    const double target = o.top_p * total;
    double cum = 0;
    size_t r = 0;
    while (r < keep) {
      cum += p[size_t(ids[r++])];
      if (cum >= target) break;
    }
    keep = r;
    total = cum;
  }

  // uniform01 is in (0, 1]: the first candidate whose cumulative mass reaches u * total, so a
  // zero-probability token is never drawn; rounding falls back to the last candidate.
  static const uint64_t kStream = hash_name("sample_token");
  const double u = uniform01(hash_combine(hash_combine(o.seed, kStream), step)) * total;
  double cum = 0;
  for (size_t r = 0; r < keep; ++r) {
    cum += p[size_t(ids[r])];
    if (cum >= u) return ids[r];
  }
  return ids[keep - 1];
}

}  // namespace feast
