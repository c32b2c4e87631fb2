// The cases of the matrix products against the float64 templates of backend/cpu/matmul.h (and
// gelu.h for the fused GELU): weights (OC, C) like torch.nn.Linear, gradients of weights and
// biases accumulated onto nonzero float32 values, gradients of inputs overwritten.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/lora.h"
#include "backend/cpu/matmul.h"

namespace feast::check {
namespace {

std::string product_shape(int N, int C, int OC) {
  return "N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
}

// The middle chunk of weight rows matmul_backward_weight_rows reduces: [OC/3, 2 OC/3 + 1).
int rows_begin(int OC) { return OC / 3; }
int rows_end(int OC) { return std::min(OC, 2 * OC / 3 + 1); }

void matmul_forward(CheckHarness& h, int N, int C, int OC, bool with_bias) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  const Operand x = h.activations(n * c), w = h.activations(oc * c);
  const Operand bias = with_bias ? h.activations(oc) : Operand{};
  const Operand out = h.activations(n * oc);
  h.backend().matmul_forward(out.view(), x.view(), w.view(), bias.view(), N, C, OC);
  std::vector<double> want(n * oc);
  cpu::matmul_forward(want.data(), x.data(), w.data(), bias.data(), N, C, OC);
  h.compare("out", out, want);
}

void matmul_gelu_forward(CheckHarness& h, int N, int C, int OC, bool with_bias) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  const Operand x = h.activations(n * c), w = h.activations(oc * c);
  const Operand bias = with_bias ? h.activations(oc) : Operand{};
  const Operand pre = h.activations(n * oc), act = h.activations(n * oc);
  h.backend().matmul_gelu_forward(pre.view(), act.view(), x.view(), w.view(), bias.view(), N, C, OC);
  std::vector<double> want_pre(n * oc), want_act(n * oc);
  cpu::matmul_forward(want_pre.data(), x.data(), w.data(), bias.data(), N, C, OC);
  cpu::gelu_forward(want_act.data(), want_pre.data(), n * oc);
  h.compare("pre", pre, want_pre);
  h.compare("act", act, want_act);
}

void matmul_backward(CheckHarness& h, int N, int C, int OC, bool with_dinp, bool with_dbias) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  const Operand x = h.activations(n * c), w = h.activations(oc * c), dout = h.activations(n * oc);
  const Operand dinp = with_dinp ? h.activations(n * c) : Operand{}, dweight = h.floats(oc * c);
  const Operand dbias = with_dbias ? h.floats(oc) : Operand{};
  h.backend().matmul_backward(dinp.view(), dweight.view(), dbias.view(), dout.view(), x.view(), w.view(), N, C, OC);
  std::vector<double> want_dinp(with_dinp ? n * c : 0), want_dweight = dweight.values, want_dbias = dbias.values;
  cpu::matmul_backward(with_dinp ? want_dinp.data() : nullptr, want_dweight.data(),
                       with_dbias ? want_dbias.data() : nullptr, dout.data(), x.data(), w.data(), N, C, OC);
  if (with_dinp) h.compare("dinp", dinp, want_dinp);
  h.compare("dweight", dweight, want_dweight);
  if (with_dbias) h.compare("dbias", dbias, want_dbias);
}

void matmul_backward_input(CheckHarness& h, int N, int C, int OC) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  const Operand w = h.activations(oc * c), dout = h.activations(n * oc), dinp = h.activations(n * c);
  h.backend().matmul_backward_input(dinp.view(), dout.view(), w.view(), N, C, OC);
  std::vector<double> want(n * c);
  cpu::matmul_backward_input(want.data(), dout.data(), w.data(), N, C, OC);
  h.compare("dinp", dinp, want);
}

void matmul_backward_weight_rows(CheckHarness& h, int N, int C, int OC) {
  const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
  const int begin = rows_begin(OC), end = rows_end(OC);
  const Operand x = h.activations(n * c), dout = h.activations(n * oc);
  const Operand rows = h.floats(size_t(end - begin) * c);
  h.backend().matmul_backward_weight_rows(rows.view(), dout.view(), x.view(), N, C, OC, begin, end);
  std::vector<double> want = rows.values;
  cpu::matmul_backward_weight_rows(want.data(), dout.data(), x.data(), N, C, OC, begin, end);
  h.compare("dweight_rows", rows, want);
}

// Groups of rows (a mixture of experts' experts), each times its own weight (OC, C). The weights
// lie one after another in one buffer `skew` elements in, as experts do in the flat parameter
// buffer, so that they start at addresses a product must not assume aligned.
std::string grouped_shape(const std::vector<int>& rows, int C, int OC, int skew) {
  std::string s = "rows";
  for (int r : rows) {
    s += ' ';
    s += std::to_string(r);
  }
  return s + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) + " skew " + std::to_string(skew);
}

void grouped_matmul(CheckHarness& h, const std::vector<int>& rows, int C, int OC, int skew, bool backward_input) {
  const size_t c = size_t(C), oc = size_t(OC), wsize = oc * c;
  std::vector<int> offsets{0};
  for (int r : rows) offsets.push_back(offsets.back() + r);
  const size_t R = size_t(offsets.back());
  const Operand w = h.activations(size_t(skew) + rows.size() * wsize);
  std::vector<TensorView> weights;
  for (size_t g = 0; g < rows.size(); ++g) weights.push_back(w.view().slice(size_t(skew) + g * wsize, wsize));
  const size_t in_width = backward_input ? oc : c, out_width = backward_input ? c : oc;
  const Operand in = h.activations(R * in_width), out = h.activations(R * out_width);
  if (backward_input) h.backend().grouped_matmul_backward_input(out.view(), in.view(), weights, offsets, C, OC);
  else h.backend().grouped_matmul_forward(out.view(), in.view(), weights, offsets, C, OC);
  std::vector<double> want(R * out_width);
  for (size_t g = 0; g < rows.size(); ++g) {
    const size_t r0 = size_t(offsets[g]);
    const double* wg = w.data() + size_t(skew) + g * wsize;
    if (backward_input)
      cpu::matmul_backward_input(want.data() + r0 * c, in.data() + r0 * oc, wg, rows[g], C, OC);
    else
      cpu::matmul_forward(want.data() + r0 * oc, in.data() + r0 * c, wg, static_cast<const double*>(nullptr), rows[g], C, OC);
  }
  h.compare(backward_input ? "dinp" : "out", out, want);
}

