// Linear layer on the CPU: one large GEMM per pass. Weights are (OC, C) like torch.nn.Linear.
// Legend: N rows (B*T tokens), C input channels, OC output channels.
#pragma once

namespace feast::cpu {

// out (N, OC) = inp (N, C) @ weight^T (OC, C) + bias (OC); bias may be null.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);

// dinp (N, C) = dout @ weight (overwritten; skipped when null);
// dweight (OC, C) += dout^T @ inp and dbias (OC) += column sums of dout (null skips), with
// += so that micro-batches accumulate into the flat gradient buffer.
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

// The two halves of matmul_backward's matrix work, for callers that split them:
// dinp (N, C) = dout (N, OC) @ weight (OC, C) (overwritten), and
// dweight_rows (row_end - row_begin, C) += dout[:, row_begin:row_end]^T @ inp, the gradient of
// weight rows [row_begin, row_end) alone (a ZeRO-2 bucket of a large embedding, say).
template <typename T>
void matmul_backward_input(T* dinp, const T* dout, const T* weight, int N, int C, int OC);
template <typename T>
void matmul_backward_weight_rows(T* dweight_rows, const T* dout, const T* inp, int N, int C, int OC, int row_begin,
                                 int row_end);

}  // namespace feast::cpu
