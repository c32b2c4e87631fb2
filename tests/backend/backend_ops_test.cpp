// Every op of a backend against the float64 reference (the CPU op templates instantiated for
// double) on odd shapes, through the Backend interface exactly as the model calls it: inputs
// are uploaded to the backend's device in its compute dtype, results downloaded and compared
// with |a - b| <= atol + rtol |b| (the worst element reported). This is the harness a second
// backend is tested with: add it to backends() and give it a tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cross_entropy.h"
#include "backend/cpu/encoder.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/swiglu.h"
#include "model/rope.h"
#include "tests/backend/gradcheck.h"

namespace feast {
namespace {

using testing::random_vector;

struct Tolerance {
  double atol, rtol;
};

// The backends under test and how closely each must match float64.
struct BackendCase {
  std::string device;
  Tolerance tol;
};
std::vector<BackendCase> backends() { return {{"cpu", {2e-5, 2e-4}}}; }

class BackendOps : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override { be = make_backend(GetParam().device); }

  // Rounds x to float (what the device will hold) and uploads it in the compute dtype.
  Tensor upload(std::vector<double>& x) {
    std::vector<float> f(x.begin(), x.end());
    for (size_t i = 0; i < x.size(); ++i) x[i] = f[i];
    return upload_float(f, be->compute_dtype());
  }
  Tensor upload_float(const std::vector<float>& f, DType dtype) {
    Tensor t = be->allocate(dtype, f.size());
    if (dtype == DType::kFloat32) {
      be->copy(t.view(), host_view(f.data(), f.size()));
    } else {
      Tensor tmp = be->allocate(DType::kFloat32, f.size());
      be->copy(tmp.view(), host_view(f.data(), f.size()));
      be->cast(t.view(), tmp.view());
    }
    return t;
  }
  // float32 state (gradients, statistics) starts from these values.
  Tensor upload_f32(std::vector<double>& x) {
    std::vector<float> f(x.begin(), x.end());
    for (size_t i = 0; i < x.size(); ++i) x[i] = f[i];
    return upload_float(f, DType::kFloat32);
  }
  Tensor ints(const std::vector<int32_t>& v) {
    Tensor t = be->allocate(DType::kInt32, v.size());
    be->copy(t.view(), host_view(v.data(), v.size()));
    return t;
  }
  std::vector<double> download(const Tensor& t) {
    std::vector<float> f(t.numel());
    if (t.dtype() == DType::kFloat32) {
      be->copy(host_view(f.data(), f.size()), t.view());
    } else {
      Tensor tmp = be->allocate(DType::kFloat32, t.numel());
      be->cast(tmp.view(), t.view());
      be->copy(host_view(f.data(), f.size()), tmp.view());
    }
    return {f.begin(), f.end()};
  }
  void expect_close(const std::string& what, const Tensor& actual, const std::vector<double>& expected) {
    const std::vector<double> a = download(actual);
    ASSERT_EQ(a.size(), expected.size()) << what;
    const Tolerance tol = GetParam().tol;
    double worst = -1;
    size_t at = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double excess = std::abs(a[i] - expected[i]) - (tol.atol + tol.rtol * std::abs(expected[i]));
      if (excess > worst) {
        worst = excess;
        at = i;
      }
    }
    EXPECT_LE(worst, 0.0) << GetParam().device << " " << what << ": element " << at << " is " << a[at]
                          << ", float64 reference " << expected[at];
  }

  std::unique_ptr<Backend> be;
};

TEST_P(BackendOps, Embedding) {
  const int B = 3, T = 5, C = 7, vb = 4, ve = 13;  // this rank holds vocabulary rows [4, 13)
  const std::vector<int32_t> tok = {4, 0, 12, 13, 4, 8, 8, 3, 12, 5, 6, 4, 20, 9, 10};
  auto wte = random_vector((ve - vb) * C, 1), wpe = random_vector(T * C, 2), dout = random_vector(B * T * C, 3);
  auto dwte = random_vector((ve - vb) * C, 4), dwpe = random_vector(T * C, 5);
  Tensor tokens = ints(tok), w = upload(wte), p = upload(wpe), d = upload(dout), gw = upload_f32(dwte),
         gp = upload_f32(dwpe), out = be->allocate(be->compute_dtype(), B * T * C);
  be->embedding_forward(out.view(), tokens.view(), w.view(), p.view(), B, T, C, vb, ve);
  be->embedding_backward(gw.view(), gp.view(), d.view(), tokens.view(), B, T, C, vb, ve);
  std::vector<double> ref(B * T * C);
  cpu::encoder_forward(ref.data(), tok.data(), wte.data(), wpe.data(), B, T, C, vb, ve);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C, vb, ve);
  expect_close("embedding_forward", out, ref);
  expect_close("embedding_backward dwte", gw, dwte);
  expect_close("embedding_backward dwpe", gp, dwpe);
}

