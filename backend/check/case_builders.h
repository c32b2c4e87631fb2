// The builders of the op cases, one per op and family (cases_*.cpp), from their shapes; op_cases.cpp
// lists the shapes. Each builder writes its case's shape text, so a shape is written once. Legend:
// B batch, T time, N rows, C channels, OC output channels, I the MLP width, Vl logit columns, n elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/check/op_cases.h"

namespace feast::check {

// ---- embedding and norms (cases_embedding_norms.cpp) ---------------------------------------------
// Tokens drawn from [0, token_range), this rank holding vocabulary rows [vocab_begin, vocab_end).
struct EmbeddingShape {
  int B, T, C, vocab_begin, vocab_end, token_range;
  bool positions;          // wpe given (the rank that adds positions)
  bool documents = false;  // document positions (case_document_positions) instead of t
};
// Document masks' positions for a case's (B, T) rows: documents of uneven lengths (one token,
// several, one running past the row's end), different in each row.
std::vector<int32_t> case_document_positions(int B, int T);
OpCase embedding_forward_case(const EmbeddingShape& s);
OpCase embedding_backward_case(const EmbeddingShape& s);
OpCase layernorm_forward_case(int N, int C);
OpCase layernorm_backward_case(int N, int C);
OpCase rmsnorm_forward_case(int N, int C);
OpCase rmsnorm_backward_case(int N, int C);

// ---- matrix products (cases_matmul.cpp) ------------------------------------------------------------
OpCase matmul_forward_case(int N, int C, int OC, bool bias);
OpCase matmul_gelu_forward_case(int N, int C, int OC, bool bias);
OpCase matmul_backward_case(int N, int C, int OC, bool dinp, bool dbias);
OpCase matmul_backward_input_case(int N, int C, int OC);
OpCase matmul_backward_weight_rows_case(int N, int C, int OC);  // a middle chunk of the rows
// Groups of `rows` each times its own (OC, C) weight, the weights `skew` elements into one buffer.
OpCase grouped_matmul_forward_case(const std::vector<int>& rows, int C, int OC, int skew);
OpCase grouped_matmul_backward_input_case(const std::vector<int>& rows, int C, int OC, int skew);
// LoRA's update of columns [s.col, s.col + s.OC) of an output s.out_ld wide.
OpCase lora_forward_case(const LoraShape& s);
OpCase lora_backward_case(const LoraShape& s, bool dinp);

// ---- a quantized frozen base (cases_quantized.cpp) ---------------------------------------------------
// A rows x width tensor quantized to NF4; the piece rows [row0, row0 + piece_rows) x columns
// [col0, col0 + piece_cols) of it dequantized.
struct Nf4CaseShape {
  int rows, width, row0, col0, piece_rows, piece_cols;
  bool double_quant;
};
OpCase dequantize_nf4_case(const Nf4CaseShape& s);

// ---- attention and rotary embedding (cases_attention.cpp) --------------------------------------------
// documents: under document masks (case_document_positions as AttentionShape::positions).
OpCase attention_forward_case(const AttentionShape& a, bool documents = false);
OpCase attention_backward_case(const AttentionShape& a, bool documents = false);
// Context parallelism's ring at cp = 2 (a.T even: the rank's two chunks), as group rank `rank`.
OpCase ring_attention_case(const AttentionShape& a, int rank);
OpCase rope_forward_case(const AttentionShape& a, bool documents = false);
OpCase rope_backward_case(const AttentionShape& a, bool documents = false);

// ---- element-wise (cases_elementwise.cpp) -------------------------------------------------------------
OpCase gelu_forward_case(size_t n);
OpCase gelu_backward_case(size_t n, bool in_place);  // in place: dinp = dout
OpCase swiglu_forward_case(int N, int I);
OpCase swiglu_backward_case(int N, int I);
OpCase add_case(size_t n, bool in_place);  // in place: out = b, as the residual stream
OpCase dropout_forward_case(const DropoutShape& s);
OpCase dropout_backward_case(const DropoutShape& s);

// ---- mixture of experts (cases_moe.cpp) ---------------------------------------------------------------
// N tokens, E experts, k choices each; drop: every drop-th choice dropped (0: none).
OpCase moe_route_case(int N, int E, int k, bool renormalize);
OpCase moe_route_backward_case(int N, int E, int k, bool renormalize);
OpCase moe_gather_case(int N, int k, int C);
OpCase moe_gather_backward_case(int N, int k, int C, int drop);
OpCase moe_combine_case(int N, int k, int C, int drop);
OpCase moe_combine_backward_case(int N, int k, int C, int drop);
OpCase moe_shared_gate_case(int N);
OpCase moe_shared_gate_backward_case(int N);

// ---- vocab-parallel cross-entropy (cases_cross_entropy.cpp) --------------------------------------------
// Rows of Vl logit columns [vocab_begin, vocab_begin + Vl) of a vocabulary of V; one target per
// row (< 0 ignored).
struct CrossEntropyShape {
  int N, Vl, vocab_begin, V;
  std::vector<int32_t> targets;
};
OpCase cross_entropy_row_max_case(const CrossEntropyShape& s);
OpCase cross_entropy_partials_case(const CrossEntropyShape& s, bool keep_exp);
OpCase cross_entropy_finish_case(const CrossEntropyShape& s, bool keep_exp, float dloss);

// ---- optimizer, reductions, casts and memory (cases_optimizer_memory.cpp) ------------------------------
OpCase adamw_step_case(size_t n, float weight_decay, float grad_scale);
OpCase sum_case(size_t n);
OpCase sum_of_squares_case(size_t n);
OpCase sums_of_squares_case(size_t n);
OpCase cast_to_bf16_case(size_t n);
OpCase cast_to_fp32_case(size_t n);
OpCase copy_case(size_t n);
OpCase zero_case(size_t n);
OpCase reserved_pages_case();
OpCase host_round_trip_case(size_t n);
OpCase offload_pipeline_case(size_t n);

// "%g" of x, for shape texts.
std::string format_number(double x);

}  // namespace feast::check
