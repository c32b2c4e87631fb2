// The harness: inputs on the tested side and in float64, downloads, and one row per compared
// output (see harness.h).
#include "backend/check/harness.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/rng.h"

namespace feast::check {
namespace {

TensorView bf16_host_view(std::vector<uint16_t>& bits) {
  return TensorView{bits.data(), DType::kBFloat16, kCpu, bits.size()};
}

}  // namespace

double round_to(DType dtype, double x) {
  const float f = static_cast<float>(x);
  if (dtype == DType::kBFloat16) return bf16_to_float(float_to_bf16(f));
  FEAST_CHECK(dtype == DType::kFloat32, "check: no rounding to " << dtype_name(dtype));
  return f;
}

CheckHarness::CheckHarness(Backend& tested, uint64_t seed, std::string inject_error, RowSink sink)
    : tested_(tested),
      compute_(tested.compute_dtype()),
      seed_(seed),
      inject_error_(std::move(inject_error)),
      sink_(std::move(sink)) {}

void CheckHarness::begin(const std::string& op, const std::string& shape, HeldTo held_to) {
  op_ = op;
  shape_ = shape;
  held_to_ = held_to;
  case_stream_ = hash_name(op + " " + shape);
  next_tensor_ = 0;
}

CheckRow CheckHarness::row_for_case() const {
  CheckRow row;
  row.op = op_;
  row.shape = shape_;
  row.dtype = dtype_label(compute_);
  row.tolerance = tolerance_for(held_to_, compute_);
  return row;
}

void CheckHarness::fail(const std::string& error) {
  CheckRow row = row_for_case();
  row.ok = false;
  row.error = error;
  sink_(row);
}

std::vector<double> CheckHarness::random(size_t n, double scale, double offset) {
  const uint64_t stream = hash_combine(case_stream_, next_tensor_++);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = offset + scale * normal_at(seed_, stream, i);
  return v;
}

std::vector<int32_t> CheckHarness::random_ids(size_t n, int range) {
  const uint64_t stream = hash_combine(case_stream_, next_tensor_++);
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(uniform_index(seed_, stream, i, uint64_t(range)));
  return ids;
}

Operand CheckHarness::upload(std::vector<double> values, DType dtype) {
  for (double& x : values) x = round_to(dtype, x);
  Operand x{tested_.allocate(dtype, values.size()), std::move(values)};
  if (dtype == DType::kFloat32) {
    const std::vector<float> host(x.values.begin(), x.values.end());
    tested_.copy(x.view(), host_view(host.data(), host.size()));
  } else {
    std::vector<uint16_t> bits(x.values.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16(static_cast<float>(x.values[i]));
    tested_.copy(x.view(), bf16_host_view(bits));
  }
  return x;
}

Tensor CheckHarness::ints(const std::vector<int32_t>& ids) {
  Tensor t = tested_.allocate(DType::kInt32, ids.size());
  tested_.copy(t.view(), host_view(ids.data(), ids.size()));
  return t;
}

std::vector<double> CheckHarness::download(const TensorView& x) const {
  if (x.dtype == DType::kBFloat16) {
    std::vector<uint16_t> bits(x.numel);
    tested_.copy(bf16_host_view(bits), x);
    std::vector<double> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  }
  FEAST_CHECK(x.dtype == DType::kFloat32, "check: cannot download a " << dtype_name(x.dtype) << " tensor");
  std::vector<float> host(x.numel);
  tested_.copy(host_view(host.data(), host.size()), x);
  return {host.begin(), host.end()};
}

void CheckHarness::compare(const std::string& output, const TensorView& x, const std::vector<double>& expected) {
  compare_values(output, download(x), expected);
}

void CheckHarness::compare_values(const std::string& output, std::vector<double> test,
                                  const std::vector<double>& expected) {
  if (op_ == inject_error_ && !injected_ && !test.empty()) {
    // Far outside any tolerance: the largest reference magnitude, at least 1.
    double max_ref = 1;
    for (double r : expected)
      if (std::isfinite(r)) max_ref = std::max(max_ref, std::abs(r));
    test[test.size() / 2] += max_ref;
    injected_ = true;
  }
  CheckRow row = row_for_case();
  row.output = output;
  compare_into(row, test, expected, row.tolerance);
  sink_(row);
}

}  // namespace feast::check
