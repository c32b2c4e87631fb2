// The list of the ops a check must compare, and the tolerances (see checked_ops.h).
#include "backend/check/checked_ops.h"

#include <algorithm>

namespace feast::check {

const std::vector<std::string>& checked_ops() {
  static const std::vector<std::string> ops = {
      "embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward", "rmsnorm_forward",
      "rmsnorm_backward", "matmul_forward", "matmul_gelu_forward", "matmul_backward", "matmul_backward_input",
      "matmul_backward_weight_rows", "grouped_matmul_forward", "grouped_matmul_backward_input", "lora_forward", "lora_backward", "dequantize_nf4", "attention_forward",
      "attention_backward", "ring_attention", "rope_forward", "rope_backward", "dropout_forward", "dropout_backward",
      "moe_route", "moe_route_backward", "moe_gather", "moe_gather_backward", "moe_combine", "moe_combine_backward",
      "moe_shared_gate", "moe_shared_gate_backward",
      "gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward", "add", "cross_entropy_row_max",
      "cross_entropy_partials", "cross_entropy_finish", "sum", "adamw_step", "sum_of_squares", "sums_of_squares",
      "cast", "copy", "zero", "reserve", "allocate_host", "copy_async"};
  return ops;
}

bool is_checked_op(const std::string& op) {
  const std::vector<std::string>& ops = checked_ops();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

double tolerance_for(DType computed_in) { return computed_in == DType::kBFloat16 ? 2e-2 : 1e-4; }

double tolerance_for(HeldTo held_to, DType compute) {
  return tolerance_for(held_to == HeldTo::kFloat32 ? DType::kFloat32 : compute);
}

const char* dtype_label(DType dtype) { return dtype == DType::kBFloat16 ? "bf16" : "fp32"; }

}  // namespace feast::check
