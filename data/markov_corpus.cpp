// Builds the chain's transition table from counter-based random draws, generates text from it,
// and computes its entropy rate from the stationary distribution over contexts.
#include "data/markov_corpus.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/error.h"
#include "core/rng.h"

namespace feast {

namespace {

// Stream tags: which characters follow a context, their weights, and the generated text are
// independent draws of the same seed.
constexpr uint64_t kSuccessorStream = 0x4D4B5355434Eull;  // "MKSUCN"
constexpr uint64_t kWeightStream = 0x4D4B5747ull;         // "MKWG"
constexpr uint64_t kTextStream = 0x4D4B5458ull;           // "MKTX"

double entropy(const double* p, int n) {
  double h = 0;
  for (int k = 0; k < n; ++k) {
    if (p[k] > 0) h -= p[k] * std::log(p[k]);
  }
  return h;
}

}  // namespace

MarkovCorpus::MarkovCorpus(uint64_t seed, int successors) : seed_(seed), successors_(successors) {
  FEAST_CHECK(successors >= 1 && successors <= kAlphabetSize,
              "MarkovCorpus: successors must be in 1.." << kAlphabetSize << ", got " << successors);
  const int s = successors;
  next_.resize(kContexts * s);
  prob_.resize(kContexts * s);
  for (int c = 0; c < kContexts; ++c) {
    // Partial Fisher-Yates: the first `successors` entries become distinct random characters.
    // The set depends on the last character only (c % kAlphabetSize) and the probabilities on
    // both: a model first learns the bigram sets (loss near ln(successors)), then the
    // two-character contexts take it down to the floor.
    const int last = c % kAlphabetSize;
    int perm[kAlphabetSize];
    for (int a = 0; a < kAlphabetSize; ++a) perm[a] = a;
    double total = 0;
    for (int k = 0; k < successors; ++k) {
      const uint64_t i = static_cast<uint64_t>(c * successors + k);
      const uint64_t set_i = static_cast<uint64_t>(last * successors + k);
      const auto pick = static_cast<int>(
          uniform_index(seed, kSuccessorStream, set_i, static_cast<uint64_t>(kAlphabetSize - k)));
      std::swap(perm[k], perm[k + pick]);
      next_[c * s + k] = perm[k];
      // Normalised Exp(1) draws are Dirichlet(1, ..., 1): uniform over the simplex.
      prob_[c * s + k] = -std::log(uniform01(hash_combine(hash_combine(seed, kWeightStream), i)));
      total += prob_[c * s + k];
    }
    for (int k = 0; k < successors; ++k) prob_[c * s + k] /= total;
  }
  compute_entropies();
}

std::string MarkovCorpus::generate(int64_t n) const {
  std::string text;
  if (n <= 0) return text;
  text.resize(static_cast<size_t>(n));
  const int s = successors_;
  int prev = kStartContext / kAlphabetSize;
  int cur = kStartContext % kAlphabetSize;
  text[0] = kAlphabet[prev];
  if (n > 1) text[1] = kAlphabet[cur];
  const uint64_t base = hash_combine(seed_, kTextStream);
  for (int64_t i = 2; i < n; ++i) {
    const int c = prev * kAlphabetSize + cur;
    const double u = uniform01(hash_combine(base, static_cast<uint64_t>(i)));
    // The last successor also catches u that rounding left above the final cumulative sum.
    int k = 0;
    double cumulative = prob_[c * s];
    while (k + 1 < s && u > cumulative) cumulative += prob_[c * s + ++k];
    prev = cur;
    cur = next_[c * s + k];
    text[i] = kAlphabet[cur];
  }
  return text;
}

MarkovCorpus::Score MarkovCorpus::score(std::string_view text, int64_t from) const {
  int index[256];
  std::fill(std::begin(index), std::end(index), -1);
  for (int a = 0; a < kAlphabetSize; ++a) index[static_cast<unsigned char>(kAlphabet[a])] = a;
  const int s = successors_;
  double sum = 0, sum_sq = 0;
  int64_t count = 0;
  for (int64_t i = std::max<int64_t>(from, 2); i < static_cast<int64_t>(text.size()); ++i) {
    const int prev = index[static_cast<unsigned char>(text[i - 2])], cur = index[static_cast<unsigned char>(text[i - 1])],
              next = index[static_cast<unsigned char>(text[i])];
    FEAST_CHECK(prev >= 0 && cur >= 0 && next >= 0, "MarkovCorpus::score: character " << i << " is not of the alphabet");
    const int c = prev * kAlphabetSize + cur;
    int k = 0;
    while (k < s && next_[c * s + k] != next) ++k;
    FEAST_CHECK(k < s, "MarkovCorpus::score: character " << i << " cannot follow its context: not this chain's text");
    const double loss = -std::log(prob_[c * s + k]);
    sum += loss;
    sum_sq += loss * loss;
    ++count;
  }
  Score score;
  score.count = count;
  if (count == 0) return score;
  const auto n = static_cast<double>(count);
  score.mean = sum / n;
  score.stddev = std::sqrt(std::max(0.0, sum_sq / n - score.mean * score.mean));
  return score;
}

void MarkovCorpus::compute_entropies() {
  // Stationary distribution over contexts by power iteration of the lazy chain
  // pi <- (pi + pi P) / 2 started where generate() starts. The lazy chain has the same
  // stationary distributions but is aperiodic, so the iteration converges even if the chain
  // is periodic, and a start in a transient context ends in the class the text ends in.
  const int s = successors_;
  std::vector<double> pi(kContexts, 0.0), next(kContexts);
  pi[kStartContext] = 1.0;
  for (int iter = 0; iter < 100000; ++iter) {
    for (int c = 0; c < kContexts; ++c) next[c] = 0.5 * pi[c];
    for (int c = 0; c < kContexts; ++c) {
      const int cur = c % kAlphabetSize;
      for (int k = 0; k < s; ++k) {
        next[cur * kAlphabetSize + next_[c * s + k]] += 0.5 * pi[c] * prob_[c * s + k];
      }
    }
    double change = 0;
    for (int c = 0; c < kContexts; ++c) change += std::abs(next[c] - pi[c]);
    pi.swap(next);
    if (change < 1e-14) break;
  }
  double rate = 0;
  std::vector<double> unigram(kAlphabetSize, 0.0);
  for (int c = 0; c < kContexts; ++c) {
    rate += pi[c] * entropy(&prob_[c * s], s);
    unigram[c % kAlphabetSize] += pi[c];
  }
  entropy_rate_ = rate;
  unigram_entropy_ = entropy(unigram.data(), kAlphabetSize);
}

}  // namespace feast
