// The compute backend: every op the models and the optimizer use, behind one interface (ggml's
// backend table is the model), plus the backend's memory, copies and stream. Model code calls
// only this; it never names a backend. The CPU implementation (backend/cpu/cpu_backend.h) is the
// readable reference: plain loops plus BLAS, float32, deterministic. A CUDA implementation slots
// in by implementing this class; the op table of backend/check/ runs every op of a backend against
// the float64 reference on odd shapes (the unit tests on the CPU, `trainer check-backend` on a device).
//
// Conventions. Operands are TensorViews on the backend's device. Parameters and activations
// are in compute_dtype(); parameter gradients, optimizer state, norm statistics, the softmax
// state and losses are float32; token ids int32. An optional operand (a bias, say) is an empty
// view. Dimensions are passed explicitly; an op checks that each view holds enough elements.
// Gradients of parameters accumulate (+=) so micro-batches add up; gradients of activations are
// overwritten unless an op says otherwise.
// Legend: B batch, T time, N = B*T rows, C channels, OC output channels, Vl this rank's
// vocabulary rows, V the real vocabulary, NH / NKV query / key-value heads, hs head size.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"
#include "backend/dropout_mask.h"
#include "backend/scalar_math.h"

namespace feast {

// A LoRA product's shape (Backend::lora_forward/backward): N rows of C inputs, rank r, and the
// OC output columns the adapter updates, [col, col + OC) of an output out_ld wide; the update is
// scaled by `scale` (alpha / r).
struct LoraShape {
  int N = 0, C = 0, r = 0, OC = 0, out_ld = 0, col = 0;
  float scale = 1;
  // Throws naming `op` when the adapter's columns are not inside the output's.
  void check(const std::string& op) const;
};

// One rectangle of a weight stored in 4-bit NormalFloat (backend/nf4.h, model/quantized_base.h):
// rows x cols elements of a quantized tensor `width` wide, starting at (row0, col0). Its codes
// are packed row-major over the rectangle, two a byte, the first in the high nibble. The tensor's
// blocks of 64 run over its row-major order; row i of the rectangle keeps the scales of the
// blocks it touches in scales_per_row slots, slot s holding block ((row0 + i) * width + col0) /
// 64 + s. Under double quantization a slot holds the block's 8-bit scale code, read through
// scale_code (nf4_scale_code() on the device) and the tensor's per-256-block absmax2, plus offset.
struct Nf4Piece {
  TensorView codes;       // uint8, (rows * cols + 1) / 2
  TensorView scales;      // float32 absmax, or uint8 scale codes (double quantization): rows * scales_per_row
  TensorView absmax2;     // float32, per 256 of the tensor's blocks (double quantization only)
  TensorView scale_code;  // float32 (256) (double quantization only)
  float offset = 0;
  int64_t row0 = 0, col0 = 0, width = 0;
  int rows = 0, cols = 0, scales_per_row = 0;
  bool double_quant() const { return scales.dtype == DType::kUInt8; }
  // Throws naming `op` when the views are too small for the shape or of the wrong dtypes.
  void check(const std::string& op) const;
};

// Throws naming `op` when a dropout call's shape is not one (p outside [0, 1), rows that are not
// whole sequences, columns outside the product's).
void check_dropout(const DropoutShape& s, const std::string& op);
// The grouped products' groups (Backend::grouped_matmul_forward): weights.size() + 1 row offsets,
// from 0, never decreasing; throws feast::Error naming `op` otherwise.
void check_groups(const std::vector<TensorView>& weights, const std::vector<int>& offsets, const char* op);

// One attention call's shape on this rank: n_head query heads and n_kv_head key/value heads of
// head_dim channels each, laid out in a QKV row as [q heads | k heads | v heads].
struct AttentionShape {
  AttentionShape() = default;
  AttentionShape(int B_, int T_, int n_head_, int n_kv_head_, int head_dim_)
      : B(B_), T(T_), n_head(n_head_), n_kv_head(n_kv_head_), head_dim(head_dim_) {}
  int B = 0, T = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  // Document masks (data.document_mask): int32 (B T), each token's place in its document, on the
  // backend's device. Attention then lets query t see keys t - positions[t] .. t only, and the
  // rotary embedding turns a row by its document position. Empty: one document per row,
  // positions 0 .. T-1.
  TensorView positions;
  size_t rows() const { return size_t(B) * size_t(T); }
  int qkv_width() const { return (n_head + 2 * n_kv_head) * head_dim; }
  int out_width() const { return n_head * head_dim; }
  // A row's key and value heads, [k heads | v heads]: what context parallelism's ring passes on.
  int kv_width() const { return 2 * n_kv_head * head_dim; }
  // One value per row and query head (B NH T): a fused attention's log-sum-exp.
  size_t head_rows() const { return rows() * size_t(n_head); }
};

// One block of ring attention (context parallelism, model/context_parallel.h). shape.T is this
// rank's tokens of each sequence: two chunks of T/2, at global chunk indices q_chunks; the
// block's keys and values are one rank's two chunks, at kv_chunks. A query of chunk i sees every
// key of a chunk j < i and the keys up to itself in chunk i (causal attention over the whole
// sequence).
struct RingBlock {
  AttentionShape shape;
  int q_chunks[2] = {0, 1};
  int kv_chunks[2] = {0, 1};
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  virtual Device device() const = 0;
  virtual DType compute_dtype() const = 0;

