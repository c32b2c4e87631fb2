// THE table: every op case with its shape, in the order `check-backend` prints them. The cases
// themselves (inputs, the op, the float64 reference) are in cases_*.cpp; this file is the shapes.
#include "backend/check/op_cases.h"

#include <cstdint>
#include <cstdio>
#include <tuple>
#include <utility>

#include "backend/check/case_builders.h"

namespace feast::check {
namespace {

std::vector<OpCase> make_cases() {
  std::vector<OpCase> cases;
  const auto add = [&](OpCase c) { cases.push_back(std::move(c)); };

  // B, T, C, vocabulary rows [begin, end) of tokens drawn from [0, range), positions.
  for (const EmbeddingShape& s : {EmbeddingShape{3, 5, 7, 4, 13, 20, true},
                                  EmbeddingShape{1, 1, 4099, 0, 50, 50, false},
                                  EmbeddingShape{2, 67, 259, 100, 300, 400, true},
                                  EmbeddingShape{3, 40, 67, 0, 50, 50, true, true}}) {
    add(embedding_forward_case(s));
    add(embedding_backward_case(s));
  }

  // N, C: odd widths, one row, long rows.
  for (const auto& [N, C] : {std::pair{9, 67}, std::pair{1, 4099}, std::pair{13, 4099}}) {
    add(layernorm_forward_case(N, C));
    add(layernorm_backward_case(N, C));
    add(rmsnorm_forward_case(N, C));
    add(rmsnorm_backward_case(N, C));
  }

  // N, C, OC, and which of the optional operands: bias (forward), dinp and dbias (backward).
  struct Product {
    int N, C, OC;
    bool bias, dinp, dbias;
  };
  for (const Product& p : {Product{13, 21, 35, true, true, true}, Product{1, 67, 129, false, false, false},
                           Product{67, 771, 131, true, false, true}, Product{33, 259, 2053, false, true, false}}) {
    add(matmul_forward_case(p.N, p.C, p.OC, p.bias));
    add(matmul_backward_case(p.N, p.C, p.OC, p.dinp, p.dbias));
    add(matmul_backward_input_case(p.N, p.C, p.OC));
    add(matmul_backward_weight_rows_case(p.N, p.C, p.OC));
  }
  // LoRA: the whole output, a middle block of a fused product (odd offset and width), rank 1,
  // and a rank wider than the block.
  for (const LoraShape& s : {LoraShape{13, 21, 4, 35, 35, 0, 2.0f}, LoraShape{33, 67, 8, 37, 131, 45, 0.5f},
                             LoraShape{1, 259, 1, 64, 64, 0, 16.0f}, LoraShape{67, 64, 16, 8, 24, 16, 1.0f}}) {
    add(lora_forward_case(s));
    add(lora_backward_case(s, s.N != 1));
  }
  // GPT-2's MLP input with its GELU: widths a multiple of 8 (the fused epilogue on the GPU, in
  // bf16) and not (the separate kernels).
  add(matmul_gelu_forward_case(67, 136, 264, true));
  add(matmul_gelu_forward_case(67, 131, 264, true));
  add(matmul_gelu_forward_case(5, 64, 1024, false));
  add(matmul_gelu_forward_case(13, 21, 35, true));
  // Grouped products (the experts): Mixtral-like groups with an empty one, aligned weights; odd
  // widths whose weights start 3 elements into the buffer; one group of one row.
  for (const auto& [rows, C, OC, skew] :
       {std::tuple{std::vector<int>{13, 0, 40, 7, 1, 0, 22, 5}, 64, 256, 0},
        std::tuple{std::vector<int>{9, 31, 2}, 67, 131, 3}, std::tuple{std::vector<int>{1}, 4099, 35, 1}}) {
    add(grouped_matmul_forward_case(rows, C, OC, skew));
    add(grouped_matmul_backward_input_case(rows, C, OC, skew));
  }

  // A whole tensor; rows of 40 straddling blocks (a slice of them, as tensor parallelism cuts one);
  // more than 256 blocks (two second-level groups) and an odd element count.
  for (bool dq : {false, true}) {
    add(dequantize_nf4_case(Nf4CaseShape{6, 128, 0, 0, 6, 128, dq}));
    add(dequantize_nf4_case(Nf4CaseShape{9, 40, 2, 8, 5, 27, dq}));
    add(dequantize_nf4_case(Nf4CaseShape{259, 67, 3, 0, 255, 67, dq}));
  }

  // Head sizes 8 to 80; one position, odd lengths; grouped-query (6 query heads on 2) and NH = NKV.
  for (int hs : {8, 48, 64, 80}) {
    for (int T : {1, 17, 67})
      for (const auto& [NH, NKV] : {std::pair{6, 2}, std::pair{4, 4}}) {
        add(attention_forward_case(AttentionShape{2, T, NH, NKV, hs}));
        add(attention_backward_case(AttentionShape{2, T, NH, NKV, hs}));
      }
    // Context parallelism's ring: chunks of one and of 17 tokens, both ranks' views.
    for (int rank : {0, 1}) {
      add(ring_attention_case(AttentionShape{2, 2, 6, 2, hs}, rank));
      add(ring_attention_case(AttentionShape{1, 34, 4, 4, hs}, rank));
    }
    for (const AttentionShape& a : {AttentionShape{2, 17, 6, 2, hs}, AttentionShape{1, 67, 4, 4, hs}}) {
      add(rope_forward_case(a));
      add(rope_backward_case(a));
    }
    // Document masks: packed documents of 1 to 33 tokens, a key tile (32) wholly before a query's
    // document at T = 67.
    for (const AttentionShape& a : {AttentionShape{3, 17, 6, 2, hs}, AttentionShape{2, 67, 4, 4, hs}}) {
      add(attention_forward_case(a, true));
      add(attention_backward_case(a, true));
      add(rope_forward_case(a, true));
      add(rope_backward_case(a, true));
    }
  }
  // The ring kernels' head sizes up to their limit: Llama's 128 and 256 (8 elements per lane).
  for (int hs : {128, 256})
    for (int rank : {0, 1}) add(ring_attention_case(AttentionShape{1, 10, 4, 2, hs}, rank));

  for (size_t n : {size_t(1), size_t(370), size_t(40993)}) {
    add(gelu_forward_case(n));
    add(gelu_backward_case(n, false));
    add(gelu_backward_case(n, true));
    add(add_case(n, n == 370));
  }
  // LoRA dropout: a whole input; a row-parallel slice of the columns of sequences further in the
  // batch; p = 0.5 on rows of one token.
  {
    DropoutShape whole;
    whole.N = 34, whole.C = 67, whole.T = 17, whole.columns = 67, whole.stream = 11, whole.p = 0.1f;
    DropoutShape slice = whole;
    slice.N = 8, slice.C = 131, slice.T = 4, slice.first_sequence = 5, slice.col0 = 131, slice.columns = 262;
    DropoutShape tokens = whole;
    tokens.N = 5, tokens.C = 4099, tokens.T = 1, tokens.columns = 4099, tokens.p = 0.5f;
    for (const DropoutShape& s : {whole, slice, tokens}) {
      add(dropout_forward_case(s));
      add(dropout_backward_case(s));
    }
  }
  // N, I (gate and up each I wide).
  for (const auto& [N, I] : {std::pair{5, 37}, std::pair{1, 4099}, std::pair{17, 1031}}) {
    add(swiglu_forward_case(N, I));
    add(swiglu_backward_case(N, I));
  }

  // Mixture of experts: Mixtral's 8 experts top 2, renormalised; 60 experts top 4 as Qwen2-MoE's
  // (not renormalised); one token over 3 experts. Rows: odd widths, with and without drops.
  for (const auto& [N, E, k, renormalize] :
       {std::tuple{37, 8, 2, true}, std::tuple{9, 60, 4, false}, std::tuple{1, 3, 3, true}}) {
    add(moe_route_case(N, E, k, renormalize));
    add(moe_route_backward_case(N, E, k, renormalize));
  }
  for (const auto& [N, k, C, drop] : {std::tuple{13, 2, 67, 0}, std::tuple{29, 4, 131, 3}, std::tuple{1, 1, 4099, 0}}) {
    add(moe_gather_case(N, k, C));
    add(moe_gather_backward_case(N, k, C, drop));
    add(moe_combine_case(N, k, C, drop));
    add(moe_combine_backward_case(N, k, C, drop));
  }
  for (int N : {1, 1037}) {
    add(moe_shared_gate_case(N));
    add(moe_shared_gate_backward_case(N));
  }

  // A rank holding columns [64, 96) of 90 real ones, 6 padded; every target kind.
  const CrossEntropyShape small{6, 32, 64, 90, {70, 3, 89, 64, -1, 12}};
  // Columns [5003, 10006) of 9000: 1006 padded; training (keep_exp, dloss) and evaluation.
  const CrossEntropyShape padded{7, 5003, 5003, 9000, {5003, 8999, -1, 12, 7000, -1, 5100}};
  // One row, every column but 3 real, the target the last real one.
  const CrossEntropyShape one_row{1, 5003, 0, 5000, {4999}};
  for (const CrossEntropyShape* s : {&small, &padded, &one_row}) add(cross_entropy_row_max_case(*s));
  add(cross_entropy_partials_case(small, true));
  add(cross_entropy_finish_case(small, true, 0.125f));
  add(cross_entropy_partials_case(padded, true));
  add(cross_entropy_finish_case(padded, true, 0.37f));
  add(cross_entropy_partials_case(padded, false));
  add(cross_entropy_finish_case(padded, false, 0.0f));
  add(cross_entropy_partials_case(one_row, true));
  add(cross_entropy_finish_case(one_row, true, 0.0f));

  // n, weight decay, the clipping factor.
  add(adamw_step_case(1001, 0.1f, 0.5f));
  add(adamw_step_case(40993, 0.0f, 0.25f));
  for (size_t n : {size_t(1), size_t(1001), size_t(1000003)}) {
    add(sum_case(n));
    add(sum_of_squares_case(n));
    add(sums_of_squares_case(n));
  }
  add(cast_to_bf16_case(1001));
  add(cast_to_fp32_case(1001));
  add(copy_case(4099));
  add(zero_case(4099));
  add(reserved_pages_case());
  add(host_round_trip_case(4099));
  add(offload_pipeline_case(20603));  // four chunks, the last shorter
  return cases;
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = make_cases();
  return cases;
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace feast::check
