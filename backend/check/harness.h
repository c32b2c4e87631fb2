// The harness every op case runs in: the tested Backend (any: it names none), its compute dtype, the
// seed, the op to perturb and where rows go; a case's inputs on the tested side with the float64
// values they hold, outputs downloaded as doubles and compared with the float64 reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/check/checked_ops.h"
#include "backend/check/comparison.h"

namespace feast::check {

// A case's operand: a tensor on the tested backend and, in float64, exactly the values it holds
// (rounded to its dtype). An empty Operand is an optional operand left out (an empty view, a null
// pointer for the reference).
struct Operand {
  Tensor tensor;
  std::vector<double> values;

  TensorView view() const { return tensor.view(); }
  const double* data() const { return values.empty() ? nullptr : values.data(); }
};

class CheckHarness {
 public:
  // inject_error: an op whose first compared output is perturbed on the tested side ("" none).
  CheckHarness(Backend& tested, uint64_t seed, std::string inject_error, RowSink sink);

  Backend& backend() const { return tested_; }
  DType compute_dtype() const { return compute_; }

  // Starts a case: its rows carry op and shape and its tolerance class, and its random tensors
  // come from streams of its own (a case draws the same inputs whichever cases run before it).
  void begin(const std::string& op, const std::string& shape, HeldTo held_to);
  // A failing row for the current case that could not compare its outputs ("threw: ...").
  void fail(const std::string& error);

  // ---- inputs ------------------------------------------------------------------------------------
  // n values offset + scale * N(0, 1), each tensor from its own stream.
  std::vector<double> random(size_t n, double scale = 1, double offset = 0);
  // n integers in [0, range).
  std::vector<int32_t> random_ids(size_t n, int range);
  // values on the tested side in dtype (float32 or bfloat16, sent as its bits: no op of the
  // tested backend is involved), values rounded to what it holds.
  Operand upload(std::vector<double> values, DType dtype);
  // Parameters and activations: the compute dtype. Every output starts as one too, so an element
  // an op forgets to write shows.
  Operand activations(size_t n, double scale = 1, double offset = 0) {
    return upload(random(n, scale, offset), compute_);
  }
  // Parameter gradients, statistics, optimizer state: float32.
  Operand floats(size_t n, double scale = 1, double offset = 0) {
    return upload(random(n, scale, offset), DType::kFloat32);
  }
  Tensor ints(const std::vector<int32_t>& ids);

  // ---- outputs -----------------------------------------------------------------------------------
  // A float32 or bfloat16 tensor of the tested backend as doubles.
  std::vector<double> download(const TensorView& x) const;
  // One row: x on the tested side against expected, at the case's tolerance.
  void compare(const std::string& output, const TensorView& x, const std::vector<double>& expected);
  void compare(const std::string& output, const Operand& x, const std::vector<double>& expected) {
    compare(output, x.view(), expected);
  }
  // One row for values the tested backend returned to the host (sum, sum_of_squares).
  void compare_values(const std::string& output, std::vector<double> test, const std::vector<double>& expected);

 private:
  CheckRow row_for_case() const;

  Backend& tested_;
  const DType compute_;
  const uint64_t seed_;
  const std::string inject_error_;
  const RowSink sink_;
  std::string op_, shape_;
  HeldTo held_to_ = HeldTo::kComputeDtype;
  uint64_t case_stream_ = 0, next_tensor_ = 0;
  bool injected_ = false;  // inject_error has perturbed its output
};

// x rounded to what a tensor of dtype holds (float32, or float32 then bfloat16).
double round_to(DType dtype, double x);

}  // namespace feast::check
