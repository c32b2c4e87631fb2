// The cases of the embedding and the norms against the float64 templates of backend/cpu/.
// A backward's saved statistics come from the float64 forward, rounded to the float32 the
// tested side holds, so both sides read the same inputs and a row measures the backward alone.
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/cpu/encoder.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/rmsnorm.h"

namespace feast::check {
namespace {

constexpr float kLayerNormEps = 1e-5f, kRmsNormEps = 1e-6f;

std::string embedding_shape(const EmbeddingShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) + " vocab [" +
         std::to_string(s.vocab_begin) + "," + std::to_string(s.vocab_end) + ") of " + std::to_string(s.token_range) +
         (s.positions ? " +wpe" : "") + (s.documents ? " documents" : "");
}

std::string rows_shape(int N, int C) { return "N=" + std::to_string(N) + " C=" + std::to_string(C); }

// Tokens drawn from [0, token_range), with the local range's edges and the ids just outside it.
std::vector<int32_t> embedding_tokens(CheckHarness& h, const EmbeddingShape& s) {
  const size_t N = size_t(s.B) * size_t(s.T);
  std::vector<int32_t> tok = h.random_ids(N, s.token_range);
  tok[0] = s.vocab_begin;
  if (N > 1) tok[N - 1] = s.vocab_end - 1;
  if (N > 2) tok[1] = s.vocab_end;
  if (N > 3 && s.vocab_begin > 0) tok[2] = s.vocab_begin - 1;
  return tok;
}

void embedding_forward(CheckHarness& h, const EmbeddingShape& s) {
  const size_t N = size_t(s.B) * size_t(s.T), C = size_t(s.C), Vl = size_t(s.vocab_end - s.vocab_begin);
  const std::vector<int32_t> tok = embedding_tokens(h, s);
  const Tensor tokens = h.ints(tok);
  const Operand wte = h.activations(Vl * C), wpe = s.positions ? h.activations(size_t(s.T) * C) : Operand{};
  const Operand out = h.activations(N * C);
  const std::vector<int32_t> pos = s.documents ? case_document_positions(s.B, s.T) : std::vector<int32_t>{};
  const Tensor positions = s.documents ? h.ints(pos) : Tensor{};
  h.backend().embedding_forward(out.view(), tokens.view(), wte.view(), wpe.view(), positions.view(), s.B, s.T, s.C,
                                s.vocab_begin, s.vocab_end);
  std::vector<double> want(N * C);
  cpu::encoder_forward(want.data(), tok.data(), wte.data(), wpe.data(), s.B, s.T, s.C, s.vocab_begin, s.vocab_end,
                       s.documents ? pos.data() : nullptr);
  h.compare("out", out, want);
}

// dwte and dwpe accumulate: both sides start from the same nonzero values.
void embedding_backward(CheckHarness& h, const EmbeddingShape& s) {
  const size_t N = size_t(s.B) * size_t(s.T), C = size_t(s.C), Vl = size_t(s.vocab_end - s.vocab_begin);
  const std::vector<int32_t> tok = embedding_tokens(h, s);
  const Tensor tokens = h.ints(tok);
  const Operand dout = h.activations(N * C), dwte = h.floats(Vl * C);
  const Operand dwpe = s.positions ? h.floats(size_t(s.T) * C) : Operand{};
  const std::vector<int32_t> pos = s.documents ? case_document_positions(s.B, s.T) : std::vector<int32_t>{};
  const Tensor positions = s.documents ? h.ints(pos) : Tensor{};
  h.backend().embedding_backward(dwte.view(), dwpe.view(), dout.view(), tokens.view(), positions.view(), s.B, s.T,
                                 s.C, s.vocab_begin, s.vocab_end);
  std::vector<double> want_dwte = dwte.values, want_dwpe = dwpe.values;
  cpu::encoder_backward(want_dwte.data(), s.positions ? want_dwpe.data() : nullptr, dout.data(), tok.data(), s.B, s.T,
                        s.C, s.vocab_begin, s.vocab_end, s.documents ? pos.data() : nullptr);
  h.compare("dwte", dwte, want_dwte);
  if (s.positions) h.compare("dwpe", dwpe, want_dwpe);
}

// The norms' inputs: x (N, C) off zero, weight (C) near 1, bias (C) for layernorm.
struct NormInputs {
  Operand x, w, b;
};
NormInputs norm_inputs(CheckHarness& h, int N, int C) {
  NormInputs in;
  in.x = h.activations(size_t(N) * size_t(C), 2.0, 0.5);
  in.w = h.activations(size_t(C), 0.5, 1.0);
  in.b = h.activations(size_t(C), 0.5);
  return in;
}

void layernorm_forward(CheckHarness& h, int N, int C) {
  const size_t NC = size_t(N) * size_t(C);
  const NormInputs in = norm_inputs(h, N, C);
  const Operand out = h.activations(NC), mean = h.floats(size_t(N)), rstd = h.floats(size_t(N));
  h.backend().layernorm_forward(out.view(), mean.view(), rstd.view(), in.x.view(), in.w.view(), in.b.view(), N, C,
                                kLayerNormEps);
  std::vector<double> want_out(NC), want_mean(static_cast<size_t>(N)), want_rstd(static_cast<size_t>(N));
  cpu::layernorm_forward(want_out.data(), want_mean.data(), want_rstd.data(), in.x.data(), in.w.data(), in.b.data(),
                         N, C, double(kLayerNormEps));
  h.compare("out", out, want_out);
  h.compare("mean", mean, want_mean);
  h.compare("rstd", rstd, want_rstd);
}

// dinp, dweight and dbias accumulate (the residual stream's gradient arrives first).
void layernorm_backward(CheckHarness& h, int N, int C) {
  const size_t NC = size_t(N) * size_t(C);
  const NormInputs in = norm_inputs(h, N, C);
  std::vector<double> out(NC), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), in.x.data(), in.w.data(), in.b.data(), N, C,
                         double(kLayerNormEps));
  const Operand saved_mean = h.upload(mean, DType::kFloat32), saved_rstd = h.upload(rstd, DType::kFloat32);
  const Operand dout = h.activations(NC), dinp = h.activations(NC);
  const Operand dweight = h.floats(size_t(C)), dbias = h.floats(size_t(C));
  h.backend().layernorm_backward(dinp.view(), dweight.view(), dbias.view(), dout.view(), in.x.view(), in.w.view(),
                                 saved_mean.view(), saved_rstd.view(), N, C);
  std::vector<double> want_dinp = dinp.values, want_dweight = dweight.values, want_dbias = dbias.values;
  cpu::layernorm_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(), in.x.data(),
                          in.w.data(), saved_mean.data(), saved_rstd.data(), N, C);
  h.compare("dinp", dinp, want_dinp);
  h.compare("dweight", dweight, want_dweight);
  h.compare("dbias", dbias, want_dbias);
}

