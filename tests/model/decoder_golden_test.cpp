// A full forward, backward and three AdamW steps (with clipping) of a small model of each
// family against golden data from PyTorch in float64: logits, losses, every gradient, gradient
// norms and every updated weight. GPT-2 from tests/fixtures/make_gpt2_golden.py; a Llama with
// grouped-query attention, llama3 rope scaling and an untied head, and a Qwen2-like Llama with
// q/k/v biases, one key/value head and a tied head, from tests/fixtures/make_llama_golden.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/decoder_stage.h"
#include "model/rope.h"
#include "optim/adamw.h"
#include "tests/model/expect_close.h"
#include "tests/model/fixture.h"

namespace feast {
namespace {

using testing::FixtureArray;

using testing::expect_close;

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t end) {
  return {v.begin() + long(begin), v.begin() + long(end)};
}

class DecoderGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fx_ = testing::read_fixture(std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/" + GetParam() + "_golden.bin");
    const testing::GoldenSetup g = testing::golden_setup(fx_);
    cfg_ = g.config;
    B_ = g.B;
    T_ = g.T;
    steps_ = g.steps;
  }

  // The model on one rank with the fixture's prefix.<name> tensors (vocabulary padding stays 0).
  std::unique_ptr<DecoderStage> build(const std::string& prefix) {
    auto model = std::make_unique<DecoderStage>(cfg_, StageSpec::whole(cfg_), StageShape{B_, T_, 1}, *backend_, nullptr);
    for (const LocalParam& p : model->table().params()) {
      const FixtureArray& a = fx_.at(prefix + p.spec->name);
      EXPECT_LE(a.data.size(), p.numel) << p.spec->name;
      std::vector<float> values(p.numel, 0.0f);
      std::copy(a.data.begin(), a.data.end(), values.begin());
      write_parameter(*model, p, values);
    }
    return model;
  }

  std::vector<int32_t> tokens(const std::string& name) {
    const auto& d = fx_.at(name).data;
    return std::vector<int32_t>(d.begin(), d.end());
  }

  std::vector<float> host(const TensorView& v) {
    std::vector<float> out(v.numel);
    backend_->copy(host_view(out.data(), out.size()), v);
    return out;
  }

  std::unique_ptr<Backend> backend_ = make_backend("cpu");
  std::map<std::string, FixtureArray> fx_;
  ModelConfig cfg_;
  int B_ = 0, T_ = 0, steps_ = 0;
};

TEST_P(DecoderGolden, LogitsLossAndGradientsOfFirstStep) {
  auto model = build("init.");
  Tensor grads = backend_->allocate(DType::kFloat32, model->parameters().numel);
  FlatGradientSink sink(grads.view());
  model->set_gradient_sink(&sink);
  const auto x = tokens("inputs.0"), y = tokens("targets.0");
  const float eval_loss = model->forward(0, x.data(), y.data(), nullptr, B_, T_, 0.0f, MicroBatchPlace{});
  EXPECT_NEAR(eval_loss, fx_.at("losses").data[0], 2e-5);
  // Logits: compare the real vocabulary columns of each row.
  const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab();
  const std::vector<float> all = host(model->logits(0));
  std::vector<float> logits(size_t(B_) * T_ * V);
  for (int r = 0; r < B_ * T_; ++r) std::copy_n(all.begin() + long(r) * Vp, V, logits.begin() + long(r) * V);
  expect_close("logits", logits, fx_.at("logits.0").data, 2e-5, 1e-4);

  const float loss = model->forward(0, x.data(), y.data(), nullptr, B_, T_, 1.0f / float(B_ * T_), MicroBatchPlace{});
  model->backward(0, B_, T_);
  EXPECT_NEAR(loss, fx_.at("losses").data[0], 2e-5);
  const std::vector<float> g = host(grads.view());
  for (const LocalParam& p : model->table().params()) {
    const FixtureArray& expected = fx_.at("grad." + p.spec->name);
    const std::vector<float> mine = slice(g, p.offset, p.offset + p.numel);
    expect_close("gradient of " + p.spec->name, mine, expected.data, 1e-5, 1e-3);
    for (size_t i = expected.data.size(); i < p.numel; ++i)  // vocabulary padding gets no gradient
      ASSERT_EQ(mine[i], 0.0f) << p.spec->name << " padded element " << i;
  }
}

