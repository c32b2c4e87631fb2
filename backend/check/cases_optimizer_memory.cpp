// The cases of the optimizer, the reductions, the casts and the device's own memory ops, against
// plain double loops (core/bfloat16.h for the casts). All of them compute in float32 or are
// exact whatever the compute dtype, so they are held to float32's tolerance in every run.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/offload_pipeline.h"
#include "core/bfloat16.h"

namespace feast::check {
namespace {

std::string count_shape(size_t n) { return "n=" + std::to_string(n); }

// One AdamW step in float64, in PyTorch's order of operations (as backend/scalar_math.h).
void reference_adamw(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                     const std::vector<double>& g, const AdamWStep& s, double grad_scale) {
  const double lr = s.lr, beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, wd = s.weight_decay;
  for (size_t i = 0; i < p.size(); ++i) {
    const double grad = g[i] * grad_scale;
    m[i] = beta1 * m[i] + (1 - beta1) * grad;
    v[i] = beta2 * v[i] + (1 - beta2) * grad * grad;
    p[i] *= 1 - lr * wd;
    p[i] -= (lr / double(s.bias_correction1)) * m[i] / (std::sqrt(v[i]) / double(s.bias_correction2_sqrt) + eps);
  }
}

void adamw_step(CheckHarness& h, size_t n, float weight_decay, float grad_scale) {
  std::vector<double> second_moment = h.random(n, 0.01);
  for (double& x : second_moment) x = std::abs(x);
  const Operand params = h.floats(n), m = h.floats(n, 0.1), g = h.floats(n);
  const Operand v = h.upload(second_moment, DType::kFloat32);
  // Step 3 of beta1 0.9, beta2 0.95: bias corrections 1 - 0.9^3 and sqrt(1 - 0.95^3).
  const AdamWStep step{1e-2f, 0.9f, 0.95f, 1e-8f, weight_decay, 0.271f, std::sqrt(0.142625f)};
  h.backend().adamw_step(params.view(), m.view(), v.view(), g.view(), step, grad_scale);
  std::vector<double> want_p = params.values, want_m = m.values, want_v = v.values;
  reference_adamw(want_p, want_m, want_v, g.values, step, grad_scale);
  std::vector<double> got = h.download(params.view());
  h.compare_values("params", got, want_p);
  // The step itself, which is small next to the parameters it changes.
  for (size_t i = 0; i < n; ++i) {
    got[i] -= params.values[i];
    want_p[i] -= params.values[i];
  }
  h.compare_values("params - before", got, want_p);
  h.compare("exp_avg", m, want_m);
  h.compare("exp_avg_sq", v, want_v);
}

// Reductions read float32 values around 0.5, so the sum does not cancel to nothing.
void sum(CheckHarness& h, size_t n) {
  const Operand x = h.floats(n, 1.0, 0.5);
  double want = 0;
  for (double e : x.values) want += e;
  h.compare_values("value", {h.backend().sum(x.view())}, {want});
}

void sum_of_squares(CheckHarness& h, size_t n) {
  const Operand x = h.floats(n, 1.0, 0.5);
  double want = 0;
  for (double e : x.values) want += e * e;
  h.compare_values("value", {h.backend().sum_of_squares(x.view())}, {want});
}

// Several parts at once, one of them empty (the gradient norm's per-tensor squares).
void sums_of_squares(CheckHarness& h, size_t n) {
  const Operand x = h.floats(n, 1.0, 0.5);
  const size_t a = n / 3, b = n / 3 + 1;
  const std::vector<size_t> begins = {0, a, a, a + b}, sizes = {a, 0, b, n - a - b};
  std::vector<TensorView> parts;
  std::vector<double> want;
  for (size_t k = 0; k < begins.size(); ++k) {
    parts.push_back(x.view().slice(begins[k], sizes[k]));
    double s = 0;
    for (size_t i = begins[k]; i < begins[k] + sizes[k]; ++i) s += x.values[i] * x.values[i];
    want.push_back(s);
  }
  h.compare_values("values", h.backend().sums_of_squares(parts), want);
}

// Random values with ties to even and the edges of the range first (65504 rounds up to 65536;
// 1e-20 stays normal).
std::vector<double> cast_values(CheckHarness& h, size_t n) {
  std::vector<double> values = h.random(n, 3.0);
  const double edges[] = {1.00390625, 1.01171875, -3.14159265, 65504.0, 1e-20, 0.0};
  std::copy(std::begin(edges), std::begin(edges) + std::min(n, std::size(edges)), values.begin());
  return values;
}

void cast_to_bf16(CheckHarness& h, size_t n) {
  const Operand f = h.upload(cast_values(h, n), DType::kFloat32);
  const Operand out = h.upload(h.random(n), DType::kBFloat16);
  h.backend().cast(out.view(), f.view());
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = bf16_to_float(float_to_bf16(static_cast<float>(f.values[i])));
  h.compare("out", out, want);
}

// The bfloat16 input goes up as its bits, so this direction is read without the other.
void cast_to_fp32(CheckHarness& h, size_t n) {
  const Operand b = h.upload(cast_values(h, n), DType::kBFloat16), out = h.floats(n);
  h.backend().cast(out.view(), b.view());
  h.compare("out", out, b.values);
}

void copy(CheckHarness& h, size_t n) {
  const Operand src = h.activations(n), dst = h.activations(n);
  h.backend().copy(dst.view(), src.view());
  h.compare("dst", dst, src.values);
}

void zero(CheckHarness& h, size_t n) {
  const Operand x = h.activations(n);
  h.backend().zero(x.view());
  h.compare("x", x, std::vector<double>(n, 0.0));
}

// ZeRO 3's pages: a reserved tensor of four pages keeps what is written to it; its middle pages
// given back and taken again hold what is written there next, and the outer pages keep theirs.
// Where pages cannot be given back (page_bytes() 0) the tensor is plain memory and the middle is
// simply rewritten.
void reserved_pages(CheckHarness& h) {
  Backend& be = h.backend();
  const size_t page = be.page_bytes(), page_elems = page > 0 ? page / 4 : 1024, n = 4 * page_elems;
  Tensor reserved = be.reserve(DType::kFloat32, n);
  std::vector<double> want = h.random(n);
  for (double& x : want) x = double(float(x));
  std::vector<float> host(want.begin(), want.end());
  be.copy(reserved.view(), host_view(host.data(), n));
  const TensorView middle = reserved.view().slice(page_elems, 2 * page_elems);
  if (page > 0) {
    be.decommit(middle);
    be.commit(middle);
  }
  const std::vector<double> fresh = h.random(2 * page_elems, 2.0);
  for (size_t i = 0; i < fresh.size(); ++i) {
    host[page_elems + i] = float(fresh[i]);
    want[page_elems + i] = double(float(fresh[i]));
  }
  be.copy(middle, host_view(host.data() + page_elems, 2 * page_elems));
  h.compare("reserved", reserved.view(), want);
}

// Offloaded optimizer state: device values through host memory of allocate_host and back.
void host_round_trip(CheckHarness& h, size_t n) {
  Backend& be = h.backend();
  const Operand src = h.floats(n), dst = h.floats(n);
  Tensor staged = be.allocate_host(DType::kFloat32, n);
  FEAST_CHECK(staged.view().device.is_cpu(), "allocate_host gave memory on " << staged.view().device.name());
  be.copy(staged.view(), src.view());
  be.copy(dst.view(), staged.view());
  h.compare("dst", dst, src.values);
}

// copy_async on streams of create_stream(), as offloaded AdamW uses them
// (backend/offload_pipeline.h): gradients to host memory and weights
// back, cast to the compute dtype, chunk by chunk on streams of their own, with a host update of
// each chunk in between; two steps, the second with its gradients started early, so that its
// copies follow the first step's.
void offload_pipeline(CheckHarness& h, size_t n) {
  Backend& be = h.backend();
  const Operand params = h.activations(n), grads = h.floats(n);
  Tensor master = be.allocate_host(DType::kFloat32, n), host_grads = be.allocate_host(DType::kFloat32, n);
  OffloadPipeline pipeline(be, params.view(), master.view(), host_grads.view());
  pipeline.master_from_params();
  float* m = static_cast<float*>(master.view().data);
  const float* g = static_cast<const float*>(host_grads.view().data);
  std::vector<float> want_master(params.values.begin(), params.values.end());
  std::vector<int> updates(n);
  for (int step = 0; step < 2; ++step) {
    if (step == 1) pipeline.start_gradients(grads.view());
    std::fill(updates.begin(), updates.end(), 0);
    pipeline.run(grads.view(), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        m[i] -= 0.25f * g[i];
        ++updates[i];
      }
    });
    for (size_t i = 0; i < n; ++i) want_master[i] -= 0.25f * float(grads.values[i]);
    const auto [fewest, most] = std::minmax_element(updates.begin(), updates.end());
    h.compare_values("updates of each element, step " + std::to_string(step + 1), {double(*fewest), double(*most)},
                     {1.0, 1.0});
  }
  pipeline.wait();
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = round_to(h.compute_dtype(), want_master[i]);
  h.compare_values("master", std::vector<double>(m, m + n), std::vector<double>(want_master.begin(), want_master.end()));
  h.compare("params", params, want);
}

}  // namespace

