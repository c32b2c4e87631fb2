// The ops `check-backend` and the backend op tests must each compare, and how closely: the
// tolerance on max |test - ref| / max |ref| per compute dtype, and the ops held to float32's
// tolerance whatever the compute dtype (they compute in float32 or are exact).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"

namespace feast::check {

// Every op of Backend with results to compare (all but the stream, the events and the memory
// peak). A run that leaves one of them uncompared fails.
const std::vector<std::string>& checked_ops();
bool is_checked_op(const std::string& op);

// The tolerance class of a case: its compute dtype's, or float32's in every run (the optimizer
// and the reductions compute in float32; casts, copies and zero are exact).
enum class HeldTo { kComputeDtype, kFloat32 };

// The largest max |test - ref| / max |ref| allowed: fp32 1e-4, bf16 2e-2.
double tolerance_for(DType computed_in);
double tolerance_for(HeldTo held_to, DType compute);
const char* dtype_label(DType dtype);  // "fp32", "bf16"

}  // namespace feast::check