  // ---- memory and ordering ----------------------------------------------------------------
  // numel zero-filled elements on device().
  virtual Tensor allocate(DType dtype, size_t numel) = 0;
  // numel zero-filled elements of host memory that copies to and from the device are fastest
  // with (pinned on a GPU; plain host memory on the CPU): offloaded optimizer state.
  virtual Tensor allocate_host(DType dtype, size_t numel) { return Tensor(host_allocator(), dtype, numel); }
  // ---- memory whose pages come and go: ZeRO 3's parameters ----
  // Bytes per page of reserve()d memory, the unit commit() and decommit() work in; 0 when this
  // backend cannot hand pages back (then reserve() is allocate() and nothing is given back).
  virtual size_t page_bytes() const { return 0; }
  // numel zero elements of address space whose pages hold memory only while committed (on the
  // CPU: once written).
  virtual Tensor reserve(DType dtype, size_t numel) { return allocate(dtype, numel); }
  // Whole pages of reserve()d memory: make them usable, or give their memory back (their values
  // are lost; committed again they read as zero).
  virtual void commit(const TensorView& pages) { (void)pages; }
  virtual void decommit(const TensorView& pages) { (void)pages; }
  // dst = src; same dtype and numel; either may be host memory.
  virtual void copy(const TensorView& dst, const TensorView& src) = 0;
  virtual void zero(const TensorView& x) = 0;
  // The stream every op is enqueued on, and events to order other streams (communication)
  // against it.
  virtual Stream& stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // Another stream on this device, for copies that run beside stream()'s work (the offloaded
  // optimizer's, one per direction); events order it against stream(). On the CPU every
  // stream is the same no-op.
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // dst = src (as copy()) enqueued on `on` (stream() or one of create_stream()'s): on a GPU it
  // returns before the copy is done, so host memory in it must come from allocate_host() and be
  // left alone until an event recorded on `on` after it is reached. On the CPU: copy().
  virtual void copy_async(const TensorView& dst, const TensorView& src, Stream& on) = 0;
  // The most device memory this backend's allocator has held at once; 0 where it is not tracked
  // (the CPU's host memory, reported by the run's own accounting).
  virtual size_t peak_memory_bytes() const { return 0; }

  // ---- embedding (vocab-parallel: this rank holds rows [vocab_begin, vocab_end)) ------------
  // out (N, C) = wte[token - vocab_begin] for local tokens, 0 for others; + wpe[t] (maxT, C)
  // when given (one tensor-parallel rank adds positions). positions (N) int32, when given: the
  // row adds wpe[positions[row]] instead (document masks, AttentionShape::positions).
  virtual void embedding_forward(const TensorView& out, const TensorView& tokens, const TensorView& wte,
                                 const TensorView& wpe, const TensorView& positions, int B, int T, int C,
                                 int vocab_begin, int vocab_end) = 0;
  // dwte (vocab_end - vocab_begin, C) += the dout rows of its tokens; dwpe (maxT, C) += dout
  // summed over the batch when given, by position as the forward read it. Deterministic:
  // repeated tokens (and positions) add in row order.
  virtual void embedding_backward(const TensorView& dwte, const TensorView& dwpe, const TensorView& dout,
                                  const TensorView& tokens, const TensorView& positions, int B, int T, int C,
                                  int vocab_begin, int vocab_end) = 0;

