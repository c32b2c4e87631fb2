// Reading one safetensors file (see safetensors_file.h). Every size and offset of a header is
// checked in 64-bit unsigned arithmetic with explicit overflow guards before anything is read
// through it, so a damaged or hostile file gives a DataError, never a crash.
#include "interop/hf/safetensors_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/bfloat16.h"
#include "core/error.h"

namespace feast {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this reader copies it as is");

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what + kSafetensorsCorruptHint);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& what) {
  throw DataError(path + ": tensor '" + name + "': " + what + kSafetensorsCorruptHint);
}

// At most 200 characters of s: a message must stay readable when the header is 100 MB.
std::string clipped(const std::string& s) { return s.size() <= 200 ? s : s.substr(0, 200) + "..."; }

// A JSON value for a message: scalars and flat short arrays as written, anything else by its
// type (dumping is recursive, and a hostile header may nest a million arrays deep).
std::string brief(const nlohmann::ordered_json& v) {
  if (v.is_array() && v.size() <= 4 &&
      std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_primitive(); }))
    return clipped(v.dump());
  if (v.is_primitive()) return clipped(v.dump());
  return std::string("a JSON ") + v.type_name();
}

// A JSON integer as a non-negative int64, or false (floats, negatives and values past
// INT64_MAX are refused).
bool non_negative_int64(const nlohmann::ordered_json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return false;
    *out = int64_t(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = i;
    return true;
  }
  return false;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path, "a .safetensors file") {
  const uint64_t file_bytes = uint64_t(file_.size());
  if (file_bytes < 8)
    fail(path, "the file has " + std::to_string(file_bytes) +
                   " bytes, fewer than the 8 of the header length that starts a safetensors file");
  // Tensors are read a slice at a time, each rank its own: only the pages read are touched.
  file_.map(MappedFile::Access::kRandom);
  const unsigned char* map = file_.data();
  {
    const uint64_t header_bytes = read_le64(map);
    if (header_bytes > kSafetensorsMaxHeaderBytes)
      fail(path, "the header length is " + std::to_string(header_bytes) + " bytes, over the " +
                     std::to_string(kSafetensorsMaxHeaderBytes) + " safetensors allows");
    if (header_bytes > file_bytes - 8)
      fail(path, "the header length is " + std::to_string(header_bytes) + " bytes but only " +
                     std::to_string(file_bytes - 8) + " follow the length");
    const char* header = reinterpret_cast<const char*>(map + 8);
    const nlohmann::ordered_json j = parse_safetensors_json(header, header + header_bytes, path, "the header");
    if (!j.is_object()) fail(path, std::string("the header is a JSON ") + j.type_name() + ", not an object");
    data_ = map + 8 + header_bytes;
    const uint64_t data_bytes = file_bytes - 8 - header_bytes;

    for (const auto& [name, entry] : j.items()) {
      if (name == "__metadata__") {
        if (entry.is_null()) continue;  // the reference library reads null as "no metadata"
        if (!entry.is_object()) fail(path, "__metadata__ is not an object of strings");
        for (const auto& [k, v] : entry.items()) {
          if (!v.is_string())
            fail(path, "__metadata__ key '" + k + "' has a " + v.type_name() + " value; only strings are allowed");
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      if (!entry.is_object())
        fail_tensor(path, name, std::string("its entry is a JSON ") + entry.type_name() + ", not an object");
      SafetensorsTensor t;
      t.name = name;
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field)) fail_tensor(path, name, std::string("the \"") + field + "\" field is missing");

      const auto& dtype = entry["dtype"];
      if (!dtype.is_string()) fail_tensor(path, name, "\"dtype\" is not a string");
      t.dtype = dtype.get<std::string>();
      const int bits = safetensors_dtype_bits(t.dtype);
      if (bits == 0) fail_tensor(path, name, "unknown dtype \"" + t.dtype + "\"");

      const auto& shape = entry["shape"];
      if (!shape.is_array()) fail_tensor(path, name, "\"shape\" is not an array");
      uint64_t numel = 1;
      bool overflow = false;
      for (const auto& d : shape) {
        int64_t v;
        if (!non_negative_int64(d, &v))
          fail_tensor(path, name, "shape entry " + brief(d) + " is not a non-negative integer");
        t.shape.push_back(v);
        // Overflow of the element count is checked against int64 so numel() stays exact; a
        // zero anywhere makes the count 0 whatever came before.
        if (__builtin_mul_overflow(numel, uint64_t(v), &numel) ||
            numel > uint64_t(std::numeric_limits<int64_t>::max()))
          overflow = true;
      }
      if (overflow && std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end())
        fail_tensor(path, name, "shape " + safetensors_shape_string(t.shape) + " has more elements than 64 bits can count");
      if (overflow) numel = 0;
      uint64_t nbits;
      if (__builtin_mul_overflow(numel, uint64_t(bits), &nbits))
        fail_tensor(path, name, "shape " + safetensors_shape_string(t.shape) + " of " + t.dtype + " is too large to address");
      if (nbits % 8 != 0)
        fail_tensor(path, name, "shape " + safetensors_shape_string(t.shape) + " of " + t.dtype + " does not fill whole bytes");
      const uint64_t nbytes = nbits / 8;

      const auto& offsets = entry["data_offsets"];
      int64_t begin, end;
      if (!offsets.is_array() || offsets.size() != 2 || !non_negative_int64(offsets[0], &begin) ||
          !non_negative_int64(offsets[1], &end))
        fail_tensor(path, name, "\"data_offsets\" " + brief(offsets) + " is not two non-negative integers");
      if (begin > end)
        fail_tensor(path, name, "\"data_offsets\" [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    "] begin after they end");
      t.begin = uint64_t(begin);
      t.end = uint64_t(end);
      if (t.end - t.begin != nbytes)
        fail_tensor(path, name, "\"data_offsets\" [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                                    std::to_string(t.end - t.begin) + " bytes but " + t.dtype + " of shape " +
                                    safetensors_shape_string(t.shape) + " needs " + std::to_string(nbytes));
      if (t.end > data_bytes)
        fail_tensor(path, name, "its data [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    ") runs past the end of the file (the data buffer has " +
                                    std::to_string(data_bytes) + " bytes)");
      tensors_.push_back(std::move(t));
    }

    // The ranges must tile the data buffer: sorted by position, each starts where the one
    // before ends (a zero-size tensor may sit at any boundary), and the last ends at the end.
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t at = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const auto& t : tensors_) {
      if (t.begin < at)
        fail_tensor(path, t.name, "its data [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                      ") overlaps tensor '" + previous->name + "' [" +
                                      std::to_string(previous->begin) + ", " + std::to_string(previous->end) + ")");
      if (t.begin > at)
        fail_tensor(path, t.name, "a gap of " + std::to_string(t.begin - at) + " unused bytes [" +
                                      std::to_string(at) + ", " + std::to_string(t.begin) +
                                      ") of the data buffer comes before its data");
      at = t.end;
      previous = &t;
    }
    if (at != data_bytes)
      fail(path, std::to_string(data_bytes - at) + " bytes past the last tensor's data (at " + std::to_string(at) +
                     " of " + std::to_string(data_bytes) + ") belong to no tensor");
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// Converts n elements starting at src (unaligned, little-endian) to float.
template <typename Convert>
void convert_run(const unsigned char* src, int64_t n, size_t esize, float* out, Convert convert) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert(src + size_t(i) * esize);
}

}  // namespace

