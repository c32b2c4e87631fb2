// Each op checks its operands (on the CPU, of the right dtype, large enough) and calls the op
// template in model/cpu/ for float.
#include "backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/cross_entropy.h"
#include "backend/cpu/encoder.h"
#include "backend/cpu/gelu.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/lora.h"
#include "backend/cpu/nf4.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/reserved_memory.h"
#include "backend/cpu/residual.h"
#include "backend/cpu/rmsnorm.h"
#include "backend/cpu/ring_attention.h"
#include "backend/cpu/dropout.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/swiglu.h"

namespace feast {
namespace {

// The data of operand `name` of `op` as T*, after checking it: nullptr for an empty optional
// operand, an error naming the op and the operand otherwise.
template <typename T>
T* operand(const TensorView& v, size_t need, bool optional, const char* op, const char* name) {
  if (!v) {
    FEAST_CHECK(optional, "cpu backend " << op << ": operand " << name << " is missing");
    return nullptr;
  }
  FEAST_CHECK(v.device.is_cpu(), "cpu backend " << op << ": operand " << name << " is on " << v.device.name());
  FEAST_CHECK(v.dtype == dtype_of<T>(), "cpu backend " << op << ": operand " << name << " is " << dtype_name(v.dtype)
                                                       << ", expected " << dtype_name(dtype_of<T>()));
  FEAST_CHECK(v.numel >= need, "cpu backend " << op << ": operand " << name << " holds " << v.numel
                                              << " elements, the op needs " << need);
  return static_cast<T*>(v.data);
}

size_t n(int a) { return static_cast<size_t>(a); }

// The rows a table of row indices (< 0: none) reaches: the largest index + 1 (an operand's size).
int rows_indexed(const int32_t* index, size_t count) {
  int32_t most = -1;
  for (size_t i = 0; i < count; ++i) most = std::max(most, index[i]);
  return int(most) + 1;
}
size_t n(int a, int b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

}  // namespace

// F(view, count): a required float32 operand; OF: optional; I32: int32 token ids; OI32: optional
// int32 (document positions).
#define F(v, count) operand<float>(v, count, false, __func__, #v)
#define OF(v, count) operand<float>(v, count, true, __func__, #v)
#define I32(v, count) operand<int32_t>(v, count, false, __func__, #v)
#define OI32(v, count) operand<int32_t>(v, count, true, __func__, #v)

Tensor CpuBackend::allocate(DType dtype, size_t numel) { return Tensor(host_allocator(), dtype, numel); }

size_t CpuBackend::page_bytes() const { return host_page_bytes(); }

Tensor CpuBackend::reserve(DType dtype, size_t numel) { return Tensor(reserved_host_allocator(), dtype, numel); }

void CpuBackend::decommit(const TensorView& pages) {
  FEAST_CHECK(pages.device.is_cpu(), "cpu backend decommit: the pages are on " << pages.device.name());
  decommit_host_pages(pages.data, pages.bytes());
}

void CpuBackend::copy(const TensorView& dst, const TensorView& src) {
  FEAST_CHECK(dst.dtype == src.dtype && dst.numel == src.numel,
              "cpu backend copy: " << src.numel << " " << dtype_name(src.dtype) << " into " << dst.numel << " "
                                   << dtype_name(dst.dtype));
  FEAST_CHECK(dst.device.is_cpu() && src.device.is_cpu(), "cpu backend copy: both sides must be host memory");
  if (dst.data != src.data && dst.numel > 0) std::memmove(dst.data, src.data, dst.bytes());
}

void CpuBackend::zero(const TensorView& x) {
  FEAST_CHECK(x.device.is_cpu(), "cpu backend zero: the tensor is on " << x.device.name());
  if (x.numel > 0) std::memset(x.data, 0, x.bytes());
}

Stream& CpuBackend::stream() { return cpu_stream(); }
std::unique_ptr<Event> CpuBackend::create_event() { return make_cpu_event(); }
std::unique_ptr<Stream> CpuBackend::create_stream() { return make_cpu_stream(); }
void CpuBackend::copy_async(const TensorView& dst, const TensorView& src, Stream&) { copy(dst, src); }

void CpuBackend::embedding_forward(const TensorView& out, const TensorView& tokens, const TensorView& wte,
                                   const TensorView& wpe, const TensorView& positions, int B, int T, int C,
                                   int vocab_begin, int vocab_end) {
  cpu::encoder_forward(F(out, n(B * T, C)), I32(tokens, n(B, T)), F(wte, n(vocab_end - vocab_begin, C)),
                       OF(wpe, n(T, C)), B, T, C, vocab_begin, vocab_end, OI32(positions, n(B, T)));
}

void CpuBackend::embedding_backward(const TensorView& dwte, const TensorView& dwpe, const TensorView& dout,
                                    const TensorView& tokens, const TensorView& positions, int B, int T, int C,
                                    int vocab_begin, int vocab_end) {
  cpu::encoder_backward(F(dwte, n(vocab_end - vocab_begin, C)), OF(dwpe, n(T, C)), F(dout, n(B * T, C)),
                        I32(tokens, n(B, T)), B, T, C, vocab_begin, vocab_end, OI32(positions, n(B, T)));
}

void CpuBackend::layernorm_forward(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                                   const TensorView& inp, const TensorView& weight, const TensorView& bias, int N, int C,
                                   float eps) {
  cpu::layernorm_forward(F(out, n(N, C)), F(mean, n(N)), F(rstd, n(N)), F(inp, n(N, C)), F(weight, n(C)),
                         F(bias, n(C)), N, C, eps);
}

void CpuBackend::layernorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                                    const TensorView& dout, const TensorView& inp, const TensorView& weight,
                                    const TensorView& mean, const TensorView& rstd, int N, int C) {
  cpu::layernorm_backward(F(dinp, n(N, C)), F(dweight, n(C)), F(dbias, n(C)), F(dout, n(N, C)), F(inp, n(N, C)),
                          F(weight, n(C)), F(mean, n(N)), F(rstd, n(N)), N, C);
}

void CpuBackend::rmsnorm_forward(const TensorView& out, const TensorView& rstd, const TensorView& inp,
                                 const TensorView& weight, int N, int C, float eps) {
  cpu::rmsnorm_forward(F(out, n(N, C)), F(rstd, n(N)), F(inp, n(N, C)), F(weight, n(C)), N, C, eps);
}

void CpuBackend::rmsnorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                                  const TensorView& inp, const TensorView& weight, const TensorView& rstd, int N,
                                  int C) {
  cpu::rmsnorm_backward(F(dinp, n(N, C)), F(dweight, n(C)), F(dout, n(N, C)), F(inp, n(N, C)), F(weight, n(C)),
                        F(rstd, n(N)), N, C);
}

