// AdamW against a hand-written float64 reference of PyTorch's update, the decay mask and
// clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/cpu/adamw.h"
#include "parallel/optimizer.h"

namespace feast {
namespace {

// A whole GPT-2 of the given shape on one rank: its logical table and the rank's flat layout.
struct WholeModel {
  WholeModel(int layers, int heads, int embd, int vocab, int seq)
      : logical(gpt2_param_table(config(layers, heads, embd, vocab, seq))),
        table(logical, StageSpec::whole(config(layers, heads, embd, vocab, seq))) {}
  static ModelConfig config(int layers, int heads, int embd, int vocab, int seq) {
    ModelConfig c;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = embd;
    c.vocab_size = vocab;
    c.max_seq_len = seq;
    return c;
  }
  ParamTable logical;
  LocalTable table;  // points into `logical`
};

TEST(AdamW, MatchesReferenceUpdateAndDecaysMatricesOnly) {
  const WholeModel model(1, 1, 4, 3, 2);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> p(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = 0.5f - 0.001f * float(i % 997);
    g[i] = 0.01f * float(int(i % 13) - 6);
  }
  AdamWConfig oc;
  oc.grad_clip = 0;  // no clipping here
  AdamW opt(t, 0, n, oc);
  std::vector<double> ref_p(p.begin(), p.end()), m(n, 0.0), v(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    const double lr = 0.01 * step;
    opt.step(p.data(), g.data(), step, lr, 1.0);
    for (const LocalParam& s : t.params()) {
      const double wd = s.spec->weight_decay ? oc.weight_decay : 0.0;
      for (size_t i = s.offset; i < s.offset + s.numel; ++i) {
        m[i] = oc.beta1 * m[i] + (1 - oc.beta1) * g[i];
        v[i] = oc.beta2 * v[i] + (1 - oc.beta2) * double(g[i]) * g[i];
        ref_p[i] *= 1 - lr * wd;
        const double mhat = m[i] / (1 - std::pow(oc.beta1, step));
        const double vhat = v[i] / (1 - std::pow(oc.beta2, step));
        ref_p[i] -= lr * mhat / (std::sqrt(vhat) + oc.eps);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], ref_p[i], 1e-6) << "element " << i;
}

TEST(AdamW, ClipsToTheMaxNorm) {
  const WholeModel model(1, 1, 4, 3, 2);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n, 1.0f), p1(n, 0.0f), p2(n, 0.0f);
  AdamWConfig oc;
  oc.weight_decay = 0;
  oc.beta1 = 0;  // the first update is then -lr * g / (|g| + eps): scale-free...
  oc.beta2 = 0;
  oc.eps = 1.0;  // ...unless eps is large, so the clipped gradient shows in the update
  oc.grad_clip = 2.0;
  const double norm = std::sqrt(counted_sum_of_squares(t, g.data(), 0, n));
  EXPECT_NEAR(norm, std::sqrt(double(n)), 1e-9);
  AdamW clipped(t, 0, n, oc);
  clipped.step(p1.data(), g.data(), 1, 1.0, norm);
  const double gc = 2.0 / (std::sqrt(double(n)) + 1e-6);  // clipped gradient element
  EXPECT_NEAR(p1[0], -gc / (gc + 1.0), 1e-6);
  oc.grad_clip = 0;
  AdamW unclipped(t, 0, n, oc);
  unclipped.step(p2.data(), g.data(), 1, 1.0, norm);
  EXPECT_NEAR(p2[0], -0.5, 1e-6);
}

// A sharded optimizer (ZeRO) updating [begin, end) gives the same result as the whole one.
TEST(AdamW, ShardsUpdateLikeTheWhole) {
  const WholeModel model(2, 2, 8, 50, 4);
  const LocalTable& t = model.table;
  const size_t n = t.total_numel();
  std::vector<float> g(n), whole(n), sharded(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.001f * float(int(i % 101) - 50);
    whole[i] = sharded[i] = 0.01f * float(i % 17);
  }
  AdamWConfig oc;
  AdamW all(t, 0, n, oc);
  const size_t cuts[] = {0, n / 3 + 5, 2 * n / 3 + 1, n};
  std::vector<AdamW> parts;
  for (int s = 0; s < 3; ++s) parts.emplace_back(t, cuts[s], cuts[s + 1], oc);
  for (int step = 1; step <= 2; ++step) {
    all.step(whole.data(), g.data(), step, 0.1, 5.0);
    for (AdamW& a : parts) a.step(sharded.data() + a.begin(), g.data() + a.begin(), step, 0.1, 5.0);
  }
  EXPECT_EQ(whole, sharded);
}

TEST(AdamW, SumOfSquaresIsExactForSmallIntegers) {
  std::vector<float> x(300000);
  double expected = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = float(i % 7);
    expected += double(i % 7) * double(i % 7);
  }
  EXPECT_EQ(cpu::sum_of_squares(x.data(), x.size()), expected);
}

}  // namespace
}  // namespace feast
