// The safetensors format of Hugging Face, as the reader and the writer share it: a file is an
// 8-byte little-endian header length N, N bytes of JSON (tensor name -> dtype, shape, byte range;
// an optional "__metadata__" of strings) and the data buffer the ranges index. Reading a file:
// safetensors_file.h; a model folder (one file or shards and an index): safetensors_model.h;
// writing: safetensors_writer.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace feast {

// The largest header the reference library accepts (safetensors' MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// The file names of a model folder: one file, or shards and this index.
inline constexpr const char* kSafetensorsSingleName = "model.safetensors";
inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

// One tensor of a file as its header describes it.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16", "I64", ... as written in the header
  std::vector<int64_t> shape;   // empty for a 0-d tensor (one element)
  uint64_t begin = 0, end = 0;  // byte range within the data buffer (after the header)
  int64_t numel() const;
};

// The size in bits of one element of a safetensors dtype ("F32" -> 32, "F4" -> 4), 0 when the
// dtype is not one the format defines.
int safetensors_dtype_bits(const std::string& dtype);

// "[2, 3]": a shape in messages.
std::string safetensors_shape_string(const std::vector<int64_t>& shape);

// JSON parsed with nlohmann (which checks the UTF-8 of every string) and, beyond it, refused when
// an object repeats a key, holds a NUL byte or nests past 64 levels: a header or index that does
// any of that is damaged or hostile. Throws DataError naming `path` and `what` ("the header").
nlohmann::ordered_json parse_safetensors_json(const char* begin, const char* end, const std::string& path,
                                              const std::string& what);

// What every message about a malformed file ends with.
inline constexpr const char* kSafetensorsCorruptHint =
    "; the file is damaged, truncated or not a safetensors file: re-download or re-export it";

// IEEE half precision <-> float: exact widening (subnormals, inf, NaN) and narrowing rounded
// to nearest even, overflowing to inf, NaN kept a (quiet) NaN.
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: mant * 2^-24, a normal float; normalise the mantissa
    int e = 113;  // the biased float exponent of 2^-14, lowered once per leading zero
    uint32_t m = mant;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    bits = sign | (uint32_t(e) << 23) | ((m & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t float_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // NaN
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 rounds past 65504: inf
  if (abs >= 0x38800000u) {  // a normal half (>= 2^-14): rebias, round the 13 dropped bits
    uint32_t h = (abs >> 13) - (112u << 10);
    const uint32_t rem = abs & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves up the exponent
    return uint16_t(sign | h);
  }
  // A subnormal half: the value in units of 2^-24 is mant * 2^(exp - 126), rounded.
  const uint32_t exp = abs >> 23;
  if (exp < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to even, 0)
  const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14 .. 24
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may become 0x400, the smallest normal
  return uint16_t(sign | h);
}

}  // namespace feast