void CpuBackend::matmul_forward(const TensorView& out, const TensorView& inp, const TensorView& weight,
                                const TensorView& bias, int N, int C, int OC) {
  cpu::matmul_forward(F(out, n(N, OC)), F(inp, n(N, C)), F(weight, n(OC, C)), OF(bias, n(OC)), N, C, OC);
}

void CpuBackend::matmul_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                                 const TensorView& dout, const TensorView& inp, const TensorView& weight, int N, int C,
                                 int OC) {
  cpu::matmul_backward(OF(dinp, n(N, C)), F(dweight, n(OC, C)), OF(dbias, n(OC)), F(dout, n(N, OC)),
                       F(inp, n(N, C)), F(weight, n(OC, C)), N, C, OC);
}

void CpuBackend::matmul_backward_input(const TensorView& dinp, const TensorView& dout, const TensorView& weight,
                                       int N, int C, int OC) {
  cpu::matmul_backward_input(F(dinp, n(N, C)), F(dout, n(N, OC)), F(weight, n(OC, C)), N, C, OC);
}

void CpuBackend::matmul_backward_weight_rows(const TensorView& dweight_rows, const TensorView& dout,
                                             const TensorView& inp, int N, int C, int OC, int row_begin, int row_end) {
  FEAST_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= OC,
              "cpu backend matmul_backward_weight_rows: rows [" << row_begin << ", " << row_end << ") of " << OC);
  cpu::matmul_backward_weight_rows(F(dweight_rows, n(row_end - row_begin, C)), F(dout, n(N, OC)), F(inp, n(N, C)),
                                   N, C, OC, row_begin, row_end);
}

