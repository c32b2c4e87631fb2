// The cases of the three phases of the vocab-parallel cross-entropy against the float64 templates of
// backend/cpu/cross_entropy.h. Each phase gets the earlier phases' results from the float64
// reference, rounded to what the tested side holds, so a row measures one phase.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/cpu/cross_entropy.h"

namespace feast::check {
namespace {

std::string logits_shape(const CrossEntropyShape& s) {
  return "N=" + std::to_string(s.N) + " Vl=" + std::to_string(s.Vl) + " vb=" + std::to_string(s.vocab_begin) +
         " V=" + std::to_string(s.V);
}
std::string partials_shape(const CrossEntropyShape& s, bool keep_exp) {
  return logits_shape(s) + (keep_exp ? " keep_exp" : "");
}

// Phase 1's inputs and phase 2's: logits (N, Vl), targets (N), the global row maximum (N): every
// other row's local one raised by 2, as another rank's larger maximum raises it in the reduction.
struct Inputs {
  Operand logits, row_max;
  Tensor targets;
};
Inputs inputs(CheckHarness& h, const CrossEntropyShape& s) {
  Inputs in;
  in.logits = h.activations(size_t(s.N) * size_t(s.Vl), 3.0);
  in.targets = h.ints(s.targets);
  std::vector<double> row_max(size_t(s.N));
  cpu::cross_entropy_row_max(row_max.data(), in.logits.data(), s.N, s.Vl, s.vocab_begin, s.V);
  for (size_t i = 1; i < row_max.size(); i += 2) row_max[i] += 2.0;
  in.row_max = h.upload(row_max, DType::kFloat32);
  return in;
}

void row_max(CheckHarness& h, const CrossEntropyShape& s) {
  const Inputs in = inputs(h, s);
  const Operand out = h.floats(size_t(s.N));
  h.backend().cross_entropy_row_max(out.view(), in.logits.view(), s.N, s.Vl, s.vocab_begin, s.V);
  std::vector<double> want(size_t(s.N));
  cpu::cross_entropy_row_max(want.data(), in.logits.data(), s.N, s.Vl, s.vocab_begin, s.V);
  h.compare("row_max", out, want);
}

void partials(CheckHarness& h, const CrossEntropyShape& s, bool keep_exp) {
  const Inputs in = inputs(h, s);
  const Operand sum_exp = h.floats(size_t(s.N)), target_logit = h.floats(size_t(s.N));
  h.backend().cross_entropy_partials(sum_exp.view(), target_logit.view(), in.logits.view(), in.row_max.view(),
                                     in.targets.view(), s.N, s.Vl, s.vocab_begin, s.V, keep_exp);
  std::vector<double> want_sum_exp(size_t(s.N)), want_target_logit(size_t(s.N)), want_logits = in.logits.values;
  cpu::cross_entropy_partials(want_sum_exp.data(), want_target_logit.data(), want_logits.data(), in.row_max.data(),
                              s.targets.data(), s.N, s.Vl, s.vocab_begin, s.V, keep_exp);
  h.compare("sum_exp", sum_exp, want_sum_exp);
  h.compare("target_logit", target_logit, want_target_logit);
  h.compare(keep_exp ? "exp(logits)" : "logits", in.logits, want_logits);
}

void finish(CheckHarness& h, const CrossEntropyShape& s, bool keep_exp, float dloss) {
  const Inputs in = inputs(h, s);
  std::vector<double> sum_exp(size_t(s.N)), target_logit(size_t(s.N)), logits = in.logits.values;
  cpu::cross_entropy_partials(sum_exp.data(), target_logit.data(), logits.data(), in.row_max.data(),
                              s.targets.data(), s.N, s.Vl, s.vocab_begin, s.V, keep_exp);
  const Operand phase3_logits = h.upload(logits, h.compute_dtype());
  const Operand phase3_sum_exp = h.upload(sum_exp, DType::kFloat32);
  const Operand phase3_target_logit = h.upload(target_logit, DType::kFloat32);
  const Operand losses = h.floats(size_t(s.N));
  h.backend().cross_entropy_finish(phase3_logits.view(), losses.view(), in.row_max.view(), phase3_sum_exp.view(),
                                   phase3_target_logit.view(), in.targets.view(), s.N, s.Vl, s.vocab_begin, s.V,
                                   dloss);
  std::vector<double> want_losses(size_t(s.N)), want_logits = phase3_logits.values;
  cpu::cross_entropy_finish(want_logits.data(), want_losses.data(), in.row_max.data(), phase3_sum_exp.data(),
                            phase3_target_logit.data(), s.targets.data(), s.N, s.Vl, s.vocab_begin, s.V,
                            double(dloss));
  h.compare("losses", losses, want_losses);
  h.compare(dloss != 0 ? "dlogits" : "logits", phase3_logits, want_logits);
}

}  // namespace

OpCase cross_entropy_row_max_case(const CrossEntropyShape& s) {
  return {"cross_entropy_row_max", logits_shape(s), HeldTo::kComputeDtype, [s](CheckHarness& h) { row_max(h, s); }};
}
OpCase cross_entropy_partials_case(const CrossEntropyShape& s, bool keep_exp) {
  return {"cross_entropy_partials", partials_shape(s, keep_exp), HeldTo::kComputeDtype,
          [=](CheckHarness& h) { partials(h, s, keep_exp); }};
}
OpCase cross_entropy_finish_case(const CrossEntropyShape& s, bool keep_exp, float dloss) {
  return {"cross_entropy_finish", partials_shape(s, keep_exp) + " dloss=" + format_number(dloss),
          HeldTo::kComputeDtype, [=](CheckHarness& h) { finish(h, s, keep_exp, dloss); }};
}

}  // namespace feast::check
