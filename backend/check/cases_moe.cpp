// The cases of the mixture-of-experts ops against the float64 templates of backend/cpu/moe.h:
// the router (softmax, top-k, the column sums) and its backward with the load-balancing and
// z-losses' terms, renormalised or not; the gather of rows and its backward, the weighted
// combine and its backward, with dropped choices (slot -1) and rows in a shuffled order; and
// the shared experts' sigmoid gate.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/cpu/moe.h"

namespace feast::check {
namespace {

std::string route_shape(int N, int E, int k, bool renormalize) {
  return "N=" + std::to_string(N) + " E=" + std::to_string(E) + " k=" + std::to_string(k) +
         (renormalize ? " renormalised" : "");
}
std::string rows_shape(int N, int k, int C) {
  return "N=" + std::to_string(N) + " k=" + std::to_string(k) + " C=" + std::to_string(C);
}

std::vector<double> as_doubles(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

std::vector<int32_t> download_ints(CheckHarness& h, const Tensor& t, size_t n) {
  std::vector<int32_t> out(n);
  h.backend().copy(host_view(out.data(), n), t.view().first(n));
  return out;
}

// The router's outputs in float64 for logits as the tested side holds them.
struct Routed {
  std::vector<double> probs, lse, weight, prob_sum;
  std::vector<int32_t> expert;
};
Routed route_reference(const Operand& logits, int N, int E, int k, bool renormalize) {
  Routed r{std::vector<double>(size_t(N) * size_t(E)), std::vector<double>(size_t(N)),
           std::vector<double>(size_t(N) * size_t(k)), std::vector<double>(size_t(E)),
           std::vector<int32_t>(size_t(N) * size_t(k))};
  cpu::moe_route(r.probs.data(), r.lse.data(), r.expert.data(), r.weight.data(), r.prob_sum.data(), logits.data(), N,
                 E, k, renormalize);
  return r;
}

void route(CheckHarness& h, int N, int E, int k, bool renormalize) {
  const Operand logits = h.activations(size_t(N) * size_t(E), 2.0);
  const Operand probs = h.floats(size_t(N) * size_t(E)), lse = h.floats(size_t(N)),
                weight = h.floats(size_t(N) * size_t(k)), prob_sum = h.floats(size_t(E));
  const Tensor expert = h.ints(std::vector<int32_t>(size_t(N) * size_t(k), -1));
  h.backend().moe_route(probs.view(), lse.view(), expert.view(), weight.view(), prob_sum.view(), logits.view(), N, E,
                        k, renormalize);
  const Routed want = route_reference(logits, N, E, k, renormalize);
  h.compare("probs", probs, want.probs);
  h.compare("lse", lse, want.lse);
  h.compare_values("expert", as_doubles(download_ints(h, expert, size_t(N) * size_t(k))), as_doubles(want.expert));
  h.compare("weight", weight, want.weight);
  h.compare("prob_sum", prob_sum, want.prob_sum);
}

void route_backward(CheckHarness& h, int N, int E, int k, bool renormalize) {
  const Operand logits = h.activations(size_t(N) * size_t(E), 2.0);
  const Routed r = route_reference(logits, N, E, k, renormalize);
  const Operand probs = h.upload(r.probs, DType::kFloat32), lse = h.upload(r.lse, DType::kFloat32),
                weight = h.upload(r.weight, DType::kFloat32);
  const Tensor expert = h.ints(r.expert);
  const Operand dweight = h.floats(size_t(N) * size_t(k)), dprob = h.floats(size_t(E), 0.1);
  const Operand dlogits = h.activations(size_t(N) * size_t(E));
  const float z_scale = 0.03f;
  h.backend().moe_route_backward(dlogits.view(), probs.view(), lse.view(), expert.view(), weight.view(),
                                 dweight.view(), dprob.view(), z_scale, N, E, k, renormalize);
  std::vector<double> want(size_t(N) * size_t(E));
  cpu::moe_route_backward(want.data(), probs.data(), lse.data(), r.expert.data(), weight.data(), dweight.data(),
                          dprob.data(), double(z_scale), N, E, k, renormalize);
  h.compare("dlogits", dlogits, want);
}

// The routing tables of N tokens' k choices over M = N k rows in a shuffled order, every
// `drop`-th choice dropped (slot -1; its row unused).
struct Tables {
  std::vector<int32_t> slot, token;
  int M = 0;
};
Tables tables(CheckHarness& h, int N, int k, int drop) {
  Tables t;
  t.M = N * k;
  std::vector<int32_t> order = h.random_ids(size_t(t.M), 1 << 30);
  std::vector<int32_t> rows(size_t(t.M));
  std::iota(rows.begin(), rows.end(), 0);
  std::sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) { return order[size_t(a)] < order[size_t(b)]; });
  t.slot.assign(size_t(t.M), -1);
  t.token.assign(size_t(t.M), 0);
  for (int i = 0; i < t.M; ++i) {
    if (drop > 0 && i % drop == drop - 1) continue;
    t.slot[size_t(i)] = rows[size_t(i)];
    t.token[size_t(rows[size_t(i)])] = int32_t(i / k);
  }
  return t;
}

void gather(CheckHarness& h, int N, int k, int C) {
  const Tables t = tables(h, N, k, 0);
  const Operand inp = h.activations(size_t(N) * size_t(C)), rows = h.activations(size_t(t.M) * size_t(C));
  const Tensor token = h.ints(t.token);
  h.backend().moe_gather(rows.view(), inp.view(), token.view(), t.M, C);
  std::vector<double> want(size_t(t.M) * size_t(C));
  cpu::moe_gather(want.data(), inp.data(), t.token.data(), t.M, C);
  h.compare("rows", rows, want);
}

// dinp accumulates: both sides start from the same values.
void gather_backward(CheckHarness& h, int N, int k, int C, int drop) {
  const Tables t = tables(h, N, k, drop);
  const Operand drows = h.activations(size_t(t.M) * size_t(C)), dinp = h.activations(size_t(N) * size_t(C));
  const Tensor slot = h.ints(t.slot);
  std::vector<double> want = dinp.values;
  h.backend().moe_gather_backward(dinp.view(), drows.view(), slot.view(), N, k, C);
  cpu::moe_gather_backward(want.data(), drows.data(), t.slot.data(), N, k, C);
  h.compare("dinp", dinp, want);
}

void combine(CheckHarness& h, int N, int k, int C, int drop) {
  const Tables t = tables(h, N, k, drop);
  const Operand rows = h.activations(size_t(t.M) * size_t(C)), out = h.activations(size_t(N) * size_t(C));
  const Operand weight = h.floats(size_t(N) * size_t(k), 0.3, 0.5);
  const Tensor slot = h.ints(t.slot);
  std::vector<double> want = out.values;
  h.backend().moe_combine(out.view(), rows.view(), slot.view(), weight.view(), N, k, C);
  cpu::moe_combine(want.data(), rows.data(), t.slot.data(), weight.data(), N, k, C);
  h.compare("out", out, want);
}

// drows' rows of dropped choices are never written: both sides start from the same values.
void combine_backward(CheckHarness& h, int N, int k, int C, int drop) {
  const Tables t = tables(h, N, k, drop);
  const Operand rows = h.activations(size_t(t.M) * size_t(C)), dout = h.activations(size_t(N) * size_t(C));
  const Operand weight = h.floats(size_t(N) * size_t(k), 0.3, 0.5);
  const Operand drows = h.activations(size_t(t.M) * size_t(C)), dweight = h.floats(size_t(N) * size_t(k));
  const Tensor slot = h.ints(t.slot);
  std::vector<double> want_rows = drows.values, want_weight(size_t(N) * size_t(k));
  h.backend().moe_combine_backward(drows.view(), dweight.view(), dout.view(), rows.view(), slot.view(), weight.view(),
                                   N, k, C);
  cpu::moe_combine_backward(want_rows.data(), want_weight.data(), dout.data(), rows.data(), t.slot.data(),
                            weight.data(), N, k, C);
  h.compare("drows", drows, want_rows);
  h.compare("dweight", dweight, want_weight);
}

void shared_gate(CheckHarness& h, int N) {
  const Operand logits = h.activations(size_t(N), 3.0), gate = h.floats(size_t(N));
  h.backend().moe_shared_gate(gate.view(), logits.view(), N);
  std::vector<double> want(static_cast<size_t>(N));
  cpu::moe_shared_gate(want.data(), logits.data(), N);
  h.compare("gate", gate, want);
}

void shared_gate_backward(CheckHarness& h, int N) {
  const Operand gate = h.floats(size_t(N), 0.2, 0.5), dgate = h.floats(size_t(N)), dlogits = h.activations(size_t(N));
  h.backend().moe_shared_gate_backward(dlogits.view(), gate.view(), dgate.view(), N);
  std::vector<double> want(static_cast<size_t>(N));
  cpu::moe_shared_gate_backward(want.data(), gate.data(), dgate.data(), N);
  h.compare("dlogits", dlogits, want);
}

}  // namespace