  // ---- norms ---------------------------------------------------------------------------------
  // out (N, C); mean and rstd (N) saved for the backward.
  virtual void layernorm_forward(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                                 const TensorView& inp, const TensorView& weight, const TensorView& bias, int N, int C,
                                 float eps) = 0;
  // dinp (N, C) += (the residual stream's gradient arrives first); dweight, dbias (C) +=.
  virtual void layernorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                                  const TensorView& dout, const TensorView& inp, const TensorView& weight,
                                  const TensorView& mean, const TensorView& rstd, int N, int C) = 0;
  // out (N, C); rstd (N) saved for the backward.
  virtual void rmsnorm_forward(const TensorView& out, const TensorView& rstd, const TensorView& inp,
                               const TensorView& weight, int N, int C, float eps) = 0;
  // dinp (N, C) += (as layernorm_backward); dweight (C) +=.
  virtual void rmsnorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                                const TensorView& inp, const TensorView& weight, const TensorView& rstd, int N,
                                int C) = 0;

  // ---- matrix products (weights (OC, C) like torch.nn.Linear) -------------------------------
  // out (N, OC) = inp (N, C) @ weight^T + bias (OC).
  virtual void matmul_forward(const TensorView& out, const TensorView& inp, const TensorView& weight,
                              const TensorView& bias, int N, int C, int OC) = 0;
  // GPT-2's MLP input: pre (N, OC) = inp @ weight^T + bias and act = gelu(pre) (tanh form), both
  // kept for the backward. This composes the two ops; a backend may fuse them (the CUDA one
  // uses cuBLASLt's GELU epilogue where it can).
  virtual void matmul_gelu_forward(const TensorView& pre, const TensorView& act, const TensorView& inp,
                                   const TensorView& weight, const TensorView& bias, int N, int C, int OC) {
    matmul_forward(pre, inp, weight, bias, N, C, OC);
    gelu_forward(act, pre, size_t(N) * size_t(OC));
  }
  // dinp (N, C) = dout @ weight (skipped when empty); dweight (OC, C) += dout^T @ inp;
  // dbias (OC) += column sums of dout (skipped when empty).
  virtual void matmul_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                               const TensorView& dout, const TensorView& inp, const TensorView& weight, int N, int C,
                               int OC) = 0;
  // The halves of matmul_backward for a large weight reduced in row chunks:
  // dinp (N, C) = dout (N, OC) @ weight, and dweight_rows (row_end - row_begin, C) +=
  // dout[:, row_begin:row_end]^T @ inp.
  virtual void matmul_backward_input(const TensorView& dinp, const TensorView& dout, const TensorView& weight, int N,
                                     int C, int OC) = 0;
  virtual void matmul_backward_weight_rows(const TensorView& dweight_rows, const TensorView& dout,
                                           const TensorView& inp, int N, int C, int OC, int row_begin,
                                           int row_end) = 0;

  // ---- grouped products (a mixture of experts' experts, each over its own rows) ---------------
  // Rows held group by group: group g is rows [offsets[g], offsets[g + 1]) (offsets has one more
  // entry than weights; R = offsets.back() rows in all) and multiplies weights[g] (OC, C).
  // out (R, OC) = each group's rows of inp (R, C) @ weights[g]^T; groups without rows are
  // skipped. This composes matmul_forward group by group; a backend may run every group in one
  // call (the CUDA one: cuBLAS's grouped GEMM).
  virtual void grouped_matmul_forward(const TensorView& out, const TensorView& inp,
                                      const std::vector<TensorView>& weights, const std::vector<int>& offsets, int C,
                                      int OC);
  // dinp (R, C) = each group's rows of dout (R, OC) @ weights[g] (composes matmul_backward_input).
  virtual void grouped_matmul_backward_input(const TensorView& dinp, const TensorView& dout,
                                             const std::vector<TensorView>& weights, const std::vector<int>& offsets,
                                             int C, int OC);

  // ---- LoRA (model/lora.h): a low-rank update of some output columns of a frozen product ------
  // h (N, r) = scale * inp (N, C) @ a^T (a: (r, C)); out[:, col:col+OC] += h @ b^T (b: (OC, r)),
  // out being (N, out_ld).
  virtual void lora_forward(const TensorView& out, const TensorView& h, const TensorView& inp, const TensorView& a,
                            const TensorView& b, const LoraShape& s) = 0;
  // With g = dout[:, col:col+OC] (dout (N, out_ld)): h again as lora_forward computes it;
  // db (OC, r) += g^T @ h; dh (N, r) = scale * g @ b; da (r, C) += dh^T @ inp; dinp (N, C) +=
  // dh @ a (skipped when empty). da and db are float32 gradients, the rest the compute dtype.
  virtual void lora_backward(const TensorView& dinp, const TensorView& da, const TensorView& db, const TensorView& h,
                             const TensorView& dh, const TensorView& dout, const TensorView& inp, const TensorView& a,
                             const TensorView& b, const LoraShape& s) = 0;

  // ---- LoRA dropout (PEFT's lora_dropout on an adapter's input; the mask: backend/dropout_mask.h) --
  // out (N, C) = inp * keep / (1 - p), in the compute dtype.
  virtual void dropout_forward(const TensorView& out, const TensorView& inp, const DropoutShape& s) = 0;
  // dinp (N, C) += dout * keep / (1 - p): the same elements kept.
  virtual void dropout_backward(const TensorView& dinp, const TensorView& dout, const DropoutShape& s) = 0;

  // ---- a quantized frozen base (QLoRA) -----------------------------------------------------------
  // out (rows, cols) in the compute dtype = the piece dequantized: code_book[code] * its block's
  // scale, each product in float32 (as bitsandbytes' dequantize_4bit), then rounded.
  virtual void dequantize_nf4(const TensorView& out, const Nf4Piece& piece) = 0;

  // ---- mixture of experts (model/layers/moe.h) ------------------------------------------------------
  // The router, from its logits (N, E) in the compute dtype: probs (N, E) = softmax over the experts
  // and lse (N) = logsumexp, float32; expert (N, k) int32 = each row's k most probable experts, most
  // probable first (ties: the lower index); weight (N, k) float32 = their probabilities, divided by
  // their sum when renormalize; prob_sum (E) float32 = probs summed over the rows (in row order).
  virtual void moe_route(const TensorView& probs, const TensorView& lse, const TensorView& expert,
                         const TensorView& weight, const TensorView& prob_sum, const TensorView& logits, int N, int E,
                         int k, bool renormalize) = 0;
  // dlogits (N, E) in the compute dtype = d loss / d logits, from dweight (N, k) float32 (d loss /
  // d weight), dprob (E) float32 (d loss / d probs[n, e], the same for every row: the load-balancing
  // loss's) and z_scale (d loss / d lse[n] = 2 z_scale lse[n]: the z-loss's).
  virtual void moe_route_backward(const TensorView& dlogits, const TensorView& probs, const TensorView& lse,
                                  const TensorView& expert, const TensorView& weight, const TensorView& dweight,
                                  const TensorView& dprob, float z_scale, int N, int E, int k, bool renormalize) = 0;
  // rows (M, C) = the rows token (M) int32 of inp (N, C): the tokens each expert takes, expert by expert.
  virtual void moe_gather(const TensorView& rows, const TensorView& inp, const TensorView& token, int M, int C) = 0;
  // dinp (N, C) += the rows of drows that slot (N, k) int32 names for each token's choices (< 0: none).
  virtual void moe_gather_backward(const TensorView& dinp, const TensorView& drows, const TensorView& slot, int N,
                                   int k, int C) = 0;
  // out (N, C) += sum over a token's choices j of weight[n, j] (float32) * rows row slot[n, j]
  // (slots < 0 skipped), in choice order.
  virtual void moe_combine(const TensorView& out, const TensorView& rows, const TensorView& slot,
                           const TensorView& weight, int N, int k, int C) = 0;
  // drows row slot[n, j] = weight[n, j] * dout row n; dweight[n, j] (float32) = dout row n . rows
  // row slot[n, j], 0 for a skipped choice.
  virtual void moe_combine_backward(const TensorView& drows, const TensorView& dweight, const TensorView& dout,
                                    const TensorView& rows, const TensorView& slot, const TensorView& weight, int N,
                                    int k, int C) = 0;
  // The shared experts' gate (Qwen2-MoE): gate (N) float32 = sigmoid(logits (N), compute dtype); and
  // dlogits (N) = dgate (float32) * gate * (1 - gate).
  virtual void moe_shared_gate(const TensorView& gate, const TensorView& logits, int N) = 0;
  virtual void moe_shared_gate_backward(const TensorView& dlogits, const TensorView& gate, const TensorView& dgate,
                                        int N) = 0;
  // ---- attention -------------------------------------------------------------------------------
  // Elements the forward keeps for the backward (the CPU keeps the softmax probabilities; a
  // fused kernel would keep the log-sum-exp), and of the backward's workspace.
  virtual size_t attention_state_size(const AttentionShape& s) const = 0;
  virtual size_t attention_workspace_size(const AttentionShape& s) const = 0;
  // out (N, NH hs) = causal softmax(q k^T / sqrt(hs)) v, query head h reading key/value head
  // h / (NH / NKV), from qkv (N, (NH + 2 NKV) hs); within each document when s.positions is given.
  virtual void attention_forward(const TensorView& out, const TensorView& state, const TensorView& qkv,
                                 const AttentionShape& s) = 0;
  // dqkv (N, (NH + 2 NKV) hs) = d loss / d qkv; out is the forward's output (a fused kernel's
  // backward reads it).
  virtual void attention_backward(const TensorView& dqkv, const TensorView& dout, const TensorView& qkv,
                                  const TensorView& out, const TensorView& state, const TensorView& workspace,
                                  const AttentionShape& s) = 0;
  // Rotary embedding in place on the q and k heads of qkv (N, (NH + 2 NKV) hs), Hugging Face's
  // rotate-half; cos and sin (maxT, hs/2) float32. The backward turns the gradient back.
  virtual void rope_forward(const TensorView& qkv, const TensorView& cos, const TensorView& sin,
                            const AttentionShape& s) = 0;
  virtual void rope_backward(const TensorView& dqkv, const TensorView& cos, const TensorView& sin,
                             const AttentionShape& s) = 0;

  // ---- ring attention (context parallelism) ---------------------------------------------------
  // The online softmax over key/value blocks (FlashAttention's recurrence): the forward merges
  // each block into a float32 running output and log-sum-exp; the backward recomputes a block's
  // probabilities from the final log-sum-exp. Elements of the workspace both need:
  virtual size_t ring_attention_workspace_size(const AttentionShape& s) const = 0;
  // kv (N, 2 NKV hs) = the k and v heads of qkv (N, (NH + 2 NKV) hs): what travels the ring.
  virtual void ring_attention_pack(const TensorView& kv, const TensorView& qkv, const AttentionShape& s) = 0;
  // out (N, NH hs) and lse (B, NH, T), float32: merged with the block of kv (first: set by it).
  virtual void ring_attention_forward(const TensorView& out, const TensorView& lse, const TensorView& qkv,
                                      const TensorView& kv, const TensorView& workspace, const RingBlock& b,
                                      bool first) = 0;
  // dq (N, NH hs) and dkv (N, 2 NKV hs), float32: += the block's gradients, from the final
  // output's gradient dout and the final output out (N, NH hs, compute dtype) and lse.
  virtual void ring_attention_backward(const TensorView& dq, const TensorView& dkv, const TensorView& dout,
                                       const TensorView& out, const TensorView& lse, const TensorView& qkv,
                                       const TensorView& kv, const TensorView& workspace, const RingBlock& b) = 0;
  // dqkv (N, (NH + 2 NKV) hs) in the compute dtype = [dq | dkv].
  virtual void ring_attention_unpack(const TensorView& dqkv, const TensorView& dq, const TensorView& dkv,
                                     const AttentionShape& s) = 0;

  // ---- element-wise ----------------------------------------------------------------------------
  virtual void gelu_forward(const TensorView& out, const TensorView& inp, size_t n) = 0;
  // dinp = dout * gelu'(inp); dinp may be dout.
  virtual void gelu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, size_t n) = 0;
  // out (N, I) = silu(gate) * up of inp (N, 2I) = [gate | up]; dinp (N, 2I) from dout (N, I).
  virtual void swiglu_forward(const TensorView& out, const TensorView& inp, int N, int I) = 0;
  virtual void swiglu_backward(const TensorView& dinp, const TensorView& inp, const TensorView& dout, int N,
                               int I) = 0;
  // out = a + b (the residual connection; out may be a or b), in the compute dtype or float32
  // (gradient buffers: ZeRO 2's shard accumulation, the parameter server's pushes).
  virtual void add(const TensorView& out, const TensorView& a, const TensorView& b, size_t n) = 0;

  // ---- vocab-parallel cross-entropy (rows (N, Vl) of logits; columns >= V are padding) ------
  // The caller reduces row_max (max) and then sum_exp and target_logit (sum) over the tensor-
  // parallel group between the phases, so full logits are never gathered.
  virtual void cross_entropy_row_max(const TensorView& row_max, const TensorView& logits, int N, int Vl,
                                     int vocab_begin, int V) = 0;
  // With keep_exp the logits become exp(logit - row_max) for phase 3.
  virtual void cross_entropy_partials(const TensorView& sum_exp, const TensorView& target_logit,
                                      const TensorView& logits, const TensorView& row_max, const TensorView& targets,
                                      int N, int Vl, int vocab_begin, int V, bool keep_exp) = 0;
  // losses (N); with dloss != 0 the logits become d(dloss * sum(losses)) / d logits. A target
  // < 0 is ignored (a token a loss mask leaves out): its loss and its logits' gradient are 0.
  virtual void cross_entropy_finish(const TensorView& logits, const TensorView& losses, const TensorView& row_max,
                                    const TensorView& sum_exp, const TensorView& target_logit,
                                    const TensorView& targets, int N, int Vl, int vocab_begin, int V,
                                    float dloss) = 0;
  // The sum of x (float32) in float64, in a fixed order; the host gets the value.
  virtual double sum(const TensorView& x) = 0;

  // ---- optimizer -------------------------------------------------------------------------------
  // One fused AdamW pass over params, m, v (float32 master weights and moments) from grads *
  // grad_scale, all of params.numel elements.
  virtual void adamw_step(const TensorView& params, const TensorView& m, const TensorView& v,
                          const TensorView& grads, const AdamWStep& step, float grad_scale) = 0;
  // Sum of squares of x (float32) in float64, independent of the thread count.
  virtual double sum_of_squares(const TensorView& x) = 0;
  // sum_of_squares of each part, as that computes it, with one wait for all of them (a GPU sums
  // every part before the host reads any: the gradient norm's per-tensor squares).
  virtual std::vector<double> sums_of_squares(const std::vector<TensorView>& parts) {
    std::vector<double> out;
    for (const TensorView& p : parts) out.push_back(sum_of_squares(p));
    return out;
  }
  // dst = src converted to dst's dtype (same numel): master weights -> compute parameters.
  virtual void cast(const TensorView& dst, const TensorView& src) = 0;
};