std::string lora_shape(const LoraShape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " r=" + std::to_string(s.r) + " cols [" +
         std::to_string(s.col) + "," + std::to_string(s.col + s.OC) + ") of " + std::to_string(s.out_ld) +
         " scale " + format_number(s.scale);
}

// The output and input gradient start nonzero: the op adds to them.
void lora_forward(CheckHarness& h, const LoraShape& s) {
  const size_t n = size_t(s.N), c = size_t(s.C), r = size_t(s.r);
  const Operand x = h.activations(n * c), a = h.activations(r * c), b = h.activations(size_t(s.OC) * r);
  const Operand out = h.activations(n * size_t(s.out_ld)), hid = h.activations(n * r);
  h.backend().lora_forward(out.view(), hid.view(), x.view(), a.view(), b.view(), s);
  std::vector<double> want = out.values, want_h(n * r);
  cpu::lora_forward(want.data(), want_h.data(), x.data(), a.data(), b.data(), s);
  h.compare("out", out, want);
  h.compare("h", hid, want_h);
}

void lora_backward(CheckHarness& h, const LoraShape& s, bool with_dinp) {
  const size_t n = size_t(s.N), c = size_t(s.C), r = size_t(s.r), oc = size_t(s.OC);
  const Operand x = h.activations(n * c), a = h.activations(r * c), b = h.activations(oc * r);
  const Operand dout = h.activations(n * size_t(s.out_ld)), hid = h.activations(n * r), dh = h.activations(n * r);
  const Operand dinp = with_dinp ? h.activations(n * c) : Operand{};
  const Operand da = h.floats(r * c), db = h.floats(oc * r);
  h.backend().lora_backward(dinp.view(), da.view(), db.view(), hid.view(), dh.view(), dout.view(), x.view(), a.view(),
                            b.view(), s);
  std::vector<double> want_dinp = dinp.values, want_da = da.values, want_db = db.values, want_h(n * r), want_dh(n * r);
  cpu::lora_backward(with_dinp ? want_dinp.data() : nullptr, want_da.data(), want_db.data(), want_h.data(),
                     want_dh.data(), dout.data(), x.data(), a.data(), b.data(), s);
  if (with_dinp) h.compare("dinp", dinp, want_dinp);
  h.compare("da", da, want_da);
  h.compare("db", db, want_db);
  h.compare("dh", dh, want_dh);
}

}  // namespace

OpCase lora_forward_case(const LoraShape& s) {
  return {"lora_forward", lora_shape(s), HeldTo::kComputeDtype, [=](CheckHarness& h) { lora_forward(h, s); }};
}
OpCase lora_backward_case(const LoraShape& s, bool dinp) {
  return {"lora_backward", lora_shape(s) + (dinp ? " dinp" : ""), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { lora_backward(h, s, dinp); }};
}

OpCase matmul_forward_case(int N, int C, int OC, bool bias) {
  return {"matmul_forward", product_shape(N, C, OC) + (bias ? " bias" : ""), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { matmul_forward(h, N, C, OC, bias); }};
}
OpCase matmul_gelu_forward_case(int N, int C, int OC, bool bias) {
  return {"matmul_gelu_forward", product_shape(N, C, OC) + (bias ? " bias" : ""), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { matmul_gelu_forward(h, N, C, OC, bias); }};
}
OpCase matmul_backward_case(int N, int C, int OC, bool dinp, bool dbias) {
  return {"matmul_backward", product_shape(N, C, OC) + (dinp ? " dinp" : "") + (dbias ? " dbias" : ""),
          HeldTo::kComputeDtype, [=](CheckHarness& h) { matmul_backward(h, N, C, OC, dinp, dbias); }};
}
OpCase matmul_backward_input_case(int N, int C, int OC) {
  return {"matmul_backward_input", product_shape(N, C, OC), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { matmul_backward_input(h, N, C, OC); }};
}
OpCase grouped_matmul_forward_case(const std::vector<int>& rows, int C, int OC, int skew) {
  return {"grouped_matmul_forward", grouped_shape(rows, C, OC, skew), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { grouped_matmul(h, rows, C, OC, skew, false); }};
}
OpCase grouped_matmul_backward_input_case(const std::vector<int>& rows, int C, int OC, int skew) {
  return {"grouped_matmul_backward_input", grouped_shape(rows, C, OC, skew), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { grouped_matmul(h, rows, C, OC, skew, true); }};
}
OpCase matmul_backward_weight_rows_case(int N, int C, int OC) {
  const std::string rows = " rows [" + std::to_string(rows_begin(OC)) + "," + std::to_string(rows_end(OC)) + ")";
  return {"matmul_backward_weight_rows", product_shape(N, C, OC) + rows, HeldTo::kComputeDtype,
          [=](CheckHarness& h) { matmul_backward_weight_rows(h, N, C, OC); }};
}

}  // namespace feast::check
