// Generation: the key/value-cache decoder against the golden fixtures' PyTorch logits (a prompt
// at once, one token at a time, and mixed) and against the float32 training forward; and the
// token sampler's greedy, top-k, top-p, reproducibility, distribution and option checks.
// GPT-2 (learned positions, tied head), Llama (GQA, llama3 rope scaling, untied head) and
// Qwen2 (qkv biases, one kv head, tied head) from tests/fixtures/make_{gpt2,llama}_golden.py.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "backend/backend.h"
#include "model/decoder_stage.h"
#include "model/kv_cache_decoder.h"
#include "model/token_sampling.h"
#include "tests/model/expect_close.h"
#include "tests/model/fixture.h"

namespace feast {
namespace {

using testing::FixtureArray;

using testing::expect_close;

class KvCacheGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fx_ = testing::read_fixture(std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/" + GetParam() + "_golden.bin");
    const testing::GoldenSetup g = testing::golden_setup(fx_);
    cfg_ = g.config;
    B_ = g.B;
    T_ = g.T;
  }

  // The fixture's init.<name> tensors; the vocabulary padding rows it does not store stay 0.
  std::unique_ptr<KvCacheDecoder> build() {
    asked_.clear();
    return std::make_unique<KvCacheDecoder>(
        cfg_, [&](const std::string& name, std::span<const int64_t> shape, float* out) {
          asked_.push_back(name);
          size_t n = 1;
          for (int64_t d : shape) n *= size_t(d);
          const FixtureArray& a = fx_.at("init." + name);
          ASSERT_LE(a.data.size(), n) << name;
          std::fill_n(out, n, 0.0f);
          std::copy(a.data.begin(), a.data.end(), out);
        });
  }

  // Prompt b of the fixture's first batch and the golden logits (T, V) of its positions.
  std::vector<int32_t> prompt(int b) const {
    const auto& d = fx_.at("inputs.0").data;
    return std::vector<int32_t>(d.begin() + long(b) * T_, d.begin() + long(b + 1) * T_);
  }
  std::vector<float> golden_row(int b, int t) const {
    const size_t V = size_t(cfg_.vocab_size), r = size_t(b) * size_t(T_) + size_t(t);
    const auto& d = fx_.at("logits.0").data;
    return std::vector<float>(d.begin() + long(r * V), d.begin() + long((r + 1) * V));
  }

