// Synthetic corpus: deterministic per seed, and its computed entropy rate agrees with the
// conditional entropy measured on a long sample of its own text.
#include "data/markov_corpus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace feast {
namespace {

TEST(MarkovCorpus, SameSeedSameTextAndPrefixesAgree) {
  const MarkovCorpus a(7), b(7), c(8);
  const std::string text = a.generate(5000);
  EXPECT_EQ(text, b.generate(5000));
  EXPECT_EQ(a.generate(100), text.substr(0, 100));
  EXPECT_NE(text, c.generate(5000));
  EXPECT_EQ(a.entropy_rate(), b.entropy_rate());
  for (char ch : text) {
    EXPECT_NE(MarkovCorpus::kAlphabet.find(ch), std::string_view::npos) << int(ch);
  }
}

TEST(MarkovCorpus, EntropyFloorIsWellBelowUnigram) {
  const MarkovCorpus corpus(1);
  EXPECT_GT(corpus.entropy_rate(), 0.6);
  EXPECT_LT(corpus.entropy_rate(), 1.2);
  EXPECT_GT(corpus.unigram_entropy(), corpus.entropy_rate() + 1.5);
  EXPECT_LE(corpus.unigram_entropy(), std::log(32.0) + 1e-12);
}

// Plug-in estimate H(X_t | X_{t-2}, X_{t-1}) from counts. Its bias, about
// -(successors - 1) * contexts / (2 n) = -0.0008 nats here, is far below the tolerance.
double empirical_conditional_entropy(const std::string& text) {
  std::map<int, std::map<char, int64_t>> counts;
  for (size_t i = 2; i < text.size(); ++i) {
    counts[static_cast<unsigned char>(text[i - 2]) * 256 + static_cast<unsigned char>(text[i - 1])]
          [text[i]]++;
  }
  const auto n = static_cast<double>(text.size() - 2);
  double h = 0;
  for (const auto& [context, next] : counts) {
    int64_t total = 0;
    for (const auto& [ch, k] : next) total += k;
    for (const auto& [ch, k] : next) {
      h -= static_cast<double>(k) / n * std::log(static_cast<double>(k) / static_cast<double>(total));
    }
  }
  return h;
}

TEST(MarkovCorpus, EntropyRateMatchesEmpiricalEstimate) {
  for (uint64_t seed : {1ull, 2ull}) {
    const MarkovCorpus corpus(seed);
    const double measured = empirical_conditional_entropy(corpus.generate(2'000'000));
    EXPECT_NEAR(measured, corpus.entropy_rate(), 0.01) << "seed " << seed;
  }
}

// The chain's own score of its text: its mean over a long text is the entropy rate, its mean
// over a short split scatters around it by about stddev / sqrt(n), and text the chain cannot
// have written is refused.
TEST(MarkovCorpus, ScoreOfItsOwnTextConvergesToTheEntropyRate) {
  const MarkovCorpus corpus(1);
  const std::string text = corpus.generate(2'000'000);
  const MarkovCorpus::Score all = corpus.score(text, 0);
  EXPECT_EQ(all.count, 2'000'000 - 2);
  EXPECT_NEAR(all.mean, corpus.entropy_rate(), 0.01);
  EXPECT_GT(all.stddev, 0.1);
  // The last 100,000 characters: a sample mean, within 4 standard errors of the rate, and the
  // same as the mean of the scores of each character computed from `all`'s decomposition.
  const MarkovCorpus::Score tail = corpus.score(text, 1'900'000);
  EXPECT_EQ(tail.count, 100'000);
  EXPECT_NEAR(tail.mean, corpus.entropy_rate(), 4 * tail.stddev / std::sqrt(100'000.0));
  const MarkovCorpus::Score head = corpus.score(text.substr(0, 1'900'000), 0);
  EXPECT_NEAR((head.mean * static_cast<double>(head.count) + tail.mean * 100'000.0) / static_cast<double>(all.count),
              all.mean, 1e-9);
  // After any context exactly `successors` characters of the alphabet can follow; any other,
  // or a character outside the alphabet, is not this chain's text.
  int accepted = 0;
  for (const char c : MarkovCorpus::kAlphabet) {
    try {
      corpus.score(text.substr(0, 500) + c, 499);
      ++accepted;
    } catch (const std::exception&) {
    }
  }
  EXPECT_EQ(accepted, corpus.successors());
  EXPECT_THROW(corpus.score(std::string(10, 'a') + "\x01", 0), std::exception);
}

// The last character alone narrows the next one to `successors` choices, so the entropy given
// one character of context lies between the floor and ln(successors): the demo's first phase.
TEST(MarkovCorpus, LastCharacterChoosesTheSuccessorSet) {
  const MarkovCorpus corpus(1);
  const std::string text = corpus.generate(1'000'000);
  std::map<char, std::map<char, int64_t>> counts;
  // From i = 2: the fixed start "aa" is not drawn from the chain.
  for (size_t i = 2; i < text.size(); ++i) counts[text[i - 1]][text[i]]++;
  const auto n = static_cast<double>(text.size() - 2);
  double h = 0;
  for (const auto& [prev, next] : counts) {
    EXPECT_LE(next.size(), 4u) << "after '" << prev << "'";
    int64_t total = 0;
    for (const auto& [ch, k] : next) total += k;
    for (const auto& [ch, k] : next)
      h -= static_cast<double>(k) / n * std::log(static_cast<double>(k) / static_cast<double>(total));
  }
  EXPECT_LE(h, std::log(4.0));
  EXPECT_GT(h, corpus.entropy_rate() + 0.05);
}

TEST(MarkovCorpus, SuccessorCountSetsTheFloor) {
  // One successor per context: the text is deterministic and the floor is zero.
  const MarkovCorpus one(3, 1);
  EXPECT_NEAR(one.entropy_rate(), 0.0, 1e-12);
  EXPECT_NEAR(empirical_conditional_entropy(one.generate(10000)), 0.0, 1e-12);
}

}  // namespace
}  // namespace feast
