// Reading and writing safetensors files (see safetensors.h). Every size and offset of a header
// is checked in 64-bit unsigned arithmetic with explicit overflow guards before anything is
// read through it, so a damaged or hostile file gives a DataError, never a crash.
#include "interop/hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "core/bfloat16.h"
#include "core/error.h"

namespace feast {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this reader copies it as is");

namespace fs = std::filesystem;

namespace {

constexpr const char* kCorruptHint =
    "; the file is damaged, truncated or not a safetensors file: re-download or re-export it";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what + kCorruptHint);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& what) {
  throw DataError(path + ": tensor '" + name + "': " + what + kCorruptHint);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

struct DtypeBits {
  const char* name;
  int bits;
};
// Every dtype of the format (safetensors' Dtype enum), with its size in bits.
constexpr DtypeBits kDtypes[] = {
    {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16},    {"F16", 16},    {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},    {"F64", 64},    {"I64", 64},    {"U64", 64},    {"C64", 64},
};

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

// JSON parsed with nlohmann (which checks the UTF-8 of every string) and, beyond it, refused
// when an object repeats a key: nlohmann keeps the last value silently, and a tensor listed
// twice is a damaged header, not a choice to make for the user.
nlohmann::ordered_json parse_json(const char* begin, const char* end, const std::string& path,
                                  const std::string& what) {
  std::vector<std::unordered_set<std::string>> keys;
  std::string duplicate;
  auto callback = [&](int, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
    using E = nlohmann::ordered_json::parse_event_t;
    if (event == E::object_start) {
      keys.emplace_back();
    } else if (event == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == E::key && !keys.empty() && parsed.is_string()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as at the end of a C string, so "{}\0garbage" would parse;
  // JSON never holds a raw NUL (strings escape it), so any NUL makes the text invalid.
  if (const void* nul = std::memchr(begin, 0, size_t(end - begin)))
    fail(path, what + " is not valid JSON (a NUL byte at offset " +
                   std::to_string(static_cast<const char*>(nul) - begin) + ")");
  // nlohmann builds and copies nested values recursively: a header of a million '[' would
  // overflow the stack. A safetensors header nests three levels, an index two; refuse anything
  // past a generous limit before parsing (counting brackets outside strings only).
  constexpr int kMaxDepth = 64;
  int depth = 0;
  bool in_string = false;
  for (const char* p = begin; p != end; ++p) {
    if (in_string) {
      if (*p == '\\' && p + 1 != end) ++p;
      else if (*p == '"') in_string = false;
    } else if (*p == '"') {
      in_string = true;
    } else if (*p == '[' || *p == '{') {
      if (++depth > kMaxDepth)
        fail(path, what + " nests arrays or objects more than " + std::to_string(kMaxDepth) +
                       " levels deep (at byte " + std::to_string(p - begin) + "); a safetensors header nests 3");
    } else if (*p == ']' || *p == '}') {
      --depth;
    }
  }
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(begin, end, callback);
  } catch (const nlohmann::json::exception& e) {
    fail(path, what + " is not valid JSON (" + clipped(e.what()) + ")");
  }
  if (!duplicate.empty()) fail(path, what + " repeats the key '" + duplicate + "'");
  return j;
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

int safetensors_dtype_bits(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.bits;
  return 0;
}

int64_t SafetensorsTensor::numel() const {
  // Validated on open not to overflow, except that [2^32, 2^32, 0] is a legal empty tensor.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open safetensors file (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(path + ": not a regular file; expected a .safetensors file");
  }
  const uint64_t file_bytes = uint64_t(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    fail(path, "the file has " + std::to_string(file_bytes) +
                   " bytes, fewer than the 8 of the header length that starts a safetensors file");
  }
  void* m = ::mmap(nullptr, size_t(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (m == MAP_FAILED)
    throw DataError(path + ": cannot map the file into memory (" + std::strerror(map_errno) + ")");
  map_ = static_cast<unsigned char*>(m);
  map_bytes_ = file_bytes;

  try {
    const uint64_t header_bytes = read_le64(map_);
    if (header_bytes > kSafetensorsMaxHeaderBytes)
      fail(path, "the header length is " + std::to_string(header_bytes) + " bytes, over the " +
                     std::to_string(kSafetensorsMaxHeaderBytes) + " safetensors allows");
    if (header_bytes > file_bytes - 8)
      fail(path, "the header length is " + std::to_string(header_bytes) + " bytes but only " +
                     std::to_string(file_bytes - 8) + " follow the length");
    const char* header = reinterpret_cast<const char*>(map_ + 8);
    const nlohmann::ordered_json j = parse_json(header, header + header_bytes, path, "the header");
    if (!j.is_object()) fail(path, std::string("the header is a JSON ") + j.type_name() + ", not an object");
    data_ = map_ + 8 + header_bytes;
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
        fail_tensor(path, name, "shape " + shape_string(t.shape) + " has more elements than 64 bits can count");
      if (overflow) numel = 0;
      uint64_t nbits;
      if (__builtin_mul_overflow(numel, uint64_t(bits), &nbits))
        fail_tensor(path, name, "shape " + shape_string(t.shape) + " of " + t.dtype + " is too large to address");
      if (nbits % 8 != 0)
        fail_tensor(path, name, "shape " + shape_string(t.shape) + " of " + t.dtype + " does not fill whole bytes");
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
                                    shape_string(t.shape) + " needs " + std::to_string(nbytes));
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
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (map_) ::munmap(map_, size_t(map_bytes_));
  map_ = nullptr;
  data_ = nullptr;
  map_bytes_ = 0;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
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
  if (!t) throw DataError(path_ + ": no tensor named '" + name + "' in the file");
  enum class Kind { kF32, kF16, kBF16, kF64 } kind;
  size_t esize;
  if (t->dtype == "F32") kind = Kind::kF32, esize = 4;
  else if (t->dtype == "F16") kind = Kind::kF16, esize = 2;
  else if (t->dtype == "BF16") kind = Kind::kBF16, esize = 2;
  else if (t->dtype == "F64") kind = Kind::kF64, esize = 8;
  else
    throw DataError(path_ + ": tensor '" + name + "' has dtype " + t->dtype +
                    "; only F32, F16, BF16 and F64 can be read as float32 weights");
  const size_t rank = t->shape.size();
  if (start.size() != rank || count.size() != rank)
    throw DataError(path_ + ": tensor '" + name + "' has shape " + shape_string(t->shape) + " (" +
                    std::to_string(rank) + " dimensions) but the slab to read has " +
                    std::to_string(start.size()) + " start and " + std::to_string(count.size()) + " count entries");
  int64_t total = 1;
  for (size_t d = 0; d < rank; ++d) {
    // start + count <= dim, written so that it cannot overflow
    if (start[d] < 0 || count[d] < 0 || start[d] > t->shape[d] || count[d] > t->shape[d] - start[d]) {
      std::vector<int64_t> s(start.begin(), start.end()), c(count.begin(), count.end());
      throw DataError(path_ + ": tensor '" + name + "': the slab at " + shape_string(s) + " of size " +
                      shape_string(c) + " leaves its shape " + shape_string(t->shape));
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
  if (!t) throw DataError(path_ + ": no tensor named '" + name + "' in the file");
  std::vector<float> out(size_t(t->numel()));
  const std::vector<int64_t> start(t->shape.size(), 0);
  read_f32(name, start, t->shape, out.data());
  return out;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsModel

namespace {
constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
}  // namespace

SafetensorsModel::SafetensorsModel(const std::string& folder) : folder_(folder) {
  const fs::path dir(folder);
  const fs::path single = dir / kSingleName, index = dir / kIndexName;
  std::error_code ec;
  if (fs::is_regular_file(single, ec)) {
    files_.emplace_back(single.string());
    for (const auto& t : files_[0].tensors()) file_index_.emplace(t.name, 0);
    return;
  }
  if (!fs::is_regular_file(index, ec)) {
    if (!fs::is_directory(dir, ec))
      throw DataError(folder + ": no such model folder; expected a Hugging Face model folder with " +
                      kSingleName + " or " + kIndexName);
    throw DataError(folder + ": found neither " + kSingleName + " nor " + kIndexName +
                    "; expected the safetensors weights of a Hugging Face model (convert .bin weights "
                    "with transformers' save_pretrained(safe_serialization=True))");
  }

  const std::string index_path = index.string();
  std::ifstream in(index, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw DataError(index_path + ": cannot read the index");
  const std::string s = text.str();
  const nlohmann::ordered_json j = parse_json(s.data(), s.data() + s.size(), index_path, "the index");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw DataError(index_path + ": the index has no \"weight_map\" object (tensor name -> file name)" +
                    kCorruptHint);
  const auto& weight_map = j["weight_map"];

  std::map<std::string, std::string> wanted;  // tensor -> file, as the index says
  std::map<std::string, size_t> opened;       // file name -> index into files_
  for (const auto& [name, file] : weight_map.items()) {
    if (!file.is_string())
      throw DataError(index_path + ": tensor '" + name + "' maps to a " + file.type_name() +
                      ", not a file name" + kCorruptHint);
    const std::string f = file.get<std::string>();
    wanted[name] = f;
    if (opened.count(f)) continue;
    const fs::path shard = dir / f;
    if (f.empty() || fs::path(f).is_absolute() || !fs::is_regular_file(shard, ec))
      throw DataError(index_path + ": tensor '" + name + "' is in '" + f + "', which is missing from " + folder +
                      "; download every shard the index names");
    opened.emplace(f, files_.size());
    files_.emplace_back(shard.string());
  }
  // A shard may hold tensors the index leaves out (GPT-2's attention-mask buffers, say):
  // transformers loads such a folder, so they are kept and, unless asked for, never read.
  for (const auto& [f, i] : opened) {
    for (const auto& t : files_[i].tensors()) {
      const auto [it, fresh] = file_index_.emplace(t.name, i);
      if (!fresh)
        throw DataError(folder + ": tensor '" + t.name + "' is in both " + files_[it->second].path() + " and " +
                        files_[i].path() + "; the shards belong to different exports");
    }
  }
  for (const auto& [name, f] : wanted) {
    const size_t i = file_index_.count(name) ? file_index_.at(name) : files_.size();
    if (i == files_.size() || i != opened.at(f))
      throw DataError(index_path + ": puts tensor '" + name + "' in " + f + ", which does not hold it" +
                      (i == files_.size() ? std::string() : " (it is in " + files_[i].path() + ")") +
                      "; the index and the shards do not belong together");
  }
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(file_index_.size());
  for (const auto& [name, i] : file_index_) out.push_back(name);
  return out;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  const auto it = file_index_.find(name);
  return it == file_index_.end() ? nullptr : files_[it->second].find(name);
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end())
    throw DataError(folder_ + ": the model has no tensor named '" + name + "'");
  return files_[it->second];
}

void SafetensorsModel::read_f32(const std::string& name, std::span<const int64_t> start,
                                std::span<const int64_t> count, float* out) const {
  file_of(name).read_f32(name, start, count, out);
}

std::vector<float> SafetensorsModel::read_f32(const std::string& name) const {
  return file_of(name).read_f32(name);
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

size_t write_dtype_size(const std::string& dtype, const std::string& path) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  throw Error(path + ": cannot write dtype \"" + dtype + "\"; choose F32, BF16 or F16");
}

// The byte size of each tensor, checking names and shapes first.
std::vector<uint64_t> checked_sizes(const std::vector<TensorToWrite>& tensors, size_t esize,
                                    const std::string& path) {
  std::vector<uint64_t> sizes;
  std::unordered_set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") throw Error(path + ": a tensor cannot be named __metadata__");
    if (!seen.insert(t.name).second) throw Error(path + ": tensor '" + t.name + "' is given twice");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(path + ": tensor '" + t.name + "' has negative shape " + shape_string(t.shape));
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel) || numel > (uint64_t(1) << 60))
        throw Error(path + ": tensor '" + t.name + "' of shape " + shape_string(t.shape) + " is too large");
    }
    if (numel > 0 && !t.data) throw Error(path + ": tensor '" + t.name + "' has no data");
    sizes.push_back(numel * esize);
  }
  return sizes;
}

// A file descriptor that writes everything or throws, and closes when dropped.
class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path + ": cannot create (" + std::strerror(errno) + ")");
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error(path_ + ": write failed (" + std::strerror(w < 0 ? errno : EIO) + ")");
      p += w;
      n -= size_t(w);
    }
  }
  // Flushes to disk so the rename that follows publishes complete data.
  void close() {
    if (::fsync(fd_) != 0) throw Error(path_ + ": fsync failed (" + std::strerror(errno) + ")");
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw Error(path_ + ": close failed (" + std::strerror(errno) + ")");
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Writes `path` through path + ".tmp" and a rename; the temporary goes when anything fails.
template <typename Fill>
void write_atomically(const std::string& path, Fill fill) {
  const std::string tmp = path + ".tmp";
  try {
    OutFile out(tmp);
    fill(out);
    out.close();
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(path + ": cannot rename " + tmp + " into place (" + std::strerror(errno) + ")");
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

// "model-00001-of-00004.safetensors": a shard name save_pretrained writes.
bool is_shard_name(const std::string& name) {
  const std::string pattern = "model-#####-of-#####.safetensors";
  if (name.size() != pattern.size()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (pattern[i] == '#' ? !std::isdigit(static_cast<unsigned char>(name[i])) : name[i] != pattern[i]) return false;
  return true;
}

void write_file(const std::string& path, const std::vector<TensorToWrite>& tensors,
                const std::vector<uint64_t>& sizes, const std::map<std::string, std::string>& metadata,
                const std::string& dtype, size_t esize) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    header[tensors[i].name] = {{"dtype", dtype}, {"shape", tensors[i].shape}, {"data_offsets", {offset, offset + sizes[i]}}};
    offset += sizes[i];
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or metadata that is not UTF-8
    throw Error(path + ": cannot write the header (" + e.what() + "); names and metadata must be UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  write_atomically(path, [&](OutFile& out) {
    out.write(length, 8);
    out.write(text.data(), text.size());
    constexpr size_t kChunk = 1 << 16;  // elements converted per write
    std::vector<uint16_t> half(dtype == "F32" ? 0 : kChunk);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t n = size_t(sizes[i] / esize);
      if (dtype == "F32") {
        out.write(tensors[i].data, n * 4);
        continue;
      }
      for (size_t at = 0; at < n; at += kChunk) {
        const size_t m = std::min(kChunk, n - at);
        const float* src = tensors[i].data + at;
        if (dtype == "BF16")
          for (size_t k = 0; k < m; ++k) half[k] = float_to_bf16(src[k]);
        else
          for (size_t k = 0; k < m; ++k) half[k] = float_to_f16(src[k]);
        out.write(half.data(), m * 2);
      }
    }
  });
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, const std::string& dtype) {
  const size_t esize = write_dtype_size(dtype, path);
  const std::vector<uint64_t> sizes = checked_sizes(tensors, esize, path);
  write_file(path, tensors, sizes, metadata, dtype, esize);
}

std::vector<std::string> write_safetensors_model(const std::string& folder,
                                                 const std::vector<TensorToWrite>& tensors,
                                                 uint64_t max_shard_bytes, const std::string& dtype) {
  const size_t esize = write_dtype_size(dtype, folder);
  const std::vector<uint64_t> sizes = checked_sizes(tensors, esize, folder);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw Error(folder + ": cannot create the model folder (" + ec.message() + ")");

  // Shards as index ranges [first, last) of `tensors`, filled in order like transformers'.
  std::vector<std::pair<size_t, size_t>> shards;
  size_t first = 0;
  uint64_t bytes = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    total += sizes[i];
    if (max_shard_bytes && i > first && bytes + sizes[i] > max_shard_bytes) {
      shards.emplace_back(first, i);
      first = i;
      bytes = 0;
    }
    bytes += sizes[i];
    if (max_shard_bytes && sizes[i] > max_shard_bytes) {  // alone in a shard of its own
      shards.emplace_back(first, i + 1);
      first = i + 1;
      bytes = 0;
    }
  }
  if (first < tensors.size() || shards.empty()) shards.emplace_back(first, tensors.size());

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::string> written;
  if (shards.size() == 1) {
    written.push_back(kSingleName);
    write_file((fs::path(folder) / kSingleName).string(), tensors, sizes, metadata, dtype, esize);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      const auto [b, e] = shards[s];
      const std::vector<TensorToWrite> part(tensors.begin() + long(b), tensors.begin() + long(e));
      const std::vector<uint64_t> part_sizes(sizes.begin() + long(b), sizes.begin() + long(e));
      write_file((fs::path(folder) / name).string(), part, part_sizes, metadata, dtype, esize);
      for (const auto& t : part) weight_map[t.name] = name;
      written.push_back(name);
    }
    // As transformers writes it: sorted keys, two-space indent, a final newline.
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    write_atomically((fs::path(folder) / kIndexName).string(),
                     [&](OutFile& out) { out.write(text.data(), text.size()); });
    written.push_back(kIndexName);
  }

  // Weights of an earlier export would shadow or contradict this one (a reader takes
  // model.safetensors over the index); remove those this export did not write.
  const std::set<std::string> keep(written.begin(), written.end());
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == kSingleName || name == kIndexName || is_shard_name(name);
    if (ours && !keep.count(name)) stale.push_back(entry.path());
  }
  for (const auto& p : stale) fs::remove(p, ec);
  return written;
}

}  // namespace feast