TEST_P(DecoderGolden, ThreeAdamWStepsWithClipping) {
  auto model = build("init.");
  const size_t n = model->parameters().numel;
  Tensor grads = backend_->allocate(DType::kFloat32, n);
  FlatGradientSink sink(grads.view());
  model->set_gradient_sink(&sink);
  const auto& h = fx_.at("hyper").data;  // lr per step, beta1, beta2, eps, wd, clip
  AdamWConfig oc;
  oc.beta1 = h[size_t(steps_)];
  oc.beta2 = h[size_t(steps_) + 1];
  oc.eps = h[size_t(steps_) + 2];
  oc.weight_decay = h[size_t(steps_) + 3];
  oc.grad_clip = h[size_t(steps_) + 4];
  AdamW opt(*backend_, model->table(), model->parameters(), 0, n, oc);
  for (int s = 0; s < steps_; ++s) {
    const auto x = tokens("inputs." + std::to_string(s)), y = tokens("targets." + std::to_string(s));
    backend_->zero(grads.view());
    const float loss = model->forward(0, x.data(), y.data(), nullptr, B_, T_, 1.0f / float(B_ * T_), MicroBatchPlace{});
    model->backward(0, B_, T_);
    EXPECT_NEAR(loss, fx_.at("losses").data[size_t(s)], 5e-5) << "step " << s;
    const double norm = std::sqrt(counted_sum_of_squares(*backend_, model->table(), grads.view(), 0, n));
    EXPECT_NEAR(norm, fx_.at("grad_norms").data[size_t(s)], 1e-4 * norm) << "step " << s;
    opt.step(grads.view(), s + 1, h[size_t(s)], norm);
  }
  double lr_sum = 0;
  for (int s = 0; s < steps_; ++s) lr_sum += h[size_t(s)];
  for (const LocalParam& lp : model->table().params()) {
    const ParamSpec& s = *lp.spec;
    const std::vector<float>& expected = fx_.at("final." + s.name).data;
    const std::vector<float> mine = read_parameter(*model, lp);
    if (s.name.ends_with("attn.qkv.bias")) {
      // The key bias adds q.b to a whole softmax row, which the softmax ignores: with learned
      // positions its gradient is exactly zero, and with rotary embeddings nearly so in the
      // channels that turn slowest. Both implementations see only rounding noise there, and
      // AdamW normalises noise into steps of up to lr each. Compare q and v tightly and bound
      // the k block by the summed lr.
      const size_t q = size_t(s.blocks[0]), k = size_t(s.blocks[1]);
      expect_close("updated " + s.name + " (q)", slice(mine, 0, q), slice(expected, 0, q), 5e-5, 1e-4);
      expect_close("updated " + s.name + " (k)", slice(mine, q, q + k), slice(expected, q, q + k), lr_sum, 0);
      expect_close("updated " + s.name + " (v)", slice(mine, q + k, expected.size()),
                   slice(expected, q + k, expected.size()), 5e-5, 1e-4);
      continue;
    }
    expect_close("updated " + s.name, mine, expected, 5e-5, 1e-4);
  }
}

// The rotary families also record transformers' float32 inverse frequencies.
class RotaryGolden : public DecoderGolden {};

TEST_P(RotaryGolden, FrequenciesAreTransformersFloat32Ones) {
  const std::vector<float> mine = rope_inverse_frequencies(cfg_);
  const std::vector<float>& theirs = fx_.at("rope.inv_freq_float32").data;
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], theirs[i]) << "frequency " << i;
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderGolden, ::testing::Values("gpt2", "llama", "qwen2"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });
INSTANTIATE_TEST_SUITE_P(Families, RotaryGolden, ::testing::Values("llama", "qwen2"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace feast