TEST_P(BackendOps, Norms) {
  const int N = 9, C = 67;
  auto x = random_vector(N * C, 10, 2.0), w = random_vector(C, 11), b = random_vector(C, 12);
  auto dy = random_vector(N * C, 13), dx = random_vector(N * C, 14), dw = random_vector(C, 15), db = random_vector(C, 16);
  Tensor tx = upload(x), tw = upload(w), tb = upload(b), tdy = upload(dy), tdx = upload(dx), tdw = upload_f32(dw),
         tdb = upload_f32(db);
  Tensor out = be->allocate(be->compute_dtype(), N * C), mean = be->allocate(DType::kFloat32, N),
         rstd = be->allocate(DType::kFloat32, N);
  std::vector<double> rout(N * C), rmean(N), rrstd(N);
  be->layernorm_forward(out.view(), mean.view(), rstd.view(), tx.view(), tw.view(), tb.view(), N, C, 1e-5f);
  cpu::layernorm_forward(rout.data(), rmean.data(), rrstd.data(), x.data(), w.data(), b.data(), N, C, double(1e-5f));
  expect_close("layernorm_forward", out, rout);
  expect_close("layernorm_forward rstd", rstd, rrstd);
  be->layernorm_backward(tdx.view(), tdw.view(), tdb.view(), tdy.view(), tx.view(), tw.view(), mean.view(),
                         rstd.view(), N, C);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), rmean.data(), rrstd.data(),
                          N, C);
  expect_close("layernorm_backward dinp", tdx, dx);
  expect_close("layernorm_backward dweight", tdw, dw);
  expect_close("layernorm_backward dbias", tdb, db);

  be->rmsnorm_forward(out.view(), rstd.view(), tx.view(), tw.view(), N, C, 1e-6f);
  cpu::rmsnorm_forward(rout.data(), rrstd.data(), x.data(), w.data(), N, C, double(1e-6f));
  expect_close("rmsnorm_forward", out, rout);
  be->rmsnorm_backward(tdx.view(), tdw.view(), tdy.view(), tx.view(), tw.view(), rstd.view(), N, C);
  cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rrstd.data(), N, C);
  expect_close("rmsnorm_backward dinp", tdx, dx);
  expect_close("rmsnorm_backward dweight", tdw, dw);
}