void CpuBackend::lora_forward(const TensorView& out, const TensorView& h, const TensorView& inp, const TensorView& a,
                              const TensorView& b, const LoraShape& s) {
  s.check("cpu backend lora_forward");
  cpu::lora_forward(F(out, n(s.N, s.out_ld)), F(h, n(s.N, s.r)), F(inp, n(s.N, s.C)), F(a, n(s.r, s.C)),
                    F(b, n(s.OC, s.r)), s);
}

void CpuBackend::lora_backward(const TensorView& dinp, const TensorView& da, const TensorView& db, const TensorView& h,
                               const TensorView& dh, const TensorView& dout, const TensorView& inp, const TensorView& a,
                               const TensorView& b, const LoraShape& s) {
  s.check("cpu backend lora_backward");
  cpu::lora_backward(OF(dinp, n(s.N, s.C)), F(da, n(s.r, s.C)), F(db, n(s.OC, s.r)), F(h, n(s.N, s.r)),
                     F(dh, n(s.N, s.r)), F(dout, n(s.N, s.out_ld)), F(inp, n(s.N, s.C)), F(a, n(s.r, s.C)),
                     F(b, n(s.OC, s.r)), s);
}

void CpuBackend::moe_route(const TensorView& probs, const TensorView& lse, const TensorView& expert,
                           const TensorView& weight, const TensorView& prob_sum, const TensorView& logits, int N,
                           int E, int k, bool renormalize) {
  FEAST_CHECK(k >= 1 && k <= E, "cpu backend moe_route: top " << k << " of " << E << " experts");
  cpu::moe_route(F(probs, n(N, E)), F(lse, n(N)), operand<int32_t>(expert, n(N, k), false, __func__, "expert"),
                 F(weight, n(N, k)), F(prob_sum, n(E)), F(logits, n(N, E)), N, E, k, renormalize);
}

void CpuBackend::moe_route_backward(const TensorView& dlogits, const TensorView& probs, const TensorView& lse,
                                    const TensorView& expert, const TensorView& weight, const TensorView& dweight,
                                    const TensorView& dprob, float z_scale, int N, int E, int k, bool renormalize) {
  cpu::moe_route_backward(F(dlogits, n(N, E)), F(probs, n(N, E)), F(lse, n(N)), I32(expert, n(N, k)),
                          F(weight, n(N, k)), F(dweight, n(N, k)), F(dprob, n(E)), z_scale, N, E, k, renormalize);
}

void CpuBackend::moe_gather(const TensorView& rows, const TensorView& inp, const TensorView& token, int M, int C) {
  const int32_t* t = I32(token, n(M));
  cpu::moe_gather(F(rows, n(M, C)), F(inp, n(rows_indexed(t, n(M)), C)), t, M, C);
}

void CpuBackend::moe_gather_backward(const TensorView& dinp, const TensorView& drows, const TensorView& slot, int N,
                                     int k, int C) {
  const int32_t* s = I32(slot, n(N, k));
  cpu::moe_gather_backward(F(dinp, n(N, C)), F(drows, n(rows_indexed(s, n(N, k)), C)), s, N, k, C);
}

void CpuBackend::moe_combine(const TensorView& out, const TensorView& rows, const TensorView& slot,
                             const TensorView& weight, int N, int k, int C) {
  const int32_t* s = I32(slot, n(N, k));
  cpu::moe_combine(F(out, n(N, C)), F(rows, n(rows_indexed(s, n(N, k)), C)), s, F(weight, n(N, k)), N, k, C);
}