OpCase offload_pipeline_case(size_t n) {
  const size_t chunks = (n + offload_chunk_elements(n) - 1) / offload_chunk_elements(n);
  return {"copy_async", count_shape(n) + " offload pipeline: " + std::to_string(chunks) + " chunks, two steps",
          HeldTo::kFloat32, [n](CheckHarness& h) { offload_pipeline(h, n); }};
}
OpCase reserved_pages_case() {
  return {"reserve", "4 pages, the middle two given back and taken again", HeldTo::kFloat32,
          [](CheckHarness& h) { reserved_pages(h); }};
}
OpCase host_round_trip_case(size_t n) {
  return {"allocate_host", count_shape(n) + " device to host to device", HeldTo::kFloat32,
          [n](CheckHarness& h) { host_round_trip(h, n); }};
}
OpCase adamw_step_case(size_t n, float weight_decay, float grad_scale) {
  return {"adamw_step",
          count_shape(n) + " wd=" + format_number(weight_decay) + " grad_scale=" + format_number(grad_scale),
          HeldTo::kFloat32, [=](CheckHarness& h) { adamw_step(h, n, weight_decay, grad_scale); }};
}
OpCase sum_case(size_t n) {
  return {"sum", count_shape(n), HeldTo::kFloat32, [n](CheckHarness& h) { sum(h, n); }};
}
OpCase sum_of_squares_case(size_t n) {
  return {"sum_of_squares", count_shape(n), HeldTo::kFloat32, [n](CheckHarness& h) { sum_of_squares(h, n); }};
}
OpCase sums_of_squares_case(size_t n) {
  return {"sums_of_squares", count_shape(n), HeldTo::kFloat32, [n](CheckHarness& h) { sums_of_squares(h, n); }};
}
OpCase cast_to_bf16_case(size_t n) {
  return {"cast", count_shape(n) + " fp32 -> bf16", HeldTo::kFloat32, [n](CheckHarness& h) { cast_to_bf16(h, n); }};
}
OpCase cast_to_fp32_case(size_t n) {
  return {"cast", count_shape(n) + " bf16 -> fp32", HeldTo::kFloat32, [n](CheckHarness& h) { cast_to_fp32(h, n); }};
}
OpCase copy_case(size_t n) {
  return {"copy", count_shape(n) + " device to device", HeldTo::kFloat32, [n](CheckHarness& h) { copy(h, n); }};
}
OpCase zero_case(size_t n) {
  return {"zero", count_shape(n), HeldTo::kFloat32, [n](CheckHarness& h) { zero(h, n); }};
}

}  // namespace feast::check
