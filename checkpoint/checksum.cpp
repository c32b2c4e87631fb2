#include "checkpoint/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <climits>

namespace feast {

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

uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, size_t bytes_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(bytes_b)));
}

std::vector<CombinedChecksum> combine_checksums(std::vector<ChecksumPiece> pieces,
                                                const std::vector<int64_t>& dataset_bytes) {
  std::sort(pieces.begin(), pieces.end(), [](const ChecksumPiece& a, const ChecksumPiece& b) {
    return a.dataset != b.dataset ? a.dataset < b.dataset : a.offset < b.offset;
  });
  std::vector<CombinedChecksum> out(dataset_bytes.size());
  std::vector<int64_t> covered(dataset_bytes.size(), 0);
  std::vector<bool> broken(dataset_bytes.size(), false);
  for (const ChecksumPiece& p : pieces) {
    if (p.dataset < 0 || size_t(p.dataset) >= out.size()) continue;
    const size_t d = size_t(p.dataset);
    if (p.offset != covered[d]) broken[d] = true;  // a gap or an overlap
    if (broken[d]) continue;
    out[d].crc = covered[d] == 0 ? p.crc : crc32_concat(out[d].crc, p.crc, size_t(p.bytes));
    covered[d] += p.bytes;
  }
  for (size_t d = 0; d < out.size(); ++d) out[d].complete = !broken[d] && covered[d] == dataset_bytes[d];
  return out;
}

}  // namespace feast
