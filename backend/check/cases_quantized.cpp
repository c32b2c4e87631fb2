// The case of a quantized frozen base: dequantize_nf4 of rectangles of a tensor quantized on the
// host (backend/nf4.h) against the host's own dequantization of the same elements: rows that
// straddle blocks (a width that is no multiple of 64), a rectangle inside the tensor (a
// tensor-parallel slice of columns), single and double quantization.
#include <string>
#include <vector>

#include "backend/check/case_builders.h"
#include "backend/nf4.h"

namespace feast::check {
namespace {

std::string nf4_shape(const Nf4CaseShape& s) {
  return std::to_string(s.rows) + " x " + std::to_string(s.width) + " rows [" + std::to_string(s.row0) + "," +
         std::to_string(s.row0 + s.piece_rows) + ") cols [" + std::to_string(s.col0) + "," +
         std::to_string(s.col0 + s.piece_cols) + ")" + (s.double_quant ? " double" : "");
}

template <typename T>
Tensor upload_host(Backend& be, const std::vector<T>& values) {
  Tensor t = be.allocate(dtype_of<T>(), values.size());
  if (!values.empty()) be.copy(t.view(), host_view(values.data(), values.size()));
  return t;
}

void dequantize_nf4(CheckHarness& h, const Nf4CaseShape& s) {
  const size_t n = size_t(s.rows) * size_t(s.width);
  const std::vector<double> drawn = h.random(n, 0.05);
  std::vector<float> values(drawn.begin(), drawn.end());
  for (size_t i = 64; i < 128 && i < n; ++i) values[i] = 0;  // a block of zeros
  const Nf4Tensor t = quantize_nf4(values.data(), n, s.double_quant);
  const Nf4PieceData d = nf4_piece_data(t, s.width, s.row0, s.col0, s.piece_rows, s.piece_cols);
  Backend& be = h.backend();
  const Tensor codes = upload_host(be, d.codes);
  const Tensor scales = s.double_quant ? upload_host(be, d.scale_codes) : upload_host(be, d.absmax);
  const std::vector<float> code(nf4_scale_code().begin(), nf4_scale_code().end());
  const Tensor absmax2 = upload_host(be, t.absmax2), scale_code = upload_host(be, code);
  Nf4Piece p;
  p.codes = codes.view();
  p.scales = scales.view();
  if (s.double_quant) {
    p.absmax2 = absmax2.view();
    p.scale_code = scale_code.view();
    p.offset = t.offset;
  }
  p.row0 = s.row0;
  p.col0 = s.col0;
  p.width = s.width;
  p.rows = s.piece_rows;
  p.cols = s.piece_cols;
  p.scales_per_row = d.scales_per_row;
  const Operand out = h.activations(size_t(s.piece_rows) * size_t(s.piece_cols));
  be.dequantize_nf4(out.view(), p);
  std::vector<double> want;
  for (int i = 0; i < s.piece_rows; ++i)
    for (int j = 0; j < s.piece_cols; ++j)
      want.push_back(t.value(size_t(s.row0 + i) * size_t(s.width) + size_t(s.col0 + j)));
  h.compare("out", out, want);
}

}  // namespace

OpCase dequantize_nf4_case(const Nf4CaseShape& s) {
  return {"dequantize_nf4", nf4_shape(s), HeldTo::kComputeDtype, [=](CheckHarness& h) { dequantize_nf4(h, s); }};
}

}  // namespace feast::check