void CpuBackend::moe_combine_backward(const TensorView& drows, const TensorView& dweight, const TensorView& dout,
                                      const TensorView& rows, const TensorView& slot, const TensorView& weight, int N,
                                      int k, int C) {
  const int32_t* s = I32(slot, n(N, k));
  const size_t rows_used = n(rows_indexed(s, n(N, k)), C);
  cpu::moe_combine_backward(F(drows, rows_used), F(dweight, n(N, k)), F(dout, n(N, C)), F(rows, rows_used), s,
                            F(weight, n(N, k)), N, k, C);
}

void CpuBackend::moe_shared_gate(const TensorView& gate, const TensorView& logits, int N) {
  cpu::moe_shared_gate(F(gate, n(N)), F(logits, n(N)), N);
}

void CpuBackend::moe_shared_gate_backward(const TensorView& dlogits, const TensorView& gate, const TensorView& dgate,
                                          int N) {
  cpu::moe_shared_gate_backward(F(dlogits, n(N)), F(gate, n(N)), F(dgate, n(N)), N);
}

void CpuBackend::dropout_forward(const TensorView& out, const TensorView& inp, const DropoutShape& s) {
  check_dropout(s, "cpu backend dropout_forward");
  cpu::dropout_forward(F(out, n(s.N, s.C)), F(inp, n(s.N, s.C)), s);
}

void CpuBackend::dropout_backward(const TensorView& dinp, const TensorView& dout, const DropoutShape& s) {
  check_dropout(s, "cpu backend dropout_backward");
  cpu::dropout_backward(F(dinp, n(s.N, s.C)), F(dout, n(s.N, s.C)), s);
}

void CpuBackend::dequantize_nf4(const TensorView& out, const Nf4Piece& piece) {
  piece.check("cpu backend dequantize_nf4");
  for (const TensorView* v : {&piece.codes, &piece.scales, &piece.absmax2, &piece.scale_code})
    FEAST_CHECK(!*v || v->device.is_cpu(), "cpu backend dequantize_nf4: an operand is on " << v->device.name());
  cpu::dequantize_nf4(F(out, n(piece.rows, piece.cols)), piece);
}

size_t CpuBackend::attention_state_size(const AttentionShape& s) const {
  return n(s.B, s.n_head) * n(s.T, s.T);  // the softmax probabilities (B, NH, T, T)
}

size_t CpuBackend::attention_workspace_size(const AttentionShape& s) const {
  return static_cast<size_t>(cpu::attention_scratch_size(s.T, omp_get_max_threads()));
}

void CpuBackend::attention_forward(const TensorView& out, const TensorView& state, const TensorView& qkv,
                                   const AttentionShape& s) {
  FEAST_CHECK(s.n_kv_head > 0 && s.n_head % s.n_kv_head == 0,
              "attention: " << s.n_head << " query heads do not share " << s.n_kv_head << " key/value heads evenly");
  cpu::attention_forward(F(out, s.rows() * n(s.out_width())), F(state, attention_state_size(s)),
                         F(qkv, s.rows() * n(s.qkv_width())), s.B, s.T, s.n_head, s.n_kv_head, s.head_dim,
                         OI32(s.positions, s.rows()));
}

// The CPU keeps the probabilities themselves (state), so it does not need the forward's output.
void CpuBackend::attention_backward(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                                    const TensorView& /*out*/, const TensorView& state, const TensorView& workspace,
                                    const AttentionShape& s) {
  float* ws = F(workspace, n(s.T, s.T));
  cpu::attention_backward(F(dqkv, s.rows() * n(s.qkv_width())), F(dout, s.rows() * n(s.out_width())),
                          F(qkv, s.rows() * n(s.qkv_width())), F(state, attention_state_size(s)), s.B, s.T, s.n_head,
                          s.n_kv_head, s.head_dim, OI32(s.positions, s.rows()), ws, static_cast<long>(workspace.numel));
}

