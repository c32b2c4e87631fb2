#include "backend/nf4.h"

#include <algorithm>
#include <cmath>

namespace feast {
namespace {

// The index of the code nearest x, the first on a tie; NaN (a block of zeros, 0 * inf) gives
// index 0 because no distance compares below NaN: torch.argmin's answer too.
template <size_t K>
uint8_t nearest(const std::array<float, K>& code, float x) {
  size_t best = 0;
  float best_distance = std::fabs(x - code[0]);
  for (size_t k = 1; k < K; ++k) {
    const float d = std::fabs(x - code[k]);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return uint8_t(best);
}

// torch.linspace(start, end, steps) in float32 as torch computes it on the CPU: from the start
// for the first half, from the end for the rest.
std::vector<float> linspace(float start, float end, int steps) {
  std::vector<float> out(static_cast<size_t>(steps));
  const float step = (end - start) / float(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i)
    out[size_t(i)] = i < halfway ? start + step * float(i) : end - step * float(steps - i - 1);
  return out;
}

std::array<float, 256> make_scale_code() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for each exponent i the
  // means of 2^i + 1 boundaries in [0.1, 1], times 10^(i - 6), both signs; then 0 and 1.
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> boundaries = linspace(0.1f, 1.0f, (1 << i) + 1);
    const float magnitude = float(std::pow(10.0, double(i - 6)));
    for (size_t k = 0; k + 1 < boundaries.size(); ++k) {
      const float mean = (boundaries[k] + boundaries[k + 1]) / 2.0f;
      data.push_back(magnitude * mean);
      data.push_back(-magnitude * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

}  // namespace

const std::array<float, 16>& nf4_code_book() {
  static const std::array<float, 16> code = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return code;
}

const std::array<float, 256>& nf4_scale_code() {
  static const std::array<float, 256> code = make_scale_code();
  return code;
}

uint8_t Nf4Tensor::code(size_t i) const { return nf4_code_at(codes.data(), i); }

float Nf4Tensor::scale(size_t block) const {
  if (!double_quant) return absmax[block];
  return nf4_double_quant_scale(nf4_scale_code()[absmax_codes[block]], absmax2[block / kNf4GroupSize], offset);
}

int nf4_scales_per_row(int64_t row0, int64_t col0, int64_t width, int rows, int cols) {
  // A row's slots depend on where in a block it starts, which repeats every 64 rows at most.
  int most = 0;
  for (int i = 0; i < std::min(rows, kNf4BlockSize); ++i) {
    const int64_t first = (row0 + i) * width + col0;
    most = std::max(most, int((first + cols - 1) / kNf4BlockSize - first / kNf4BlockSize + 1));
  }
  return most;
}

float Nf4Tensor::value(size_t i) const { return nf4_code_book()[code(i)] * scale(i / kNf4BlockSize); }

Nf4Tensor quantize_nf4(const float* values, size_t numel, bool double_quant) {
  Nf4Tensor t;
  t.numel = numel;
  t.double_quant = double_quant;
  t.codes.assign((numel + 1) / 2, 0);
  std::vector<float> absmax(t.blocks());
  for (size_t b = 0; b < absmax.size(); ++b) {
    const size_t begin = b * kNf4BlockSize, end = std::min(numel, begin + kNf4BlockSize);
    float m = 0;
    for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(values[i]));
    absmax[b] = m;
    const float inverse = 1.0f / m;  // bitsandbytes multiplies by the reciprocal
    for (size_t i = begin; i < end; ++i) {
      nf4_put_code(t.codes.data(), i, nearest(nf4_code_book(), values[i] * inverse));
    }
  }
  if (!double_quant) {
    t.absmax = std::move(absmax);
    return t;
  }
  double sum = 0;
  for (float a : absmax) sum += a;
  t.offset = absmax.empty() ? 0.0f : float(sum / double(absmax.size()));
  t.absmax_codes.assign(absmax.size(), 0);
  t.absmax2.assign((absmax.size() + kNf4GroupSize - 1) / kNf4GroupSize, 0.0f);
  for (size_t g = 0; g < t.absmax2.size(); ++g) {
    const size_t begin = g * kNf4GroupSize, end = std::min(absmax.size(), begin + kNf4GroupSize);
    float m = 0;
    for (size_t b = begin; b < end; ++b) m = std::max(m, std::fabs(absmax[b] - t.offset));
    t.absmax2[g] = m;
    const float inverse = 1.0f / m;
    for (size_t b = begin; b < end; ++b) t.absmax_codes[b] = nearest(nf4_scale_code(), (absmax[b] - t.offset) * inverse);
  }
  return t;
}

Nf4PieceData nf4_piece_data(const Nf4Tensor& t, int64_t width, int64_t row0, int64_t col0, int rows, int cols) {
  Nf4PieceData d;
  d.scales_per_row = nf4_scales_per_row(row0, col0, width, rows, cols);
  const size_t r = size_t(rows), c = size_t(cols), spr = size_t(d.scales_per_row);
  d.codes.assign((r * c + 1) / 2, 0);
  if (t.double_quant) d.scale_codes.assign(r * spr, 0);
  else d.absmax.assign(r * spr, 0.0f);
  for (size_t i = 0; i < r; ++i) {
    const size_t first = size_t(row0 + int64_t(i)) * size_t(width) + size_t(col0);
    for (size_t j = 0; j < c; ++j) nf4_put_code(d.codes.data(), i * c + j, t.code(first + j));
    for (size_t s = 0; s < spr; ++s) {
      const size_t block = first / kNf4BlockSize + s;
      if (block >= t.blocks()) break;  // a row touching fewer blocks leaves its last slots unread
      if (t.double_quant) d.scale_codes[i * spr + s] = t.absmax_codes[block];
      else d.absmax[i * spr + s] = t.absmax[block];
    }
  }
  return d;
}


}  // namespace feast