TEST_P(BackendOps, Matmul) {
  const int N = 13, C = 21, OC = 35;
  auto x = random_vector(N * C, 20), w = random_vector(OC * C, 21), b = random_vector(OC, 22),
       dy = random_vector(N * OC, 23), dw = random_vector(OC * C, 24), db = random_vector(OC, 25);
  Tensor tx = upload(x), tw = upload(w), tb = upload(b), tdy = upload(dy), tdw = upload_f32(dw), tdb = upload_f32(db);
  Tensor out = be->allocate(be->compute_dtype(), N * OC), dx = be->allocate(be->compute_dtype(), N * C);
  std::vector<double> rout(N * OC), rdx(N * C);
  be->matmul_forward(out.view(), tx.view(), tw.view(), tb.view(), N, C, OC);
  cpu::matmul_forward(rout.data(), x.data(), w.data(), b.data(), N, C, OC);
  expect_close("matmul_forward", out, rout);
  be->matmul_backward(dx.view(), tdw.view(), tdb.view(), tdy.view(), tx.view(), tw.view(), N, C, OC);
  cpu::matmul_backward(rdx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
  expect_close("matmul_backward dinp", dx, rdx);
  expect_close("matmul_backward dweight", tdw, dw);
  expect_close("matmul_backward dbias", tdb, db);
  // The halves, over rows [5, 17) of the weight.
  be->matmul_backward_input(dx.view(), tdy.view(), tw.view(), N, C, OC);
  cpu::matmul_backward_input(rdx.data(), dy.data(), w.data(), N, C, OC);
  expect_close("matmul_backward_input", dx, rdx);
  std::vector<double> rows = random_vector(12 * C, 26);
  Tensor trows = upload_f32(rows);
  be->matmul_backward_weight_rows(trows.view(), tdy.view(), tx.view(), N, C, OC, 5, 17);
  cpu::matmul_backward_weight_rows(rows.data(), dy.data(), x.data(), N, C, OC, 5, 17);
  expect_close("matmul_backward_weight_rows", trows, rows);
}

TEST_P(BackendOps, GroupedQueryAttentionWithRope) {
  const AttentionShape s{2, 7, 6, 2, 4};  // B, T, query heads, key/value heads, head size
  const size_t N = s.rows(), W = size_t(s.qkv_width()), Cq = size_t(s.out_width());
  ModelConfig mc;
  mc.arch = "llama";
  mc.n_head = 1;
  mc.n_embd = s.head_dim;
  mc.max_seq_len = s.T;
  mc.rope_theta = 500000;
  mc.rope_scaling.rope_type = "llama3";
  mc.rope_scaling.original_max_position_embeddings = 4;
  std::vector<float> fcos, fsin;
  rope_tables(mc, fcos, fsin);
  std::vector<double> cos(fcos.begin(), fcos.end()), sin(fsin.begin(), fsin.end());
  auto qkv = random_vector(N * W, 30), dy = random_vector(N * Cq, 31);
  Tensor tqkv = upload(qkv), tdy = upload(dy), tcos = upload_float(fcos, DType::kFloat32),
         tsin = upload_float(fsin, DType::kFloat32);
  Tensor out = be->allocate(be->compute_dtype(), N * Cq), dqkv = be->allocate(be->compute_dtype(), N * W);
  Tensor state = be->allocate(DType::kFloat32, be->attention_state_size(s));
  Tensor ws = be->allocate(be->compute_dtype(), be->attention_workspace_size(s));
  be->rope_forward(tqkv.view(), tcos.view(), tsin.view(), s);
  be->attention_forward(out.view(), state.view(), tqkv.view(), s);
  be->attention_backward(dqkv.view(), tdy.view(), tqkv.view(), out.view(), state.view(), ws.view(), s);
  be->rope_backward(dqkv.view(), tcos.view(), tsin.view(), s);

  std::vector<double> rqkv = qkv, rout(N * Cq), ratt(size_t(s.B) * s.n_head * s.T * s.T), rdqkv(N * W);
  std::vector<double> scratch(size_t(cpu::attention_scratch_size(s.T, 1)));
  cpu::rope_forward(rqkv.data(), cos.data(), sin.data(), s.B, s.T, s.n_head, s.n_kv_head, s.head_dim);
  cpu::attention_forward(rout.data(), ratt.data(), rqkv.data(), s.B, s.T, s.n_head, s.n_kv_head, s.head_dim);
  cpu::attention_backward(rdqkv.data(), dy.data(), rqkv.data(), ratt.data(), s.B, s.T, s.n_head, s.n_kv_head,
                          s.head_dim, scratch.data(), long(scratch.size()));
  cpu::rope_backward(rdqkv.data(), cos.data(), sin.data(), s.B, s.T, s.n_head, s.n_kv_head, s.head_dim);
  expect_close("rope_forward", tqkv, rqkv);
  expect_close("attention_forward", out, rout);
  expect_close("attention_backward + rope_backward", dqkv, rdqkv);
}

TEST_P(BackendOps, ElementWise) {
  const int N = 5, I = 37;
  auto x = random_vector(N * 2 * I, 40, 2.0), dy = random_vector(N * 2 * I, 41), a = random_vector(N * I, 42);
  Tensor tx = upload(x), tdy = upload(dy), ta = upload(a);
  Tensor out = be->allocate(be->compute_dtype(), N * 2 * I), dx = be->allocate(be->compute_dtype(), N * 2 * I);
  const size_t n = size_t(N) * 2 * I;
  std::vector<double> rout(n), rdx(n);
  be->gelu_forward(out.view(), tx.view(), n);
  cpu::gelu_forward(rout.data(), x.data(), n);
  expect_close("gelu_forward", out, rout);
  be->gelu_backward(dx.view(), tx.view(), tdy.view(), n);
  cpu::gelu_backward(rdx.data(), x.data(), dy.data(), n);
  expect_close("gelu_backward", dx, rdx);

  Tensor sw = be->allocate(be->compute_dtype(), N * I);
  std::vector<double> rsw(N * I);
  be->swiglu_forward(sw.view(), tx.view(), N, I);
  cpu::swiglu_forward(rsw.data(), x.data(), N, I);
  expect_close("swiglu_forward", sw, rsw);
  be->swiglu_backward(dx.view(), tx.view(), ta.view(), N, I);
  cpu::swiglu_backward(rdx.data(), x.data(), a.data(), N, I);
  expect_close("swiglu_backward", dx, rdx);

  be->add(sw.view(), ta.view(), sw.view(), size_t(N) * I);  // out may alias an operand
  for (size_t i = 0; i < rsw.size(); ++i) rsw[i] += a[i];
  expect_close("add", sw, rsw);
}

TEST_P(BackendOps, VocabParallelCrossEntropy) {
  // This rank holds columns [64, 96) of a vocabulary of 90 padded to 128: 26 real, 6 padded.
  const int N = 6, Vl = 32, vb = 64, V = 90;
  const std::vector<int32_t> tgt = {70, 3, 89, 64, 80, 12};
  auto logits = random_vector(N * Vl, 50, 3.0), rmax = random_vector(N, 51);
  Tensor tl = upload(logits), targets = ints(tgt);
  Tensor mx = be->allocate(DType::kFloat32, N), se = be->allocate(DType::kFloat32, N),
         tlog = be->allocate(DType::kFloat32, N), losses = be->allocate(DType::kFloat32, N);
  std::vector<double> rmx(N), rse(N), rtl(N), rloss(N);
  be->cross_entropy_row_max(mx.view(), tl.view(), N, Vl, vb, V);
  cpu::cross_entropy_row_max(rmx.data(), logits.data(), N, Vl, vb, V);
  expect_close("cross_entropy_row_max", mx, rmx);
  // Another rank's larger maxima, as the max-reduction would bring them.
  for (int n = 0; n < N; ++n) rmx[size_t(n)] = std::max(rmx[size_t(n)], 1.5);
  Tensor gmx = upload_f32(rmx);
  be->cross_entropy_partials(se.view(), tlog.view(), tl.view(), gmx.view(), targets.view(), N, Vl, vb, V, true);
  cpu::cross_entropy_partials(rse.data(), rtl.data(), logits.data(), rmx.data(), tgt.data(), N, Vl, vb, V, true);
  expect_close("cross_entropy_partials sum_exp", se, rse);
  expect_close("cross_entropy_partials target_logit", tlog, rtl);
  expect_close("cross_entropy_partials exp(logits)", tl, logits);
  be->cross_entropy_finish(tl.view(), losses.view(), gmx.view(), se.view(), tlog.view(), targets.view(), N, Vl, vb,
                           V, 0.125f);
  cpu::cross_entropy_finish(logits.data(), rloss.data(), rmx.data(), rse.data(), rtl.data(), tgt.data(), N, Vl, vb, V,
                            0.125);
  expect_close("cross_entropy_finish losses", losses, rloss);
  expect_close("cross_entropy_finish dlogits", tl, logits);
  double total = 0;
  for (double l : rloss) total += l;
  EXPECT_NEAR(be->sum(losses.view()), total, 1e-5 * std::abs(total));
}

TEST_P(BackendOps, AdamWSumOfSquaresAndCasts) {
  const size_t n = 1001;
  auto p = random_vector(n, 60), m = random_vector(n, 61, 0.1), v = random_vector(n, 62, 0.1), g = random_vector(n, 63);
  for (double& x : v) x = std::abs(x);
  Tensor tp = upload_f32(p), tm = upload_f32(m), tv = upload_f32(v), tg = upload_f32(g);
  const AdamWStep step{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.75f};
  be->adamw_step(tp.view(), tm.view(), tv.view(), tg.view(), step, 0.5f);
  for (size_t i = 0; i < n; ++i) {
    const double grad = g[i] * 0.5;
    m[i] = 0.9 * m[i] + 0.1 * grad;
    v[i] = 0.95 * v[i] + 0.05 * grad * grad;
    p[i] *= 1 - 1e-2 * 0.1;
    p[i] -= (1e-2 / 0.5) * m[i] / (std::sqrt(v[i]) / 0.75 + 1e-8);
  }
  expect_close("adamw_step params", tp, p);
  expect_close("adamw_step exp_avg", tm, m);
  expect_close("adamw_step exp_avg_sq", tv, v);
  double ss = 0;
  for (double x : g) ss += x * x;
  EXPECT_NEAR(be->sum_of_squares(tg.view()), ss, 1e-5 * ss);

  // float32 -> bfloat16 -> float32 rounds to 8 significant bits, to nearest even (the values
  // torch.bfloat16 gives).
  const std::vector<float> values = {1.0f, 1.00390625f, 1.01171875f, -3.14159265f, 65504.0f, 1e-20f};
  const std::vector<double> rounded = {1.0, 1.0, 1.015625, -3.140625, 65536.0, 1.0005576689441423e-20};
  Tensor f = upload_float(values, DType::kFloat32), h = be->allocate(DType::kBFloat16, values.size()),
         back = be->allocate(DType::kFloat32, values.size());
  be->cast(h.view(), f.view());
  be->cast(back.view(), h.view());
  const std::vector<double> got = download(back);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], rounded[i]) << values[i];
}

TEST_P(BackendOps, OperandsAreChecked) {
  Tensor small = be->allocate(be->compute_dtype(), 10), ints32 = be->allocate(DType::kInt32, 100);
  Tensor out = be->allocate(be->compute_dtype(), 100);
  EXPECT_THROW(be->gelu_forward(out.view(), small.view(), 100), Error);   // too few elements
  EXPECT_THROW(be->gelu_forward(out.view(), ints32.view(), 100), Error);  // wrong dtype
  EXPECT_THROW(be->matmul_forward(out.view(), TensorView{}, small.view(), TensorView{}, 1, 1, 1), Error);  // missing
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<BackendCase>& p) { return p.param.device; });

}  // namespace
}  // namespace feast