  std::map<std::string, FixtureArray> fx_;
  ModelConfig cfg_;
  int B_ = 0, T_ = 0;
  std::vector<std::string> asked_;
};

TEST_P(KvCacheGolden, AsksForEveryUntiedTensorOnce) {
  auto dec = build();
  const ParamTable table = decoder_param_table(cfg_);
  std::vector<std::string> expected;
  for (const ParamSpec& s : table.specs())
    if (s.tied_to < 0) expected.push_back(s.name);
  EXPECT_EQ(asked_, expected);
  EXPECT_EQ(dec->position(), 0);
}

TEST_P(KvCacheGolden, PrefillMatchesGoldenLogitsAtEveryPosition) {
  auto dec = build();
  for (int b = 0; b < B_; ++b) {
    const std::vector<int32_t> p = prompt(b);
    for (int len = 1; len <= T_; ++len) {  // the prefill returns its last position's logits
      dec->reset();
      const std::vector<float> logits = dec->forward(std::span(p).first(size_t(len)));
      EXPECT_EQ(dec->position(), len);
      expect_close("prefill of " + std::to_string(len) + " tokens, sequence " + std::to_string(b), logits,
                   golden_row(b, len - 1), 1e-4, 1e-4);
    }
  }
}

TEST_P(KvCacheGolden, TokenByTokenMatchesGoldenLogitsAtEveryPosition) {
  auto dec = build();
  for (int b = 0; b < B_; ++b) {
    dec->reset();
    const std::vector<int32_t> p = prompt(b);
    for (int t = 0; t < T_; ++t) {
      const std::vector<float> logits = dec->forward(std::span(p).subspan(size_t(t), 1));
      expect_close("token " + std::to_string(t) + " of sequence " + std::to_string(b), logits, golden_row(b, t),
                   1e-4, 1e-4);
    }
  }
}

// A prefill of part of the prompt, then single tokens, then a chunk: the cache continues
// correctly after either kind of call.
TEST_P(KvCacheGolden, MixedChunksMatchGoldenLogits) {
  auto dec = build();
  const std::vector<int32_t> p = prompt(1);
  const int a = T_ / 3, b = a + 2;
  expect_close("prefill", dec->forward(std::span(p).first(size_t(a))), golden_row(1, a - 1), 1e-4, 1e-4);
  for (int t = a; t < b; ++t)
    expect_close("token " + std::to_string(t), dec->forward(std::span(p).subspan(size_t(t), 1)), golden_row(1, t),
                 1e-4, 1e-4);
  expect_close("chunk", dec->forward(std::span(p).subspan(size_t(b))), golden_row(1, T_ - 1), 1e-4, 1e-4);
}

// The float32 training forward (DecoderStage on the CPU backend) on the same weights: the
// decoder computes with the same ops, so only the order of a few sums differs.
TEST_P(KvCacheGolden, MatchesFloat32TrainingForward) {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  DecoderStage model(cfg_, StageSpec::whole(cfg_), StageShape{B_, T_, 1}, *backend, nullptr);
  for (const LocalParam& lp : model.table().params()) {
    const FixtureArray& a = fx_.at("init." + lp.spec->name);
    std::vector<float> values(lp.numel, 0.0f);
    std::copy(a.data.begin(), a.data.end(), values.begin());
    write_parameter(model, lp, values);
  }
  const auto& in = fx_.at("inputs.0").data;
  const std::vector<int32_t> x(in.begin(), in.end()), y(x.size(), 0);
  model.forward(0, x.data(), y.data(), nullptr, B_, T_, 0.0f, MicroBatchPlace{});
  const TensorView lv = model.logits(0);
  std::vector<float> all(lv.numel);
  backend->copy(host_view(all.data(), all.size()), lv);

  auto dec = build();
  const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab();
  for (int b = 0; b < B_; ++b) {
    dec->reset();
    const std::vector<int32_t> p = prompt(b);
    for (int t = 0; t < T_; ++t) {
      const std::vector<float> logits = dec->forward(std::span(p).subspan(size_t(t), 1));
      const long r = long(b) * T_ + t;
      const std::vector<float> ref(all.begin() + r * Vp, all.begin() + r * Vp + V);
      expect_close("position " + std::to_string(t) + " of sequence " + std::to_string(b), logits, ref, 2e-6, 1e-5);
    }
  }
}

// Greedy decoding with the cache picks the same tokens as recomputing the whole context at
// every step, with the same logits.
TEST_P(KvCacheGolden, CachedGreedyDecodingEqualsRecomputation) {
  auto cached = build(), fresh = build();
  std::vector<int32_t> context = prompt(0);
  context.resize(size_t(T_ / 2));
  std::vector<float> logits = cached->forward(context);
  const SamplingOptions greedy{0.0, 0, 1.0, 0};
  while (int(context.size()) < cfg_.max_seq_len) {
    fresh->reset();
    const std::vector<float> ref = fresh->forward(context);
    expect_close("context of " + std::to_string(context.size()), logits, ref, 1e-5, 1e-5);
    const int32_t next = sample_token(logits, greedy, context.size());
    ASSERT_EQ(next, sample_token(ref, greedy, context.size()));
    context.push_back(next);
    if (int(context.size()) < cfg_.max_seq_len) logits = cached->forward(std::span(context).last(1));
  }
  EXPECT_EQ(cached->position(), cfg_.max_seq_len - 1);
}

TEST_P(KvCacheGolden, ExceedingMaxSeqLenThrowsAndKeepsTheCache) {
  auto dec = build();
  const int maxT = cfg_.max_seq_len;
  std::vector<int32_t> tokens(size_t(maxT) + 1, 3);
  try {
    dec->forward(tokens);
    FAIL() << "a prefill of max_seq_len + 1 tokens did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(std::to_string(maxT + 1)), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_seq_len = " + std::to_string(maxT)), std::string::npos) << msg;
  }
  EXPECT_EQ(dec->position(), 0);
  dec->forward(std::span(tokens).first(size_t(maxT) - 1));
  dec->forward(std::span(tokens).first(1));  // the last position is usable
  EXPECT_EQ(dec->position(), maxT);
  EXPECT_THROW(dec->forward(std::span(tokens).first(1)), Error);
  EXPECT_EQ(dec->position(), maxT);
  dec->reset();
  EXPECT_EQ(dec->forward(std::span(tokens).first(1)).size(), size_t(cfg_.vocab_size));
}

