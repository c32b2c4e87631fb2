// Every CPU op's backward against finite differences computed in float64 (the op templates
// instantiated for double), plus the properties finite differences cannot see (causality,
// grouped-query head sharing, accumulation).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cross_entropy.h"
#include "backend/cpu/encoder.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/lora.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/residual.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/swiglu.h"
#include "model/rope.h"
#include "tests/backend/gradcheck.h"

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

// LoRA's update of a middle block of columns: the output outside the block is untouched, and
// the gradients of the input, A and B (accumulated onto nonzero values) match finite differences.
TEST(GradCheck, Lora) {
  const LoraShape s{5, 7, 3, 4, 11, 2, 1.5f};  // N, C, r, OC, out_ld, col, scale
  auto inp = random_vector(s.N * s.C, 31), a = random_vector(s.r * s.C, 32), b = random_vector(s.OC * s.r, 33);
  const auto base = random_vector(s.N * s.out_ld, 34), r = random_vector(s.N * s.out_ld, 35);
  std::vector<double> out, h(s.N * s.r), dh(s.N * s.r);
  auto loss = [&] {
    out = base;
    cpu::lora_forward(out.data(), h.data(), inp.data(), a.data(), b.data(), s);
    return dot(r, out.data());
  };
  loss();
  for (int n = 0; n < s.N; ++n)
    for (int c = 0; c < s.out_ld; ++c)
      if (c < s.col || c >= s.col + s.OC) {
        EXPECT_EQ(out[size_t(n * s.out_ld + c)], base[size_t(n * s.out_ld + c)]) << "column " << c << " is outside the block";
      }
  std::vector<double> dinp(s.N * s.C, 0.75), da(s.r * s.C, 0.5), db(s.OC * s.r, -0.25), h2(s.N * s.r);
  cpu::lora_backward(dinp.data(), da.data(), db.data(), h2.data(), dh.data(), r.data(), inp.data(), a.data(), b.data(), s);
  for (double& x : dinp) x -= 0.75;
  for (double& x : da) x -= 0.5;
  for (double& x : db) x += 0.25;
  expect_gradient_matches("lora dinp", inp, dinp, loss);
  expect_gradient_matches("lora da", a, da, loss);
  expect_gradient_matches("lora db", b, db, loss);
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
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, 1e-5);
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
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, 1e-5);
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

// Attention with NH query heads sharing NKV key/value heads (NKV = NH: multi-head; 1: multi-query),
// within the documents `positions` gives (null: one per row).
void check_attention(int NH, int NKV, uint32_t seed, const int32_t* positions = nullptr) {
  const int B = 2, T = 5, hs = 3, W = (NH + 2 * NKV) * hs;
  auto qkv = random_vector(B * T * W, seed);
  const auto r = random_vector(B * T * NH * hs, seed + 1);
  std::vector<double> out(B * T * NH * hs), att(B * NH * T * T);
  auto loss = [&] {
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, hs, positions);
    return dot(r, out.data());
  };
  loss();
  std::vector<double> dqkv(B * T * W, 7.0);  // overwritten, not accumulated
  std::vector<double> scratch(static_cast<size_t>(cpu::attention_scratch_size(T, 4)));
  cpu::attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, NH, NKV, hs, positions,
                          scratch.data(), long(scratch.size()));
  expect_gradient_matches("attention dqkv, " + std::to_string(NH) + " heads / " + std::to_string(NKV) + " kv" +
                              (positions ? ", documents" : ""),
                          qkv, dqkv, loss);
}

TEST(GradCheck, Attention) { check_attention(3, 3, 20); }
TEST(GradCheck, GroupedQueryAttention) { check_attention(4, 2, 40); }
TEST(GradCheck, MultiQueryAttention) { check_attention(3, 1, 45); }

// Two rows of 5: documents of 2, 1 and 2 tokens; of 4 and 1 (the end of the window).
const int32_t kDocumentPositions[] = {0, 1, 0, 0, 1, 0, 1, 2, 3, 0};
TEST(GradCheck, AttentionWithinDocuments) { check_attention(4, 2, 41, kDocumentPositions); }


