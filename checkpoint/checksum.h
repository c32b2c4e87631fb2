// CRC-32 (zlib's, the checksum gzip and PNG use) of byte ranges, and how the checksums of
// consecutive ranges combine into the checksum of their concatenation. A checkpoint dataset's
// checksum is the CRC-32 of all its bytes in row-major order, which no rank holds: every rank
// checksums the contiguous runs it writes (or reads) and the runs are combined in file order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace feast {

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);

// crc32 of A followed by B, from crc32(A), crc32(B) and B's length.
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, size_t bytes_b);

// The checksum of one contiguous run of a dataset's bytes.
struct ChecksumPiece {
  int64_t dataset = 0;  // index into the checkpoint's dataset list
  int64_t offset = 0;   // first byte within the dataset
  int64_t bytes = 0;
  uint32_t crc = 0;
};

// Combines pieces (any order) into one checksum per dataset, given every dataset's size in
// bytes. Returns, for each dataset, the checksum, or nothing when the pieces do not tile the
// dataset exactly (a gap or an overlap: a bug in who writes what, reported by the caller).
struct CombinedChecksum {
  bool complete = false;
  uint32_t crc = 0;
};
std::vector<CombinedChecksum> combine_checksums(std::vector<ChecksumPiece> pieces,
                                                const std::vector<int64_t>& dataset_bytes);

}  // namespace feast
