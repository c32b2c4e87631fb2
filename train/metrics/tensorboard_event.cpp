#include "train/metrics/tensorboard_event.h"

#include <cstring>

#include "core/error.h"

namespace feast {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t{field} << 3) | type); }

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out.append(bytes);
}

template <typename T>
void put_fixed(std::string& out, uint32_t field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  put_key(out, field, sizeof(T) == 8 ? kFixed64 : kFixed32);
  unsigned char b[sizeof(T)];
  std::memcpy(b, &value, sizeof(T));  // little-endian hosts only, as the rest of the project
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

// A reader over one message's bytes.
class Fields {
 public:
  explicit Fields(std::string_view bytes) : p_(bytes) {}
  bool done() const { return p_.empty(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_.empty()) throw Error("TensorBoard event: a varint runs past the end");
      const auto byte = static_cast<unsigned char>(p_[0]);
      p_.remove_prefix(1);
      v |= uint64_t{byte & 0x7fu} << shift;
      if (!(byte & 0x80)) return v;
    }
    throw Error("TensorBoard event: a varint longer than 10 bytes");
  }
  std::string_view take(size_t n) {
    if (n > p_.size()) throw Error("TensorBoard event: a field runs past the end");
    const std::string_view out = p_.substr(0, n);
    p_.remove_prefix(n);
    return out;
  }
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  void skip(uint32_t type) {
    switch (type) {
      case kVarint: varint(); break;
      case kFixed64: take(8); break;
      case kBytes: take(varint()); break;
      case kFixed32: take(4); break;
      default: throw Error("TensorBoard event: unknown wire type " + std::to_string(type));
    }
  }

 private:
  std::string_view p_;
};

}  // namespace

std::string encode_tensorboard_event(const TensorBoardEvent& e) {
  // proto3: wall_time, step and tag are written when not zero or empty; oneof members always.
  std::string out;
  if (e.wall_time != 0) put_fixed(out, 1, e.wall_time);
  if (e.step != 0) {
    put_key(out, 2, kVarint);
    put_varint(out, static_cast<uint64_t>(e.step));
  }
  if (!e.has_summary) {
    put_bytes(out, 3, e.file_version);
    return out;
  }
  std::string summary;
  for (const auto& [tag, value] : e.scalars) {
    std::string v;
    if (!tag.empty()) put_bytes(v, 1, tag);
    put_fixed(v, 2, value);
    put_bytes(summary, 1, v);
  }
  put_bytes(out, 5, summary);
  return out;
}

TensorBoardEvent decode_tensorboard_event(std::string_view bytes) {
  TensorBoardEvent e;
  Fields event(bytes);
  while (!event.done()) {
    const uint64_t key = event.varint();
    const auto field = static_cast<uint32_t>(key >> 3), type = static_cast<uint32_t>(key & 7);
    if (field == 1 && type == kFixed64) e.wall_time = event.fixed<double>();
    else if (field == 2 && type == kVarint) e.step = static_cast<int64_t>(event.varint());
    else if (field == 3 && type == kBytes) e.file_version = std::string(event.take(event.varint()));
    else if (field == 5 && type == kBytes) {
      e.has_summary = true;
      Fields summary(event.take(event.varint()));
      while (!summary.done()) {
        const uint64_t skey = summary.varint();
        if (skey != ((1u << 3) | kBytes)) {
          summary.skip(static_cast<uint32_t>(skey & 7));
          continue;
        }
        Fields value(summary.take(summary.varint()));
        std::string tag;
        bool simple = false;
        float number = 0;
        while (!value.done()) {
          const uint64_t vkey = value.varint();
          if (vkey == ((1u << 3) | kBytes)) tag = std::string(value.take(value.varint()));
          else if (vkey == ((2u << 3) | kFixed32)) {
            number = value.fixed<float>();
            simple = true;
          } else {
            value.skip(static_cast<uint32_t>(vkey & 7));
          }
        }
        if (simple) e.scalars.emplace_back(tag, number);  // images, histograms: not scalars
      }
    } else {
      event.skip(type);
    }
  }
  return e;
}

}  // namespace feast