size_t CpuBackend::ring_attention_workspace_size(const AttentionShape& s) const {
  return cpu::ring_attention_workspace(s.T, s.head_dim, omp_get_max_threads());
}

void CpuBackend::ring_attention_pack(const TensorView& kv, const TensorView& qkv, const AttentionShape& s) {
  cpu::ring_attention_pack(F(kv, s.rows() * n(s.kv_width())), F(qkv, s.rows() * n(s.qkv_width())), s.rows(), s.n_head,
                           s.n_kv_head, s.head_dim);
}

void CpuBackend::ring_attention_forward(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                                        const TensorView& kv, const TensorView& workspace, const RingBlock& b,
                                        bool first) {
  const AttentionShape& s = b.shape;
  cpu::ring_attention_forward(F(out, s.rows() * n(s.out_width())), F(lse, s.head_rows()),
                              F(qkv, s.rows() * n(s.qkv_width())), F(kv, s.rows() * n(s.kv_width())), s.B, s.T, s.n_head,
                              s.n_kv_head, s.head_dim, {b.q_chunks[0], b.q_chunks[1]},
                              {b.kv_chunks[0], b.kv_chunks[1]}, first, F(workspace, 1), workspace.numel);
}

void CpuBackend::ring_attention_backward(const TensorView& dq, const TensorView& dkv, const TensorView& dout,
                                         const TensorView& out, const TensorView& lse, const TensorView& qkv,
                                         const TensorView& kv, const TensorView& workspace, const RingBlock& b) {
  const AttentionShape& s = b.shape;
  const size_t kv_elems = s.rows() * n(s.kv_width()), rows_out = s.rows() * n(s.out_width());
  cpu::ring_attention_backward(F(dq, rows_out), F(dkv, kv_elems), F(dout, rows_out), F(out, rows_out),
                               F(lse, s.head_rows()), F(qkv, s.rows() * n(s.qkv_width())), F(kv, kv_elems), s.B, s.T, s.n_head, s.n_kv_head, s.head_dim,
                               {b.q_chunks[0], b.q_chunks[1]}, {b.kv_chunks[0], b.kv_chunks[1]}, F(workspace, 1),
                               workspace.numel);
}

void CpuBackend::ring_attention_unpack(const TensorView& dqkv, const TensorView& dq, const TensorView& dkv,
                                       const AttentionShape& s) {
  cpu::ring_attention_unpack(F(dqkv, s.rows() * n(s.qkv_width())), F(dq, s.rows() * n(s.out_width())),
                             F(dkv, s.rows() * n(s.kv_width())), s.rows(), s.n_head, s.n_kv_head, s.head_dim);
}

void CpuBackend::rope_forward(const TensorView& qkv, const TensorView& cos, const TensorView& sin,
                              const AttentionShape& s) {
  cpu::rope_forward(F(qkv, s.rows() * n(s.qkv_width())), F(cos, n(s.T, s.head_dim / 2)), F(sin, n(s.T, s.head_dim / 2)),
                    s.B, s.T, s.n_head, s.n_kv_head, s.head_dim, OI32(s.positions, s.rows()));
}

void CpuBackend::rope_backward(const TensorView& dqkv, const TensorView& cos, const TensorView& sin,
                               const AttentionShape& s) {
  cpu::rope_backward(F(dqkv, s.rows() * n(s.qkv_width())), F(cos, n(s.T, s.head_dim / 2)),
                     F(sin, n(s.T, s.head_dim / 2)), s.B, s.T, s.n_head, s.n_kv_head, s.head_dim,
                     OI32(s.positions, s.rows()));
}

void CpuBackend::gelu_forward(const TensorView& out, const TensorView& inp, size_t count) {
  cpu::gelu_forward(F(out, count), F(inp, count), count);
}

