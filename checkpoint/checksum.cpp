#include "checkpoint/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <climits>
#include <mutex>
#include <unordered_map>

namespace feast {
namespace {

// zlib's operator that appends a run of `len` bytes to a CRC (crc32_combine_op), cached: runs
// and gaps of one dataset mostly share a few lengths (a row slice, the gap to the next row).
class CombineOps {
 public:
  uLong op(int64_t len) {
    auto [it, added] = ops_.try_emplace(len, 0);
    if (added) it->second = crc32_combine_gen(static_cast<z_off_t>(len));
    return it->second;
  }
  uint32_t append(uint32_t crc, uint32_t crc_of_run, int64_t len) {
    return static_cast<uint32_t>(crc32_combine_op(crc, crc_of_run, op(len)));
  }

 private:
  std::unordered_map<int64_t, uLong> ops_;
};

// crc(0^(2^k)) and the operator appending 2^k bytes, for k < 63.
struct ZeroPowers {
  std::array<uint32_t, 63> crc{};
  std::array<uLong, 63> op{};
  ZeroPowers() {
    const unsigned char zero = 0;
    crc[0] = static_cast<uint32_t>(crc32(0, &zero, 1));
    for (size_t k = 0; k < op.size(); ++k) {
      op[k] = crc32_combine_gen(static_cast<z_off_t>(int64_t{1} << k));
      if (k + 1 < crc.size()) crc[k + 1] = static_cast<uint32_t>(crc32_combine_op(crc[k], crc[k], op[k]));
    }
  }
};

}  // namespace

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib's length is 32-bit
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, UINT_MAX));
    crc = static_cast<uint32_t>(crc32(crc, p, n));
    p += n;
    bytes -= n;
  }
  return crc;
}

uint32_t crc32_of_zeros(int64_t n) {
  static const ZeroPowers powers;
  uint32_t crc = 0;  // of no bytes
  for (size_t k = 0; k < powers.crc.size() && n > 0; ++k, n >>= 1)
    if (n & 1) crc = static_cast<uint32_t>(crc32_combine_op(crc, powers.crc[k], powers.op[k]));
  return crc;
}

ChecksumShares checksum_shares(std::vector<ChecksumPiece> pieces, const std::vector<int64_t>& dataset_bytes) {
  std::sort(pieces.begin(), pieces.end(), [](const ChecksumPiece& a, const ChecksumPiece& b) {
    return a.dataset != b.dataset ? a.dataset < b.dataset : a.offset < b.offset;
  });
  ChecksumShares out{std::vector<int64_t>(dataset_bytes.size(), 0), std::vector<int64_t>(dataset_bytes.size(), 0)};
  CombineOps ops;
  std::unordered_map<int64_t, uint32_t> zeros;  // crc32_of_zeros by length
  auto zero_run = [&](int64_t n) {
    auto [it, added] = zeros.try_emplace(n, 0);
    if (added) it->second = crc32_of_zeros(n);
    return it->second;
  };
  for (size_t i = 0; i < pieces.size();) {
    const int64_t d = pieces[i].dataset;
    const int64_t size = d >= 0 && size_t(d) < dataset_bytes.size() ? dataset_bytes[size_t(d)] : -1;
    uint32_t crc = 0;  // of the dataset's bytes [0, at) with the bytes of other ranks as zeros
    int64_t at = 0, held = 0;
    bool broken = size < 0;
    for (; i < pieces.size() && pieces[i].dataset == d; ++i) {
      const ChecksumPiece& p = pieces[i];
      if (p.offset < at || p.bytes < 0) broken = true;
      if (broken) continue;
      if (p.offset > at) crc = ops.append(crc, zero_run(p.offset - at), p.offset - at);
      crc = ops.append(crc, p.crc, p.bytes);
      at = p.offset + p.bytes;
      held += p.bytes;
    }
    if (size < 0) continue;
    if (broken || at > size) {
      out.bytes[size_t(d)] = kBroken;
      continue;
    }
    if (size > at) crc = ops.append(crc, zero_run(size - at), size - at);
    out.share[size_t(d)] = int64_t(crc ^ zero_run(size));
    out.bytes[size_t(d)] = held;
  }
  return out;
}

}  // namespace feast