TEST(GradCheck, AttentionIsCausal) {
  // Changing the last token's q, k, v must not change any earlier output.
  const int B = 1, T = 4, NH = 2, NKV = 1, hs = 4, W = (NH + 2 * NKV) * hs, C = NH * hs;
  auto qkv = random_vector(B * T * W, 22);
  std::vector<double> out1(B * T * C), out2(B * T * C), att(B * NH * T * T);
  cpu::attention_forward(out1.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
  for (int c = 0; c < W; ++c) qkv[(T - 1) * W + c] += 1.0;
  cpu::attention_forward(out2.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
  for (int i = 0; i < (T - 1) * C; ++i) EXPECT_DOUBLE_EQ(out1[i], out2[i]);
  bool last_changed = false;
  for (int i = (T - 1) * C; i < T * C; ++i) last_changed |= out1[i] != out2[i];
  EXPECT_TRUE(last_changed);
}

TEST(GradCheck, GroupedQueryHeadsReadTheirKeyValueHead) {
  // Query heads 0 and 1 share kv head 0, heads 2 and 3 kv head 1: changing kv head 1 changes
  // only the outputs of query heads 2 and 3.
  const int B = 1, T = 3, NH = 4, NKV = 2, hs = 2, W = (NH + 2 * NKV) * hs, C = NH * hs;
  auto qkv = random_vector(B * T * W, 23);
  std::vector<double> out1(B * T * C), out2(B * T * C), att(B * NH * T * T);
  cpu::attention_forward(out1.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
  for (int t = 0; t < T; ++t) qkv[t * W + (NH + 2 * NKV - 1) * hs] += 1.0;  // v of kv head 1
  cpu::attention_forward(out2.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH; ++h) {
      const bool changed = out1[t * C + h * hs] != out2[t * C + h * hs];
      EXPECT_EQ(changed, h >= 2) << "token " << t << " head " << h;
    }
}

TEST(GradCheck, AttentionBackwardRunsOnTheThreadsItsScratchHolds) {
  // Scratch for one thread gives the same gradients as scratch for many (it runs on fewer
  // threads); scratch for none is an error, not an overrun.
  const int B = 3, T = 6, NH = 4, NKV = 2, hs = 4, W = (NH + 2 * NKV) * hs;
  const auto qkv = random_vector(B * T * W, 24), r = random_vector(B * T * NH * hs, 25);
  std::vector<double> out(B * T * NH * hs), att(B * NH * T * T), many(B * T * W), one(B * T * W);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
  std::vector<double> big(static_cast<size_t>(cpu::attention_scratch_size(T, 8))), small(T * T), none(T * T - 1);
  cpu::attention_backward(many.data(), r.data(), qkv.data(), att.data(), B, T, NH, NKV, hs, nullptr, big.data(), long(big.size()));
  cpu::attention_backward(one.data(), r.data(), qkv.data(), att.data(), B, T, NH, NKV, hs, nullptr, small.data(),
                          long(small.size()));
  EXPECT_EQ(many, one);
  EXPECT_THROW(cpu::attention_backward(one.data(), r.data(), qkv.data(), att.data(), B, T, NH, NKV, hs, nullptr, none.data(),
                                       long(none.size())),
               Error);
}

TEST(GradCheck, RmsNorm) {
  const int N = 4, C = 70;  // more than one 64-wide block of channels
  auto inp = random_vector(N * C, 50, 2.0), w = random_vector(C, 51);
  const auto r = random_vector(N * C, 52);
  std::vector<double> out(N * C), rstd(N);
  auto loss = [&] {
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6);
    return dot(r, out.data());
  };
  loss();
  std::vector<double> dinp(N * C, 0.0), dw(C, 0.25);
  cpu::rmsnorm_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
  for (double& x : dw) x -= 0.25;  // the weight gradient accumulates
  expect_gradient_matches("rmsnorm dinp", inp, dinp, loss);
  expect_gradient_matches("rmsnorm dweight", w, dw, loss);
}

TEST(GradCheck, RmsNormAccumulatesIntoInputGradient) {
  const int N = 3, C = 5;
  const auto inp = random_vector(N * C, 53), w = random_vector(C, 54), r = random_vector(N * C, 55);
  std::vector<double> out(N * C), rstd(N), dw(C);
  cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6);
  std::vector<double> fresh(N * C, 0.0), seeded(N * C, -2.0);
  cpu::rmsnorm_backward(fresh.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
  cpu::rmsnorm_backward(seeded.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(seeded[i], fresh[i] - 2.0, 1e-12);  // FMA may round once less
}

// Rotary tables of a small Llama (head size 6: three frequencies) in double.
void rope_tables_double(int T, int hs, std::vector<double>& cos, std::vector<double>& sin) {
  ModelConfig c;
  c.arch = "llama";
  c.n_head = 1;
  c.n_embd = hs;
  c.max_seq_len = T;
  std::vector<float> fc, fs;
  rope_tables(c, fc, fs);
  cos.assign(fc.begin(), fc.end());
  sin.assign(fs.begin(), fs.end());
}

// Rotary embedding at each row's position t, or its document position (null: t).
void check_rope(const int32_t* positions, uint32_t seed) {
  const int B = 2, T = 5, NH = 2, NKV = 1, hs = 6, W = (NH + 2 * NKV) * hs;
  std::vector<double> cos, sin;
  rope_tables_double(T, hs, cos, sin);
  auto x = random_vector(B * T * W, seed);
  const auto r = random_vector(B * T * W, seed + 1);
  std::vector<double> y(B * T * W);
  auto loss = [&] {
    y = x;
    cpu::rope_forward(y.data(), cos.data(), sin.data(), B, T, NH, NKV, hs, positions);
    return dot(r, y.data());
  };
  std::vector<double> dx = r;
  cpu::rope_backward(dx.data(), cos.data(), sin.data(), B, T, NH, NKV, hs, positions);
  expect_gradient_matches(positions ? "rope, documents" : "rope", x, dx, loss);
  // Position 0 (a row's, or a document's, first token) does not turn; v heads never turn; pairs
  // keep their length.
  loss();
  for (int bt = 0; bt < B * T; ++bt) {
    if ((positions ? positions[bt] : bt % T) != 0) continue;
    for (int c = 0; c < W; ++c) EXPECT_DOUBLE_EQ(y[size_t(bt) * W + c], x[size_t(bt) * W + c]);
  }
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = (NH + NKV) * hs; c < W; ++c) EXPECT_DOUBLE_EQ(y[size_t(bt) * W + c], x[size_t(bt) * W + c]);
  for (int bt = 0; bt < B * T; ++bt)
    for (int h = 0; h < NH + NKV; ++h)
      for (int i = 0; i < hs / 2; ++i) {
        const size_t a = size_t(bt) * W + h * hs + i, p = a + hs / 2;
        EXPECT_NEAR(y[a] * y[a] + y[p] * y[p], x[a] * x[a] + x[p] * x[p], 1e-5);  // cos, sin from float32
      }
}

TEST(GradCheck, Rope) { check_rope(nullptr, 60); }

TEST(GradCheck, SwiGlu) {
  const int N = 3, I = 7;
  auto inp = random_vector(N * 2 * I, 70, 2.0);
  const auto r = random_vector(N * I, 71);
  std::vector<double> out(N * I);
  auto loss = [&] {
    cpu::swiglu_forward(out.data(), inp.data(), N, I);
    return dot(r, out.data());
  };
  std::vector<double> dinp(N * 2 * I, 3.0);  // overwritten
  cpu::swiglu_backward(dinp.data(), inp.data(), r.data(), N, I);
  expect_gradient_matches("swiglu", inp, dinp, loss);
  // silu(g) * u against its definition.
  loss();
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < I; ++i) {
      const double g = inp[n * 2 * I + i], u = inp[n * 2 * I + I + i];
      EXPECT_NEAR(out[n * I + i], g / (1.0 + std::exp(-g)) * u, 1e-12);
    }
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

TEST(GradCheck, EncoderWithDocumentPositions) {
  const int B = 2, T = 5, C = 3, Vp = 4;
  const std::vector<int32_t> tokens = {1, 3, 1, 0, 2, 3, 3, 0, 1, 2};
  auto wte = random_vector(Vp * C, 30), wpe = random_vector(T * C, 31);
  const auto r = random_vector(B * T * C, 32);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 0, Vp, kDocumentPositions);
    return dot(r, out.data());
  };
  std::vector<double> dwte(Vp * C), dwpe(T * C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C, 0, Vp, kDocumentPositions);
  expect_gradient_matches("encoder dwte, documents", wte, dwte, loss);
  expect_gradient_matches("encoder dwpe, documents", wpe, dwpe, loss);
  for (int c = 0; c < C; ++c) EXPECT_EQ(dwpe[size_t(4 * C + c)], 0.0);  // no document reaches position 4
}

