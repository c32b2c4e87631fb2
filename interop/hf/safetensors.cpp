// The safetensors format's shared pieces: dtype sizes, element counts, and the strict JSON
// parsing both the file reader and the model folder's index use.
#include "interop/hf/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "core/error.h"

namespace feast {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what + kSafetensorsCorruptHint);
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

}  // namespace

std::string safetensors_shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

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

nlohmann::ordered_json parse_safetensors_json(const char* begin, const char* end, const std::string& path,
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

}  // namespace feast