OpCase moe_route_case(int N, int E, int k, bool renormalize) {
  return {"moe_route", route_shape(N, E, k, renormalize), HeldTo::kFloat32,
          [=](CheckHarness& h) { route(h, N, E, k, renormalize); }};
}
OpCase moe_route_backward_case(int N, int E, int k, bool renormalize) {
  return {"moe_route_backward", route_shape(N, E, k, renormalize), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { route_backward(h, N, E, k, renormalize); }};
}
OpCase moe_gather_case(int N, int k, int C) {
  return {"moe_gather", rows_shape(N, k, C), HeldTo::kComputeDtype, [=](CheckHarness& h) { gather(h, N, k, C); }};
}
OpCase moe_gather_backward_case(int N, int k, int C, int drop) {
  return {"moe_gather_backward", rows_shape(N, k, C) + (drop ? " dropping 1 in " + std::to_string(drop) : ""),
          HeldTo::kComputeDtype, [=](CheckHarness& h) { gather_backward(h, N, k, C, drop); }};
}
OpCase moe_combine_case(int N, int k, int C, int drop) {
  return {"moe_combine", rows_shape(N, k, C) + (drop ? " dropping 1 in " + std::to_string(drop) : ""),
          HeldTo::kComputeDtype, [=](CheckHarness& h) { combine(h, N, k, C, drop); }};
}
OpCase moe_combine_backward_case(int N, int k, int C, int drop) {
  return {"moe_combine_backward", rows_shape(N, k, C) + (drop ? " dropping 1 in " + std::to_string(drop) : ""),
          HeldTo::kComputeDtype, [=](CheckHarness& h) { combine_backward(h, N, k, C, drop); }};
}
OpCase moe_shared_gate_case(int N) {
  return {"moe_shared_gate", "N=" + std::to_string(N), HeldTo::kFloat32, [=](CheckHarness& h) { shared_gate(h, N); }};
}
OpCase moe_shared_gate_backward_case(int N) {
  return {"moe_shared_gate_backward", "N=" + std::to_string(N), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { shared_gate_backward(h, N); }};
}

}  // namespace feast::check
