// The safetensors format of Hugging Face: reading model weights (one file or a sharded folder)
// and writing them, for import from and export to transformers. A file is an 8-byte
// little-endian header length N, N bytes of JSON (tensor name -> dtype, shape, byte range; an
// optional "__metadata__" of strings) and the data buffer the ranges index.
//
// Reading maps the file and validates the whole header when it opens: every tensor's byte range
// must match its dtype and shape, and the ranges must tile the data buffer exactly (no gap, no
// overlap, nothing past the end), as the reference library demands. After that a read can never
// leave the mapping, and reading a slice touches only the pages it covers.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace feast {

// The largest header the reference library accepts (safetensors' MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

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

// One .safetensors file, mapped read-only and validated on open; throws DataError (naming the
// path, the tensor and what is wrong) for anything malformed. Move-only; unmaps when destroyed.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In the order of their data in the file (for files this writer made: the order written).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies the hyperslab start/count (one entry per dimension; a 0-d tensor has none) of tensor
  // `name`, converted to float32, row-major into out (count's product elements). F32, BF16,
  // F16 and F64 convert; any other dtype, an absent name or a slab outside the shape throws
  // DataError.
  void read_f32(const std::string& name, std::span<const int64_t> start,
                std::span<const int64_t> count, float* out) const;
  // The whole tensor (numel() floats).
  std::vector<float> read_f32(const std::string& name) const;

  // The raw bytes of a tensor (end - begin of them), little-endian as stored.
  const unsigned char* bytes(const SafetensorsTensor& tensor) const { return data_ + tensor.begin; }

 private:
  void unmap();

  std::string path_;
  unsigned char* map_ = nullptr;  // the whole file
  uint64_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;  // the data buffer: map_ + 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a Hugging Face model folder: model.safetensors, or (when that is absent) the
// shards model.safetensors.index.json names. Every file is opened and validated up front, and
// the index must agree with the files: each tensor where it says, none in two files, none in
// a shard it does not list.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& folder);

  const std::string& folder() const { return folder_; }
  std::vector<std::string> names() const;  // sorted
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
  const SafetensorsFile& file_of(const std::string& name) const;  // DataError when absent
  const std::vector<SafetensorsFile>& files() const { return files_; }
  void read_f32(const std::string& name, std::span<const int64_t> start,
                std::span<const int64_t> count, float* out) const;
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string folder_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> file_index_;  // tensor name -> index into files_
};

// A float32 tensor to write, row-major.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes one file: the header padded with spaces to a multiple of 8 bytes (as the Python library
// does), then the tensors in the given order, stored as "F32", "BF16" (round to nearest even,
// NaN stays NaN) or "F16" (round to nearest even, overflow to inf). Writes path + ".tmp" and
// renames it, so a reader never sees half a file; throws Error naming the path on I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& dtype = "F32");

// Writes a model folder as transformers' save_pretrained does: model.safetensors when all fits
// in max_shard_bytes (0 = no limit), else model-00001-of-0000K.safetensors ... in order, a new
// shard starting when the next tensor would overflow the current one (a tensor larger than the
// limit gets a shard of its own), plus model.safetensors.index.json. Every file carries the
// metadata {"format": "pt"} transformers expects. Weight files of an earlier export left in the
// folder that this one did not write are removed. Returns the file names written.
std::vector<std::string> write_safetensors_model(const std::string& folder,
                                                 const std::vector<TensorToWrite>& tensors,
                                                 uint64_t max_shard_bytes,
                                                 const std::string& dtype = "F32");

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
