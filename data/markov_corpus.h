// The built-in synthetic corpus: text from a random order-2 Markov chain over 32 printable
// characters, with its exact entropy rate. A model's loss cannot go below that rate, so the demo
// shows how close training gets to the floor without downloading anything.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace feast {

// The next character is one of `successors` distinct characters chosen by the last character,
// with Dirichlet(1, ..., 1) probabilities chosen by the last two. With 4 successors the floor is
// near E[H] = 1/2 + 1/3 + 1/4 = 1.08 nats/char, the last character alone gives at most
// ln 4 = 1.39, and the characters alone carry about ln 32 = 3.47 nats: training shows two
// visible phases (bigram sets, then two-character contexts). Everything is a pure function of
// the seed.
class MarkovCorpus {
 public:
  static constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz .,;!?";
  static constexpr int kAlphabetSize = static_cast<int>(kAlphabet.size());
  static constexpr int kDefaultSuccessors = 4;

  explicit MarkovCorpus(uint64_t seed, int successors = kDefaultSuccessors);

  // The first n characters of the chain's text (a prefix of any longer call's text).
  std::string generate(int64_t n) const;

  // Entropy rate in nats per character: sum over contexts of the stationary probability times
  // the entropy of that context's successor distribution.
  double entropy_rate() const { return entropy_rate_; }
  // Entropy of the stationary single-character distribution: what a model that ignores
  // context (a unigram model) can reach.
  double unigram_entropy() const { return unigram_entropy_; }

  int successors() const { return successors_; }

  // What the chain itself scores on the characters text[from:] of a text it generated: the mean
  // and the standard deviation over those characters of -ln p(c_i | c_{i-2}, c_{i-1}). The
  // entropy rate is this mean's expectation over endless text; on a finite split (a validation
  // set) the mean scatters around it, so a model's loss there can fall a little below the rate.
  struct Score {
    double mean = 0, stddev = 0;
    int64_t count = 0;
  };
  Score score(std::string_view text, int64_t from) const;

 private:
  static constexpr int kContexts = kAlphabetSize * kAlphabetSize;
  static constexpr int kStartContext = 0;  // "aa"

  void compute_entropies();

  uint64_t seed_;
  int successors_;
  std::vector<int> next_;       // (kContexts, successors): successor character indices
  std::vector<double> prob_;    // (kContexts, successors): their probabilities
  double entropy_rate_ = 0;
  double unigram_entropy_ = 0;
};

}  // namespace feast