TEST(GradCheck, RopeWithDocumentPositions) { check_rope(kDocumentPositions, 62); }

TEST(GradCheck, DocumentMasksComputeWhatEachDocumentAloneWould) {
  // A row packing documents of 3, 1 and 4 tokens gives, at each token, the attention output, the
  // rotary embedding and the learned-position embedding of that document run alone; and the
  // gradients of the packed row are those of the documents alone, side by side.
  const int T = 8, NH = 2, NKV = 1, hs = 4, W = (NH + 2 * NKV) * hs, C = NH * hs;
  const std::vector<int> lengths = {3, 1, 4};
  const std::vector<int32_t> positions = {0, 1, 2, 0, 0, 1, 2, 3};
  const auto qkv = random_vector(T * W, 26), dout = random_vector(T * C, 27);
  std::vector<double> cos, sin;
  rope_tables_double(T, hs, cos, sin);
  std::vector<double> packed = qkv, out(T * C), att(NH * T * T), dqkv(T * W);
  cpu::rope_forward(packed.data(), cos.data(), sin.data(), 1, T, NH, NKV, hs, positions.data());
  cpu::attention_forward(out.data(), att.data(), packed.data(), 1, T, NH, NKV, hs, positions.data());
  std::vector<double> scratch(static_cast<size_t>(cpu::attention_scratch_size(T, 4)));
  cpu::attention_backward(dqkv.data(), dout.data(), packed.data(), att.data(), 1, T, NH, NKV, hs, positions.data(),
                          scratch.data(), long(scratch.size()));
  cpu::rope_backward(dqkv.data(), cos.data(), sin.data(), 1, T, NH, NKV, hs, positions.data());
  const int Vp = 3;
  const std::vector<int32_t> tokens = {1, 2, 0, 1, 2, 2, 0, 1};
  const auto wte = random_vector(Vp * C, 28), wpe = random_vector(T * C, 29);
  std::vector<double> embedded(T * C);
  cpu::encoder_forward(embedded.data(), tokens.data(), wte.data(), wpe.data(), 1, T, C, 0, Vp, positions.data());
  int first = 0;
  for (const int n : lengths) {
    std::vector<double> alone(qkv.begin() + first * W, qkv.begin() + (first + n) * W), y(size_t(n) * C),
        p(size_t(NH) * n * n), d(size_t(n) * W), e(size_t(n) * C);
    const std::vector<double> dy(dout.begin() + first * C, dout.begin() + (first + n) * C);
    cpu::rope_forward(alone.data(), cos.data(), sin.data(), 1, n, NH, NKV, hs);
    cpu::attention_forward(y.data(), p.data(), alone.data(), 1, n, NH, NKV, hs);
    std::vector<double> small_scratch(static_cast<size_t>(cpu::attention_scratch_size(n, 4)));
    cpu::attention_backward(d.data(), dy.data(), alone.data(), p.data(), 1, n, NH, NKV, hs, nullptr,
                            small_scratch.data(), long(small_scratch.size()));
    cpu::rope_backward(d.data(), cos.data(), sin.data(), 1, n, NH, NKV, hs);
    cpu::encoder_forward(e.data(), tokens.data() + first, wte.data(), wpe.data(), 1, n, C, 0, Vp);
    for (int i = 0; i < n * C; ++i) {
      EXPECT_NEAR(out[size_t(first * C + i)], y[size_t(i)], 1e-12) << "document at " << first << ", element " << i;
      EXPECT_EQ(embedded[size_t(first * C + i)], e[size_t(i)]) << "document at " << first << ", element " << i;
    }
    for (int i = 0; i < n * W; ++i)
      EXPECT_NEAR(dqkv[size_t(first * W + i)], d[size_t(i)], 1e-12) << "document at " << first << ", element " << i;
    first += n;
  }
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

// A target < 0 (left out by a loss mask) adds no loss and no gradient; the other rows are as
// they would be alone, and finite differences agree with the masked gradient.
TEST(GradCheck, CrossEntropyIgnoresNegativeTargets) {
  const int N = 4, V = 10, Vp = 16;
  auto logits = random_vector(N * Vp, 27, 3.0);
  const std::vector<int32_t> targets = {2, -1, 7, -1};
  const double dloss = 0.5;
  std::vector<double> losses(N);
  auto loss = [&] {
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    double s = 0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  const double reference = loss();
  EXPECT_EQ(losses[1], 0.0);
  EXPECT_EQ(losses[3], 0.0);
  std::vector<double> grad = logits, losses2(N);
  cpu::cross_entropy_forward_backward(grad.data(), losses2.data(), targets.data(), N, V, Vp, dloss);
  for (int v = 0; v < Vp; ++v) {
    EXPECT_EQ(grad[1 * Vp + v], 0.0);
    EXPECT_EQ(grad[3 * Vp + v], 0.0);
  }
  expect_gradient_matches("cross-entropy dlogits with ignored targets", logits, grad, loss);
  // The counted rows alone give the same losses.
  std::vector<double> kept(logits.begin(), logits.begin() + Vp);
  kept.insert(kept.end(), logits.begin() + 2 * Vp, logits.begin() + 3 * Vp);
  const std::vector<int32_t> kept_targets = {2, 7};
  std::vector<double> kept_losses(2);
  cpu::cross_entropy_forward(kept_losses.data(), kept.data(), kept_targets.data(), 2, V, Vp);
  EXPECT_DOUBLE_EQ(kept_losses[0], losses[0]);
  EXPECT_DOUBLE_EQ(kept_losses[1], losses[2]);
  EXPECT_NEAR(dloss * (kept_losses[0] + kept_losses[1]), reference, 1e-12);
}


// The router: L = R . weight + sum_e a_e sum_n probs[n, e] + z sum_n lse[n]^2 (the form of the
// load-balancing loss's term, the same for every row, and of the z-loss), top-k renormalised or
// not; the choices stay fixed under the small steps (the logits are far from ties).
void check_moe_route(bool renormalize) {
  const int N = 5, E = 6, k = 2;
  auto logits = random_vector(N * E, 90, 2.0);
  const auto r = random_vector(N * k, 91);
  const auto a = random_vector(E, 92, 0.3);
  const double z = 0.07;
  std::vector<double> probs(N * E), lse(N), weight(N * k), prob_sum(E);
  std::vector<int32_t> expert(N * k);
  auto loss = [&] {
    cpu::moe_route(probs.data(), lse.data(), expert.data(), weight.data(), prob_sum.data(), logits.data(), N, E, k,
                   renormalize);
    double l = dot(r, weight.data()) + dot(a, prob_sum.data());
    for (double x : lse) l += z * x * x;
    return l;
  };
  loss();
  std::vector<double> dlogits(N * E, 3.0);  // overwritten
  cpu::moe_route_backward(dlogits.data(), probs.data(), lse.data(), expert.data(), weight.data(), r.data(), a.data(), z,
                          N, E, k, renormalize);
  expect_gradient_matches(renormalize ? "moe_route renormalised" : "moe_route", logits, dlogits, loss);
}

TEST(GradCheck, MoeRouteRenormalised) { check_moe_route(true); }
TEST(GradCheck, MoeRoute) { check_moe_route(false); }

TEST(GradCheck, MoeGatherAndCombine) {
  // 4 tokens, 2 choices each over 8 rows in a scrambled order; one choice dropped.
  const int N = 4, k = 2, C = 5, M = 8;
  const std::vector<int32_t> slot = {5, 0, 3, -1, 7, 1, 2, 6};
  std::vector<int32_t> token(M, 0);
  for (int i = 0; i < N * k; ++i)
    if (slot[size_t(i)] >= 0) token[size_t(slot[size_t(i)])] = i / k;
  auto inp = random_vector(N * C, 93), rows = random_vector(M * C, 94), weight = random_vector(N * k, 95);
  const auto r = random_vector(N * C, 96), q = random_vector(M * C, 97);
  std::vector<double> out(N * C), gathered(M * C);
  auto combined = [&] {
    std::fill(out.begin(), out.end(), 0.0);
    cpu::moe_combine(out.data(), rows.data(), slot.data(), weight.data(), N, k, C);
    return dot(r, out.data());
  };
  std::vector<double> drows(M * C, 0.0), dweight(N * k, 3.0);
  cpu::moe_combine_backward(drows.data(), dweight.data(), r.data(), rows.data(), slot.data(), weight.data(), N, k, C);
  expect_gradient_matches("moe_combine rows", rows, drows, combined);
  expect_gradient_matches("moe_combine weight", weight, dweight, combined);
  auto gather = [&] {
    cpu::moe_gather(gathered.data(), inp.data(), token.data(), M, C);
    double l = 0;
    for (int m = 0; m < M; ++m)  // row 4 belongs to the dropped choice: nothing reads it
      if (std::find(slot.begin(), slot.end(), m) != slot.end())
        for (int c = 0; c < C; ++c) l += q[size_t(m * C + c)] * gathered[size_t(m * C + c)];
    return l;
  };
  std::vector<double> dinp(N * C, 0.0);
  cpu::moe_gather_backward(dinp.data(), q.data(), slot.data(), N, k, C);
  expect_gradient_matches("moe_gather", inp, dinp, gather);
}

TEST(GradCheck, MoeSharedGate) {
  const int N = 7;
  auto logits = random_vector(N, 98, 3.0);
  const auto r = random_vector(N, 99);
  std::vector<double> gate(N);
  auto loss = [&] {
    cpu::moe_shared_gate(gate.data(), logits.data(), N);
    return dot(r, gate.data());
  };
  loss();
  std::vector<double> dlogits(N);
  cpu::moe_shared_gate_backward(dlogits.data(), gate.data(), r.data(), N);
  expect_gradient_matches("moe_shared_gate", logits, dlogits, loss);
}

}  // namespace
}  // namespace feast
