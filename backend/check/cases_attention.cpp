// The cases of attention and rotary embedding against backend/cpu/attention.h and rope.h in float64.
// Attention's state and workspace are backend-private, never compared: the tested backward reads its
// own forward's state, the reference its own float64 forward's probabilities.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/ring_attention.h"
#include "backend/cpu/rope.h"

namespace feast::check {
namespace {

std::string heads_shape(const AttentionShape& a, bool documents = false) {
  return "B=" + std::to_string(a.B) + " T=" + std::to_string(a.T) + " NH=" + std::to_string(a.n_head) +
         " NKV=" + std::to_string(a.n_kv_head) + " hs=" + std::to_string(a.head_dim) + (documents ? " documents" : "");
}

// A case's document positions: on the host for the reference (empty without documents), and as
// the tested backend's AttentionShape::positions.
struct Documents {
  std::vector<int32_t> host;
  Tensor device;
  const int32_t* data() const { return host.empty() ? nullptr : host.data(); }
};
Documents documents_for(CheckHarness& h, AttentionShape& a, bool documents) {
  Documents d;
  if (!documents) return d;
  d.host = case_document_positions(a.B, a.T);
  d.device = h.ints(d.host);
  a.positions = d.device.view();
  return d;
}

size_t qkv_numel(const AttentionShape& a) { return a.rows() * size_t(a.qkv_width()); }
size_t out_numel(const AttentionShape& a) { return a.rows() * size_t(a.out_width()); }

// The float64 forward: out (N, NH hs) and the probabilities att (B, NH, T, T) its backward reads.
void reference_attention(std::vector<double>& out, std::vector<double>& att, const Operand& qkv,
                         const AttentionShape& a, const int32_t* positions = nullptr) {
  out.assign(out_numel(a), 0.0);
  att.assign(size_t(a.B) * size_t(a.n_head) * size_t(a.T) * size_t(a.T), 0.0);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), a.B, a.T, a.n_head, a.n_kv_head, a.head_dim, positions);
}

// Backend-private buffers sized by the tested backend for itself.
Tensor attention_state(CheckHarness& h, const AttentionShape& a) {
  return h.backend().allocate(DType::kFloat32, h.backend().attention_state_size(a));
}

void attention_forward(CheckHarness& h, AttentionShape a, bool documents) {
  const Documents d = documents_for(h, a, documents);
  const Operand qkv = h.activations(qkv_numel(a), 1.5), out = h.activations(out_numel(a));
  const Tensor state = attention_state(h, a);
  h.backend().attention_forward(out.view(), state.view(), qkv.view(), a);
  std::vector<double> want, att;
  reference_attention(want, att, qkv, a, d.data());
  h.compare("out", out, want);
}

void attention_backward(CheckHarness& h, AttentionShape a, bool documents) {
  const Documents d = documents_for(h, a, documents);
  const Operand qkv = h.activations(qkv_numel(a), 1.5), out = h.activations(out_numel(a));
  const Operand dout = h.activations(out_numel(a)), dqkv = h.activations(qkv_numel(a));
  const Tensor state = attention_state(h, a);
  const Tensor workspace = h.backend().allocate(h.compute_dtype(), h.backend().attention_workspace_size(a));
  h.backend().attention_forward(out.view(), state.view(), qkv.view(), a);
  h.backend().attention_backward(dqkv.view(), dout.view(), qkv.view(), out.view(), state.view(), workspace.view(), a);
  std::vector<double> ref_out, att;
  reference_attention(ref_out, att, qkv, a, d.data());
  std::vector<double> want(qkv_numel(a)), scratch(size_t(cpu::attention_scratch_size(a.T, 1)));
  cpu::attention_backward(want.data(), dout.data(), qkv.data(), att.data(), a.B, a.T, a.n_head, a.n_kv_head,
                          a.head_dim, d.data(), scratch.data(), long(scratch.size()));
  h.compare("dqkv", dqkv, want);
}