void rmsnorm_forward(CheckHarness& h, int N, int C) {
  const size_t NC = size_t(N) * size_t(C);
  const NormInputs in = norm_inputs(h, N, C);
  const Operand out = h.activations(NC), rstd = h.floats(size_t(N));
  h.backend().rmsnorm_forward(out.view(), rstd.view(), in.x.view(), in.w.view(), N, C, kRmsNormEps);
  std::vector<double> want_out(NC), want_rstd(static_cast<size_t>(N));
  cpu::rmsnorm_forward(want_out.data(), want_rstd.data(), in.x.data(), in.w.data(), N, C, double(kRmsNormEps));
  h.compare("out", out, want_out);
  h.compare("rstd", rstd, want_rstd);
}

void rmsnorm_backward(CheckHarness& h, int N, int C) {
  const size_t NC = size_t(N) * size_t(C);
  const NormInputs in = norm_inputs(h, N, C);
  std::vector<double> out(NC), rstd(static_cast<size_t>(N));
  cpu::rmsnorm_forward(out.data(), rstd.data(), in.x.data(), in.w.data(), N, C, double(kRmsNormEps));
  const Operand saved_rstd = h.upload(rstd, DType::kFloat32);
  const Operand dout = h.activations(NC), dinp = h.activations(NC), dweight = h.floats(size_t(C));
  h.backend().rmsnorm_backward(dinp.view(), dweight.view(), dout.view(), in.x.view(), in.w.view(), saved_rstd.view(),
                               N, C);
  std::vector<double> want_dinp = dinp.values, want_dweight = dweight.values;
  cpu::rmsnorm_backward(want_dinp.data(), want_dweight.data(), dout.data(), in.x.data(), in.w.data(),
                        saved_rstd.data(), N, C);
  h.compare("dinp", dinp, want_dinp);
  h.compare("dweight", dweight, want_dweight);
}

}  // namespace

std::vector<int32_t> case_document_positions(int B, int T) {
  std::vector<int32_t> positions(size_t(B) * size_t(T));
  const int lengths[] = {5, 1, 9, 3, 1, 1, 14, 2, 33};
  for (int b = 0; b < B; ++b) {
    int d = b, in_document = 0;
    for (int t = 0; t < T; ++t) {
      if (in_document == lengths[size_t(d) % std::size(lengths)]) {
        ++d;
        in_document = 0;
      }
      positions[size_t(b) * size_t(T) + size_t(t)] = in_document++;
    }
  }
  return positions;
}

OpCase embedding_forward_case(const EmbeddingShape& s) {
  return {"embedding_forward", embedding_shape(s), HeldTo::kComputeDtype,
          [s](CheckHarness& h) { embedding_forward(h, s); }};
}
OpCase embedding_backward_case(const EmbeddingShape& s) {
  return {"embedding_backward", embedding_shape(s), HeldTo::kComputeDtype,
          [s](CheckHarness& h) { embedding_backward(h, s); }};
}
OpCase layernorm_forward_case(int N, int C) {
  return {"layernorm_forward", rows_shape(N, C), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { layernorm_forward(h, N, C); }};
}
OpCase layernorm_backward_case(int N, int C) {
  return {"layernorm_backward", rows_shape(N, C), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { layernorm_backward(h, N, C); }};
}
OpCase rmsnorm_forward_case(int N, int C) {
  return {"rmsnorm_forward", rows_shape(N, C), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { rmsnorm_forward(h, N, C); }};
}
OpCase rmsnorm_backward_case(int N, int C) {
  return {"rmsnorm_backward", rows_shape(N, C), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { rmsnorm_backward(h, N, C); }};
}

}  // namespace feast::check
