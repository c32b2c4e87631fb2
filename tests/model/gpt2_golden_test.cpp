// A full forward, backward and three AdamW steps (with clipping) of a small GPT-2 against
// golden data from PyTorch in float64 (tests/fixtures/make_gpt2_golden.py): logits, losses,
// every gradient, gradient norms and every updated weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/gpt2_stage.h"
#include "parallel/optimizer.h"
#include "tests/model/fixture.h"

namespace feast {
namespace {

using testing::FixtureArray;

// |a - b| <= atol + rtol |b| for every element; reports the worst one.
void expect_close(const std::string& what, const float* actual, const std::vector<float>& expected,
                  double atol, double rtol) {
  double worst = -1;
  size_t worst_i = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double excess = std::abs(double(actual[i]) - expected[i]) - (atol + rtol * std::abs(expected[i]));
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": element " << worst_i << " is " << actual[worst_i]
                        << ", expected " << expected[worst_i];
}

class Gpt2Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    fx_ = testing::read_fixture(std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/gpt2_golden.bin");
    const auto& c = fx_.at("config").data;
    cfg_.n_layer = int(c[0]);
    cfg_.n_head = int(c[1]);
    cfg_.n_embd = int(c[2]);
    cfg_.vocab_size = int(c[3]);
    cfg_.max_seq_len = int(c[4]);
    B_ = int(c[5]);
    T_ = int(c[6]);
    steps_ = int(c[7]);
  }

  // Copies the fixture's prefix.<name> tensors into the flat buffer; wte's padded rows stay 0.
  void load(GPT2Stage& model, const std::string& prefix) {
    std::fill(model.params(), model.params() + model.num_params(), 0.0f);
    for (const LocalParam& p : model.table().params()) {
      const FixtureArray& a = fx_.at(prefix + p.spec->name);
      ASSERT_LE(a.data.size(), p.numel) << p.spec->name;
      std::copy(a.data.begin(), a.data.end(), model.params() + p.offset);
    }
  }

  std::vector<int32_t> tokens(const std::string& name) {
    const auto& d = fx_.at(name).data;
    return std::vector<int32_t>(d.begin(), d.end());
  }

  std::map<std::string, FixtureArray> fx_;
  ModelConfig cfg_;
  int B_ = 0, T_ = 0, steps_ = 0;
};

TEST_F(Gpt2Golden, LogitsLossAndGradientsOfFirstStep) {
  GPT2Stage model(cfg_, StageSpec::whole(cfg_), B_, T_, 1, nullptr);
  load(model, "init.");
  Buffer<float> grads(model.num_params());
  FlatGradientSink sink(grads.data());
  model.set_gradient_sink(&sink);
  const auto x = tokens("inputs.0"), y = tokens("targets.0");
  const float eval_loss = model.forward(0, x.data(), y.data(), B_, T_, 0.0f);
  EXPECT_NEAR(eval_loss, fx_.at("losses").data[0], 2e-5);
  // Logits: compare the real vocabulary columns of each row.
  const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab();
  std::vector<float> logits(size_t(B_) * T_ * V);
  for (int r = 0; r < B_ * T_; ++r)
    std::copy_n(model.logits(0) + size_t(r) * Vp, V, logits.begin() + size_t(r) * V);
  expect_close("logits", logits.data(), fx_.at("logits.0").data, 2e-5, 1e-4);

  const float loss = model.forward(0, x.data(), y.data(), B_, T_, 1.0f / float(B_ * T_));
  model.backward(0, x.data(), B_, T_);
  EXPECT_NEAR(loss, fx_.at("losses").data[0], 2e-5);
  for (const LocalParam& p : model.table().params()) {
    const FixtureArray& g = fx_.at("grad." + p.spec->name);
    expect_close("gradient of " + p.spec->name, grads.data() + p.offset, g.data, 1e-5, 1e-3);
    for (size_t i = g.data.size(); i < p.numel; ++i)  // vocabulary padding gets no gradient
      ASSERT_EQ(grads[p.offset + i], 0.0f) << p.spec->name << " padded element " << i;
  }
}

TEST_F(Gpt2Golden, ThreeAdamWStepsWithClipping) {
  GPT2Stage model(cfg_, StageSpec::whole(cfg_), B_, T_, 1, nullptr);
  load(model, "init.");
  Buffer<float> grads(model.num_params());
  FlatGradientSink sink(grads.data());
  model.set_gradient_sink(&sink);
  const auto& h = fx_.at("hyper").data;  // lr per step, beta1, beta2, eps, wd, clip
  AdamWConfig oc;
  oc.beta1 = h[size_t(steps_)];
  oc.beta2 = h[size_t(steps_) + 1];
  oc.eps = h[size_t(steps_) + 2];
  oc.weight_decay = h[size_t(steps_) + 3];
  oc.grad_clip = h[size_t(steps_) + 4];
  AdamW opt(model.table(), 0, model.num_params(), oc);
  for (int s = 0; s < steps_; ++s) {
    const auto x = tokens("inputs." + std::to_string(s)), y = tokens("targets." + std::to_string(s));
    grads.zero();
    const float loss = model.forward(0, x.data(), y.data(), B_, T_, 1.0f / float(B_ * T_));
    model.backward(0, x.data(), B_, T_);
    EXPECT_NEAR(loss, fx_.at("losses").data[size_t(s)], 5e-5) << "step " << s;
    const double norm = std::sqrt(counted_sum_of_squares(model.table(), grads.data(), 0, model.num_params()));
    EXPECT_NEAR(norm, fx_.at("grad_norms").data[size_t(s)], 1e-4 * norm) << "step " << s;
    opt.step(model.params(), grads.data(), s + 1, h[size_t(s)], norm);
  }
  double lr_sum = 0;
  for (int s = 0; s < steps_; ++s) lr_sum += h[size_t(s)];
  for (const LocalParam& lp : model.table().params()) {
    const ParamSpec& s = *lp.spec;
    const std::vector<float>& expected = fx_.at("final." + s.name).data;
    if (s.name.ends_with("attn.qkv.bias")) {
      // The key bias has an exactly zero gradient (it adds q.b to a whole softmax row), so both
      // implementations see only rounding noise there, and AdamW normalises noise into steps of
      // up to lr each. Compare q and v tightly and bound the k block by the summed lr.
      const size_t C = size_t(cfg_.n_embd);
      const float* p = model.params() + lp.offset;
      expect_close("updated " + s.name + " (q)", p, {expected.begin(), expected.begin() + C}, 5e-5, 1e-4);
      expect_close("updated " + s.name + " (k)", p + C, {expected.begin() + C, expected.begin() + 2 * C},
                   lr_sum, 0);
      expect_close("updated " + s.name + " (v)", p + 2 * C, {expected.begin() + 2 * C, expected.end()}, 5e-5, 1e-4);
      continue;
    }
    expect_close("updated " + s.name, model.params() + lp.offset, expected, 5e-5, 1e-4);
  }
}

}  // namespace
}  // namespace feast