// Ring attention (context parallelism) as rank `rank` of cp = 2 runs it: its queries (chunks
// rank and 3 - rank of a sequence) against both ranks' key/value blocks in ring order, the second
// merged into the first; then each block's backward from the reference's final log-sum-exp. The
// running output, log-sum-exp, dq and both blocks' dkv (float32) against the same ops in float64.
void ring_attention(CheckHarness& h, const AttentionShape& a, int rank) {
  const size_t kv_numel = a.rows() * size_t(a.kv_width()), lse_numel = a.head_rows();
  const Operand qkv = h.activations(qkv_numel(a), 1.5), dy = h.activations(out_numel(a));
  const Operand y = h.activations(out_numel(a));  // the final output the backward's D reads
  const Operand kv[2] = {h.activations(kv_numel, 1.5), h.activations(kv_numel, 1.5)};
  // Outputs start random (the first step overwrites them), so an element it leaves unwritten shows.
  const Operand acc = h.floats(out_numel(a)), lse = h.floats(lse_numel);
  const Tensor workspace = h.backend().allocate(DType::kFloat32, h.backend().ring_attention_workspace_size(a));
  std::vector<double> want_out(out_numel(a)), want_lse(lse_numel);
  std::vector<double> ws(cpu::ring_attention_workspace(a.T, a.head_dim, 1));
  auto block = [&](int step) {
    const int from = step == 0 ? rank : 1 - rank;
    return RingBlock{a, {rank, 3 - rank}, {from, 3 - from}};
  };
  for (int step = 0; step < 2; ++step) {
    const RingBlock b = block(step);
    const Operand& k = kv[b.kv_chunks[0]];
    h.backend().ring_attention_forward(acc.view(), lse.view(), qkv.view(), k.view(), workspace.view(), b, step == 0);
    cpu::ring_attention_forward(want_out.data(), want_lse.data(), qkv.data(), k.data(), a.B, a.T, a.n_head,
                                a.n_kv_head, a.head_dim, {b.q_chunks[0], b.q_chunks[1]},
                                {b.kv_chunks[0], b.kv_chunks[1]}, step == 0, ws.data(), ws.size());
  }
  h.compare("out", acc, want_out);
  h.compare("lse", lse, want_lse);
  const Operand final_lse = h.upload(want_lse, DType::kFloat32);
  // The gradients accumulate: they start from the same random values on both sides, so a step
  // that overwrites where it should add shows.
  const Operand dq = h.floats(out_numel(a));
  const Operand dkv[2] = {h.floats(kv_numel), h.floats(kv_numel)};
  std::vector<double> want_dq = dq.values, want_dkv[2] = {dkv[0].values, dkv[1].values};
  for (int step = 0; step < 2; ++step) {
    const RingBlock b = block(step);
    const int from = b.kv_chunks[0];
    h.backend().ring_attention_backward(dq.view(), dkv[from].view(), dy.view(), y.view(), final_lse.view(), qkv.view(),
                                        kv[from].view(), workspace.view(), b);
    cpu::ring_attention_backward(want_dq.data(), want_dkv[from].data(), dy.data(), y.data(), final_lse.data(),
                                 qkv.data(), kv[from].data(), a.B, a.T, a.n_head, a.n_kv_head, a.head_dim,
                                 {b.q_chunks[0], b.q_chunks[1]}, {b.kv_chunks[0], b.kv_chunks[1]}, ws.data(),
                                 ws.size());
  }
  h.compare("dq", dq, want_dq);
  h.compare("dkv (own block)", dkv[rank], want_dkv[rank]);
  h.compare("dkv (the other rank's)", dkv[1 - rank], want_dkv[1 - rank]);
}

// cos and sin (T + 3, hs/2) float32 for theta 10000: a table longer than the sequence, as in
// training.
struct RopeTables {
  Operand cos, sin;
};
RopeTables rope_tables(CheckHarness& h, const AttentionShape& a) {
  const int rows = a.T + 3, half = a.head_dim / 2;
  std::vector<double> cos(size_t(rows) * size_t(half)), sin(cos.size());
  for (int t = 0; t < rows; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / a.head_dim);
      cos[size_t(t) * size_t(half) + size_t(i)] = std::cos(angle);
      sin[size_t(t) * size_t(half) + size_t(i)] = std::sin(angle);
    }
  return {h.upload(cos, DType::kFloat32), h.upload(sin, DType::kFloat32)};
}

void rope_forward(CheckHarness& h, AttentionShape a, bool documents) {
  const Documents d = documents_for(h, a, documents);
  const RopeTables table = rope_tables(h, a);
  const Operand qkv = h.activations(qkv_numel(a), 1.5);
  h.backend().rope_forward(qkv.view(), table.cos.view(), table.sin.view(), a);
  std::vector<double> want = qkv.values;
  cpu::rope_forward(want.data(), table.cos.data(), table.sin.data(), a.B, a.T, a.n_head, a.n_kv_head, a.head_dim,
                    d.data());
  h.compare("qkv", qkv, want);
}

void rope_backward(CheckHarness& h, AttentionShape a, bool documents) {
  const Documents d = documents_for(h, a, documents);
  const RopeTables table = rope_tables(h, a);
  const Operand dqkv = h.activations(qkv_numel(a));
  h.backend().rope_backward(dqkv.view(), table.cos.view(), table.sin.view(), a);
  std::vector<double> want = dqkv.values;
  cpu::rope_backward(want.data(), table.cos.data(), table.sin.data(), a.B, a.T, a.n_head, a.n_kv_head, a.head_dim,
                     d.data());
  h.compare("dqkv", dqkv, want);
}

}  // namespace

OpCase attention_forward_case(const AttentionShape& a, bool documents) {
  return {"attention_forward", heads_shape(a, documents), HeldTo::kComputeDtype,
          [a, documents](CheckHarness& h) { attention_forward(h, a, documents); }};
}
OpCase attention_backward_case(const AttentionShape& a, bool documents) {
  return {"attention_backward", heads_shape(a, documents), HeldTo::kComputeDtype,
          [a, documents](CheckHarness& h) { attention_backward(h, a, documents); }};
}
OpCase ring_attention_case(const AttentionShape& a, int rank) {
  return {"ring_attention", heads_shape(a) + " cp=2 rank=" + std::to_string(rank), HeldTo::kComputeDtype,
          [a, rank](CheckHarness& h) { ring_attention(h, a, rank); }};
}
OpCase rope_forward_case(const AttentionShape& a, bool documents) {
  return {"rope_forward", heads_shape(a, documents), HeldTo::kComputeDtype,
          [a, documents](CheckHarness& h) { rope_forward(h, a, documents); }};
}
OpCase rope_backward_case(const AttentionShape& a, bool documents) {
  return {"rope_backward", heads_shape(a, documents), HeldTo::kComputeDtype,
          [a, documents](CheckHarness& h) { rope_backward(h, a, documents); }};
}

}  // namespace feast::check