// The backend for `training.device` ("cpu", always built; "cuda") computing in `training.dtype`
// ("auto": float32 on the CPU, bfloat16 on a GPU; "fp32"; "bf16"). A CUDA backend uses GPU
// `local_rank` modulo the visible GPUs, so the ranks of a node spread over its GPUs. Throws
// ConfigError, naming the key and the fix, for a device this build or machine cannot provide.
std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& dtype = "auto",
                                      int local_rank = 0);

// dst = src in dst's dtype, where one is host float32 memory and the other the device's, of
// another dtype or not: cast on the device a chunk at a time through `scratch` (float32 on the
// device), so no float32 copy of the whole tensor is needed there. Same dtypes: one copy.
void cast_across(Backend& backend, const TensorView& dst, const TensorView& src, const TensorView& scratch);
// The same through a scratch of its own, of at most kCastAcrossChunk elements (none when the
// dtypes agree): for a one-off copy, where a loop's caller keeps one scratch for all of them.
void cast_across(Backend& backend, const TensorView& dst, const TensorView& src);
inline constexpr size_t kCastAcrossChunk = size_t{16} << 20;

// The compute dtype `training.dtype` means on `device` (throws ConfigError as make_backend).
DType compute_dtype_for(const std::string& device, const std::string& dtype);

}  // namespace feast