TEST_P(KvCacheGolden, RejectsTokensOutsideTheVocabularyAndEmptyInput) {
  auto dec = build();
  const std::vector<int32_t> bad = {1, cfg_.vocab_size};
  EXPECT_THROW(dec->forward(bad), Error);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(dec->forward(negative), Error);
  EXPECT_THROW(dec->forward(std::span<const int32_t>()), Error);
  EXPECT_EQ(dec->position(), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, KvCacheGolden, ::testing::Values("gpt2", "llama", "qwen2"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// ---- sampling ----

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

std::vector<float> random_logits(size_t V, uint64_t seed) {
  std::vector<float> v(V);
  for (size_t i = 0; i < V; ++i) v[i] = float(2.0 * normal_at(seed, 7, i));
  return v;
}

TEST(TokenSampling, GreedyIsArgmaxWithTiesToTheLowestId) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  SamplingOptions o;
  o.temperature = 0;
  EXPECT_EQ(sample_token(logits, o, 0), 1);
  EXPECT_EQ(sample_token(logits, o, 99), 1);
  for (uint64_t s = 0; s < 5; ++s) {
    const std::vector<float> r = random_logits(1000, s);
    EXPECT_EQ(sample_token(r, o, s), argmax(r));
  }
}

TEST(TokenSampling, TopKOneAndTinyTopPAreGreedyAtAnyTemperature) {
  for (uint64_t s = 0; s < 5; ++s) {
    const std::vector<float> r = random_logits(500, s + 10);
    for (double temperature : {0.3, 1.0, 5.0}) {
      for (uint64_t step = 0; step < 20; ++step) {
        SamplingOptions k1{temperature, 1, 1.0, s};
        EXPECT_EQ(sample_token(r, k1, step), argmax(r));
        SamplingOptions tiny_p{temperature, 0, 1e-9, s};
        EXPECT_EQ(sample_token(r, tiny_p, step), argmax(r));
      }
    }
  }
}

TEST(TokenSampling, SeededDrawsAreReproducibleAndSeedsDiffer) {
  const std::vector<float> r = random_logits(1000, 3);
  SamplingOptions a{1.0, 0, 1.0, 42}, b{1.0, 0, 1.0, 43};
  std::vector<int32_t> first, again, other;
  for (uint64_t step = 0; step < 64; ++step) {
    first.push_back(sample_token(r, a, step));
    again.push_back(sample_token(r, a, step));
    other.push_back(sample_token(r, b, step));
  }
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  // Different steps draw different numbers: not one token 64 times over 1000 candidates.
  EXPECT_GT(std::count_if(first.begin(), first.end(), [&](int32_t t) { return t != first[0]; }), 0);
}

// 20000 draws at temperature 1 against softmax: each frequency within 5 standard errors.
TEST(TokenSampling, FrequenciesMatchTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  double z = 0;
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(double(logits[i]));
  for (double& x : p) x /= z;
  const int draws = 20000;
  std::vector<int> count(logits.size(), 0);
  const SamplingOptions o{1.0, 0, 1.0, 2024};
  for (int s = 0; s < draws; ++s) ++count[size_t(sample_token(logits, o, uint64_t(s)))];
  for (size_t i = 0; i < p.size(); ++i) {
    const double freq = double(count[i]) / draws, se = std::sqrt(p[i] * (1 - p[i]) / draws);
    EXPECT_NEAR(freq, p[i], 5 * se) << "token " << i;
  }
}

// top_k = 2 keeps tokens 2 and 0 only, renormalised; top_p = 0.8 keeps the smallest prefix of
// (2, 0, 4, 1, 3) by probability reaching 0.8: tokens 2, 0 and 4.
TEST(TokenSampling, TopKAndTopPKeepTheRightTokens) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  double z = 0;
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(double(logits[i]));
  for (double& x : p) x /= z;
  ASSERT_LT(p[2] + p[0], 0.8);
  ASSERT_GE(p[2] + p[0] + p[4], 0.8);
  const int draws = 20000;
  std::vector<int> k2(5, 0), p08(5, 0);
  for (int s = 0; s < draws; ++s) {
    ++k2[size_t(sample_token(logits, SamplingOptions{1.0, 2, 1.0, 5}, uint64_t(s)))];
    ++p08[size_t(sample_token(logits, SamplingOptions{1.0, 0, 0.8, 5}, uint64_t(s)))];
  }
  EXPECT_EQ(k2[1] + k2[3] + k2[4], 0);
  EXPECT_EQ(p08[1] + p08[3], 0);
  EXPECT_GT(p08[4], 0);
  const double q2 = p[2] / (p[2] + p[0]), se = std::sqrt(q2 * (1 - q2) / draws);
  EXPECT_NEAR(double(k2[2]) / draws, q2, 5 * se);
  const double r4 = p[4] / (p[2] + p[0] + p[4]), se4 = std::sqrt(r4 * (1 - r4) / draws);
  EXPECT_NEAR(double(p08[4]) / draws, r4, 5 * se4);
}

// A low temperature sharpens the distribution towards the argmax, a high one flattens it.
TEST(TokenSampling, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  int cold = 0, hot = 0;
  for (int s = 0; s < 2000; ++s) {
    cold += sample_token(logits, SamplingOptions{0.1, 0, 1.0, 1}, uint64_t(s)) == 2;
    hot += sample_token(logits, SamplingOptions{100.0, 0, 1.0, 1}, uint64_t(s)) == 2;
  }
  EXPECT_GT(cold, 1990);           // p(2) = 1 - 4.5e-5 at T = 0.1
  EXPECT_NEAR(hot, 2000 / 5, 80);  // nearly uniform at T = 100
}

TEST(TokenSampling, InvalidOptionsThrowConfigErrorNamingTheFlag) {
  const std::vector<float> logits = {0.0f, 1.0f};
  auto expect_flag = [&](const SamplingOptions& o, const std::string& flag) {
    try {
      sample_token(logits, o, 0);
      ADD_FAILURE() << "no error for " << flag;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  expect_flag(SamplingOptions{-0.5, 0, 1.0, 0}, "--temperature");
  expect_flag(SamplingOptions{std::nan(""), 0, 1.0, 0}, "--temperature");
  expect_flag(SamplingOptions{1.0, -1, 1.0, 0}, "--top-k");
  expect_flag(SamplingOptions{1.0, 0, 0.0, 0}, "--top-p");
  expect_flag(SamplingOptions{1.0, 0, 1.5, 0}, "--top-p");
  EXPECT_NO_THROW(validate_sampling_options(SamplingOptions{0.0, 5, 1.0, 0}));
  EXPECT_THROW(sample_token(std::span<const float>(), SamplingOptions{}, 0), Error);
}

}  // namespace
}  // namespace feast
