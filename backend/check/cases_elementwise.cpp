// The cases of the element-wise ops against the float64 templates of backend/cpu/gelu.h and
// swiglu.h, and the residual add against a plain double loop; in place where the model calls
// them in place (gelu_backward's dinp = dout, add's out = b); LoRA dropout against
// backend/cpu/dropout.h (the same mask on both sides, backend/dropout_mask.h).
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/cpu/dropout.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/swiglu.h"

namespace feast::check {
namespace {

std::string count_shape(size_t n) { return "n=" + std::to_string(n); }
std::string mlp_shape(int N, int I) { return "N=" + std::to_string(N) + " I=" + std::to_string(I); }

// GELU's inputs reach its tails (scale 3) where there are many of them, measured against the
// largest output. A single element's row is its own relative error, and past x ~ -3.5 float32's
// 1 + tanh(u) keeps no 1e-4 of an output that small (the formula, not a kernel, loses it), so a
// lone input is drawn at scale 1.
Operand gelu_inputs(CheckHarness& h, size_t n) { return h.activations(n, n == 1 ? 1.0 : 3.0); }

void gelu_forward(CheckHarness& h, size_t n) {
  const Operand x = gelu_inputs(h, n), out = h.activations(n);
  h.backend().gelu_forward(out.view(), x.view(), n);
  std::vector<double> want(n);
  cpu::gelu_forward(want.data(), x.data(), n);
  h.compare("out", out, want);
}

void gelu_backward(CheckHarness& h, size_t n, bool in_place) {
  const Operand x = gelu_inputs(h, n), dout = h.activations(n);
  const Operand separate = in_place ? Operand{} : h.activations(n);
  const Operand& dinp = in_place ? dout : separate;
  h.backend().gelu_backward(dinp.view(), x.view(), dout.view(), n);
  std::vector<double> want(n);
  cpu::gelu_backward(want.data(), x.data(), dout.data(), n);
  h.compare("dinp", dinp, want);
}

std::string dropout_shape(const DropoutShape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " T=" + std::to_string(s.T) + " cols [" +
         std::to_string(s.col0) + "," + std::to_string(s.col0 + s.C) + ") of " + std::to_string(s.columns) +
         " p=" + std::to_string(s.p).substr(0, 4);
}

void dropout_forward(CheckHarness& h, const DropoutShape& s) {
  const size_t n = size_t(s.N) * size_t(s.C);
  const Operand x = h.activations(n), out = h.activations(n);
  h.backend().dropout_forward(out.view(), x.view(), s);
  std::vector<double> want(n);
  cpu::dropout_forward(want.data(), x.data(), s);
  h.compare("out", out, want);
}

// dinp accumulates: both sides start from the same values.
void dropout_backward(CheckHarness& h, const DropoutShape& s) {
  const size_t n = size_t(s.N) * size_t(s.C);
  const Operand dout = h.activations(n), dinp = h.activations(n);
  std::vector<double> want = dinp.values;
  h.backend().dropout_backward(dinp.view(), dout.view(), s);
  cpu::dropout_backward(want.data(), dout.data(), s);
  h.compare("dinp", dinp, want);
}

// inp (N, 2I) = [gate | up] per row.
void swiglu_forward(CheckHarness& h, int N, int I) {
  const size_t half = size_t(N) * size_t(I);
  const Operand x = h.activations(2 * half, 3.0), out = h.activations(half);
  h.backend().swiglu_forward(out.view(), x.view(), N, I);
  std::vector<double> want(half);
  cpu::swiglu_forward(want.data(), x.data(), N, I);
  h.compare("out", out, want);
}

void swiglu_backward(CheckHarness& h, int N, int I) {
  const size_t half = size_t(N) * size_t(I);
  const Operand x = h.activations(2 * half, 3.0), dout = h.activations(half), dinp = h.activations(2 * half);
  h.backend().swiglu_backward(dinp.view(), x.view(), dout.view(), N, I);
  std::vector<double> want(2 * half);
  cpu::swiglu_backward(want.data(), x.data(), dout.data(), N, I);
  h.compare("dinp", dinp, want);
}

void add(CheckHarness& h, size_t n, bool in_place) {
  const Operand a = h.activations(n), b = h.activations(n);
  const Operand separate = in_place ? Operand{} : h.activations(n);
  const Operand& out = in_place ? b : separate;
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = a.values[i] + b.values[i];
  h.backend().add(out.view(), a.view(), b.view(), n);
  h.compare("out", out, want);
}

}  // namespace

OpCase dropout_forward_case(const DropoutShape& s) {
  return {"dropout_forward", dropout_shape(s), HeldTo::kComputeDtype, [s](CheckHarness& h) { dropout_forward(h, s); }};
}
OpCase dropout_backward_case(const DropoutShape& s) {
  return {"dropout_backward", dropout_shape(s), HeldTo::kComputeDtype,
          [s](CheckHarness& h) { dropout_backward(h, s); }};
}
OpCase gelu_forward_case(size_t n) {
  return {"gelu_forward", count_shape(n), HeldTo::kComputeDtype, [n](CheckHarness& h) { gelu_forward(h, n); }};
}
OpCase gelu_backward_case(size_t n, bool in_place) {
  return {"gelu_backward", count_shape(n) + (in_place ? " in place (dinp = dout)" : ""), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { gelu_backward(h, n, in_place); }};
}
OpCase swiglu_forward_case(int N, int I) {
  return {"swiglu_forward", mlp_shape(N, I), HeldTo::kComputeDtype, [=](CheckHarness& h) { swiglu_forward(h, N, I); }};
}
OpCase swiglu_backward_case(int N, int I) {
  return {"swiglu_backward", mlp_shape(N, I), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { swiglu_backward(h, N, I); }};
}
OpCase add_case(size_t n, bool in_place) {
  return {"add", count_shape(n) + (in_place ? " in place (out = b)" : ""), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { add(h, n, in_place); }};
}

}  // namespace feast::check
