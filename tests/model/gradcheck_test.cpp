// Every CPU op's backward against finite differences computed in float64.
#include <algorithm>
#include <vector>

#include "model/cpu/attention.h"
#include "model/cpu/cross_entropy.h"
#include "model/cpu/encoder.h"
#include "model/cpu/gelu.h"
#include "model/cpu/layernorm.h"
#include "model/cpu/matmul.h"
#include "model/cpu/residual.h"
#include "tests/model/gradcheck.h"

namespace feast {
namespace {

using testing::dot;
using testing::expect_gradient_matches;
using testing::random_vector;

TEST(GradCheck, Matmul) {
  const int N = 5, C = 7, OC = 6;
  auto inp = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
  const auto r = random_vector(N * OC, 4);
  std::vector<double> out(N * OC);
  auto loss = [&] {
    cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(r, out.data());
  };
  // Gradients accumulate into weights: start from a non-zero value to check the +=.
  std::vector<double> dinp(N * C), dw(OC * C, 0.5), db(OC, -0.25);
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  for (double& x : dw) x -= 0.5;
  for (double& x : db) x += 0.25;
  expect_gradient_matches("matmul dinp", inp, dinp, loss);
  expect_gradient_matches("matmul dweight", w, dw, loss);
  expect_gradient_matches("matmul dbias", b, db, loss);
}

TEST(GradCheck, MatmulWithoutBias) {
  const int N = 3, C = 4, OC = 130;  // more than one 64-wide block of output channels
  auto inp = random_vector(N * C, 5), w = random_vector(OC * C, 6);
  const auto r = random_vector(N * OC, 7);
  std::vector<double> out(N * OC), dinp(N * C), dw(OC * C);
  auto loss = [&] {
    cpu::matmul_forward(out.data(), inp.data(), w.data(), static_cast<const double*>(nullptr), N, C, OC);
    return dot(r, out.data());
  };
  cpu::matmul_backward(dinp.data(), dw.data(), static_cast<double*>(nullptr), r.data(), inp.data(), w.data(), N, C, OC);
  expect_gradient_matches("matmul dinp", inp, dinp, loss);
  expect_gradient_matches("matmul dweight", w, dw, loss);
}

TEST(GradCheck, MatmulWeightGradientInRowChunks) {
  const int N = 6, C = 5, OC = 11;
  const auto inp = random_vector(N * C, 30), w = random_vector(OC * C, 31), dout = random_vector(N * OC, 32);
  std::vector<double> whole(OC * C), chunked(OC * C), dinp(N * C), dinp2(N * C);
  cpu::matmul_backward(dinp.data(), whole.data(), static_cast<double*>(nullptr), dout.data(), inp.data(), w.data(), N, C, OC);
  for (int r0 = 0; r0 < OC; r0 += 4)
    cpu::matmul_backward_weight_rows(chunked.data() + r0 * C, dout.data(), inp.data(), N, C, OC, r0, std::min(OC, r0 + 4));
  cpu::matmul_backward_input(dinp2.data(), dout.data(), w.data(), N, C, OC);
  for (int i = 0; i < OC * C; ++i) EXPECT_NEAR(chunked[i], whole[i], 1e-12);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(dinp2[i], dinp[i], 1e-12);
}

TEST(GradCheck, LayerNorm) {
  const int N = 4, C = 70;
  auto inp = random_vector(N * C, 8, 2.0), w = random_vector(C, 9), b = random_vector(C, 10);
  const auto r = random_vector(N * C, 11);
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(r, out.data());
  };
  loss();
  std::vector<double> dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
  expect_gradient_matches("layernorm dinp", inp, dinp, loss);
  expect_gradient_matches("layernorm dweight", w, dw, loss);
  expect_gradient_matches("layernorm dbias", b, db, loss);
}

TEST(GradCheck, LayerNormAccumulatesIntoInputGradient) {
  const int N = 2, C = 8;
  auto inp = random_vector(N * C, 12), w = random_vector(C, 13), b = random_vector(C, 14);
  const auto r = random_vector(N * C, 15);
  std::vector<double> out(N * C), mean(N), rstd(N), dw(C), db(C);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  std::vector<double> fresh(N * C, 0.0), seeded(N * C, 1.5);
  cpu::layernorm_backward(fresh.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
  cpu::layernorm_backward(seeded.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_DOUBLE_EQ(seeded[i], fresh[i] + 1.5);
}

TEST(GradCheck, Gelu) {
  const size_t n = 50;
  auto inp = random_vector(n, 16, 2.0);
  const auto r = random_vector(n, 17);
  std::vector<double> out(n), dinp(n);
  auto loss = [&] {
    cpu::gelu_forward(out.data(), inp.data(), n);
    return dot(r, out.data());
  };
  cpu::gelu_backward(dinp.data(), inp.data(), r.data(), n);
  expect_gradient_matches("gelu", inp, dinp, loss);
}

TEST(GradCheck, Residual) {
  const size_t n = 9;
  auto a = random_vector(n, 18), b = random_vector(n, 19);
  std::vector<double> out(n);
  cpu::residual_forward(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(out[i], a[i] + b[i]);
}

TEST(GradCheck, Attention) {
  const int B = 2, T = 5, C = 12, NH = 3;
  auto qkv = random_vector(B * T * 3 * C, 20);
  const auto r = random_vector(B * T * C, 21);
  std::vector<double> out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(r, out.data());
  };
  loss();
  std::vector<double> dqkv(B * T * 3 * C), scratch(static_cast<size_t>(cpu::attention_scratch_size(T)));
  cpu::attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, C, NH, scratch.data());
  expect_gradient_matches("attention dqkv", qkv, dqkv, loss);
}

TEST(GradCheck, AttentionIsCausal) {
  // Changing the last token's q, k, v must not change any earlier output.
  const int B = 1, T = 4, C = 8, NH = 2;
  auto qkv = random_vector(B * T * 3 * C, 22);
  std::vector<double> out1(B * T * C), out2(B * T * C), att(B * NH * T * T);
  cpu::attention_forward(out1.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int c = 0; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 1.0;
  cpu::attention_forward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_DOUBLE_EQ(out1[i], out2[i]);
  bool last_changed = false;
  for (int i = (T - 1) * C; i < T * C; ++i) last_changed |= out1[i] != out2[i];
  EXPECT_TRUE(last_changed);
}

TEST(GradCheck, Encoder) {
  const int B = 2, T = 3, C = 5, Vp = 7;
  const std::vector<int32_t> tokens = {1, 4, 1, 6, 0, 4};  // repeated tokens accumulate
  auto wte = random_vector(Vp * C, 23), wpe = random_vector(T * C, 24);
  const auto r = random_vector(B * T * C, 25);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(r, out.data());
  };
  std::vector<double> dwte(Vp * C), dwpe(T * C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  expect_gradient_matches("encoder dwte", wte, dwte, loss);
  expect_gradient_matches("encoder dwpe", wpe, dwpe, loss);
}

TEST(GradCheck, CrossEntropyOverPaddedVocabulary) {
  const int N = 4, V = 10, Vp = 16;
  auto logits = random_vector(N * Vp, 26, 3.0);
  const std::vector<int32_t> targets = {0, 9, 3, 3};
  const double dloss = 0.37;
  std::vector<double> losses(N);
  auto loss = [&] {
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    double s = 0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  const double reference = loss();
  std::vector<double> grad = logits;
  std::vector<double> losses2(N);
  cpu::cross_entropy_forward_backward(grad.data(), losses2.data(), targets.data(), N, V, Vp, dloss);
  double s = 0;
  for (double l : losses2) s += dloss * l;
  EXPECT_NEAR(s, reference, 1e-12);
  expect_gradient_matches("cross-entropy dlogits", logits, grad, loss);
  // Padded logits take no part: their gradient is zero and changing them changes no loss.
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) EXPECT_EQ(grad[n * Vp + v], 0.0);
  logits[V] += 100.0;
  EXPECT_DOUBLE_EQ(loss(), reference);
}

}  // namespace
}  // namespace feast