void SafetensorsFile::read_f32(const std::string& name, std::span<const int64_t> start,
                               std::span<const int64_t> count, float* out) const {
  const SafetensorsTensor* t = find(name);
  if (!t) throw DataError(path() + ": no tensor named '" + name + "' in the file");
  enum class Kind { kF32, kF16, kBF16, kF64 } kind;
  size_t esize;
  if (t->dtype == "F32") kind = Kind::kF32, esize = 4;
  else if (t->dtype == "F16") kind = Kind::kF16, esize = 2;
  else if (t->dtype == "BF16") kind = Kind::kBF16, esize = 2;
  else if (t->dtype == "F64") kind = Kind::kF64, esize = 8;
  else
    throw DataError(path() + ": tensor '" + name + "' has dtype " + t->dtype +
                    "; only F32, F16, BF16 and F64 can be read as float32 weights");
  const size_t rank = t->shape.size();
  if (start.size() != rank || count.size() != rank)
    throw DataError(path() + ": tensor '" + name + "' has shape " + safetensors_shape_string(t->shape) + " (" +
                    std::to_string(rank) + " dimensions) but the slab to read has " +
                    std::to_string(start.size()) + " start and " + std::to_string(count.size()) + " count entries");
  int64_t total = 1;
  for (size_t d = 0; d < rank; ++d) {
    // start + count <= dim, written so that it cannot overflow
    if (start[d] < 0 || count[d] < 0 || start[d] > t->shape[d] || count[d] > t->shape[d] - start[d]) {
      std::vector<int64_t> s(start.begin(), start.end()), c(count.begin(), count.end());
      throw DataError(path() + ": tensor '" + name + "': the slab at " + safetensors_shape_string(s) + " of size " +
                      safetensors_shape_string(c) + " leaves its shape " + safetensors_shape_string(t->shape));
    }
    total *= count[d];
  }
  if (total == 0) return;

  // Row-major strides, and the longest run of elements contiguous in the file: the innermost
  // dimension's count, times each dimension outside it while the ones inside are read whole.
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * t->shape[d];
  size_t inner = rank;  // dimensions [inner, rank) make up one run
  int64_t run = 1;
  while (inner > 0) {
    const size_t d = inner - 1;
    run *= count[d];
    inner = d;
    if (count[d] != t->shape[d]) break;
  }
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) base += start[d] * stride[d];

  const unsigned char* src0 = data_ + t->begin;
  auto copy_run = [&](int64_t element, float* dst) {
    const unsigned char* src = src0 + size_t(element) * esize;
    if (kind == Kind::kF32) {
      std::memcpy(dst, src, size_t(run) * 4);
    } else if (kind == Kind::kF64) {
      convert_run(src, run, 8, dst, [](const unsigned char* p) {
        double v;
        std::memcpy(&v, p, 8);
        return static_cast<float>(v);
      });
    } else if (kind == Kind::kBF16) {
      convert_run(src, run, 2, dst, [](const unsigned char* p) { return bf16_to_float(uint16_t(p[0] | p[1] << 8)); });
    } else {
      convert_run(src, run, 2, dst, [](const unsigned char* p) { return f16_to_float(uint16_t(p[0] | p[1] << 8)); });
    }
  };
  // Odometer over the outer dimensions [0, inner).
  std::vector<int64_t> idx(inner, 0);
  for (int64_t done = 0; done < total; done += run) {
    int64_t element = base;
    for (size_t d = 0; d < inner; ++d) element += idx[d] * stride[d];
    copy_run(element, out + done);
    for (size_t d = inner; d-- > 0;) {
      if (++idx[d] < count[d]) break;
      idx[d] = 0;
    }
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (!t) throw DataError(path() + ": no tensor named '" + name + "' in the file");
  std::vector<float> out(size_t(t->numel()));
  const std::vector<int64_t> start(t->shape.size(), 0);
  read_f32(name, start, t->shape, out.data());
  return out;
}

}  // namespace feast