void CpuBackend::gelu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, size_t count) {
  cpu::gelu_backward(F(dinp, count), F(inp, count), F(dout, count), count);
}

void CpuBackend::swiglu_forward(const TensorView& out, const TensorView& inp, int N, int I) {
  cpu::swiglu_forward(F(out, n(N, I)), F(inp, n(N, 2 * I)), N, I);
}

void CpuBackend::swiglu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, int N, int I) {
  cpu::swiglu_backward(F(dinp, n(N, 2 * I)), F(inp, n(N, 2 * I)), F(dout, n(N, I)), N, I);
}

void CpuBackend::add(const TensorView& out, const TensorView& a, const TensorView& b, size_t count) {
  cpu::residual_forward(F(out, count), F(a, count), F(b, count), count);
}

void CpuBackend::cross_entropy_row_max(const TensorView& row_max, const TensorView& logits, int N, int Vl,
                                       int vocab_begin, int V) {
  cpu::cross_entropy_row_max(F(row_max, n(N)), F(logits, n(N, Vl)), N, Vl, vocab_begin, V);
}

void CpuBackend::cross_entropy_partials(const TensorView& sum_exp, const TensorView& target_logit,
                                        const TensorView& logits, const TensorView& row_max, const TensorView& targets,
                                        int N, int Vl, int vocab_begin, int V, bool keep_exp) {
  cpu::cross_entropy_partials(F(sum_exp, n(N)), F(target_logit, n(N)), F(logits, n(N, Vl)), F(row_max, n(N)),
                              I32(targets, n(N)), N, Vl, vocab_begin, V, keep_exp);
}

void CpuBackend::cross_entropy_finish(const TensorView& logits, const TensorView& losses, const TensorView& row_max,
                                      const TensorView& sum_exp, const TensorView& target_logit,
                                      const TensorView& targets, int N, int Vl, int vocab_begin, int V, float dloss) {
  cpu::cross_entropy_finish(F(logits, n(N, Vl)), F(losses, n(N)), F(row_max, n(N)), F(sum_exp, n(N)),
                            F(target_logit, n(N)), I32(targets, n(N)), N, Vl, vocab_begin, V, dloss);
}

double CpuBackend::sum(const TensorView& x) {
  const float* p = F(x, x.numel);
  double total = 0;
  for (size_t i = 0; i < x.numel; ++i) total += p[i];
  return total;
}

void CpuBackend::adamw_step(const TensorView& params, const TensorView& m, const TensorView& v,
                            const TensorView& grads, const AdamWStep& step, float grad_scale) {
  const size_t count = params.numel;
  cpu::adamw_step(F(params, count), F(m, count), F(v, count), F(grads, count), count, step, grad_scale);
}

double CpuBackend::sum_of_squares(const TensorView& x) { return cpu::sum_of_squares(F(x, x.numel), x.numel); }

void CpuBackend::cast(const TensorView& dst, const TensorView& src) {
  FEAST_CHECK(dst.numel == src.numel, "cpu backend cast: " << src.numel << " elements into " << dst.numel);
  FEAST_CHECK(dst.device.is_cpu() && src.device.is_cpu(), "cpu backend cast: both sides must be host memory");
  if (dst.dtype == src.dtype) return copy(dst, src);
  if (dst.dtype == DType::kBFloat16 && src.dtype == DType::kFloat32)
    return cpu::cast_float_to_bf16(static_cast<uint16_t*>(dst.data), static_cast<const float*>(src.data), src.numel);
  if (dst.dtype == DType::kFloat32 && src.dtype == DType::kBFloat16)
    return cpu::cast_bf16_to_float(static_cast<float*>(dst.data), static_cast<const uint16_t*>(src.data), src.numel);
  throw Error(std::string("cpu backend cast: ") + dtype_name(src.dtype) + " to " + dtype_name(dst.dtype) +
              " is not supported");
}

#undef F
#undef OF
#undef I32

}  // namespace feast
