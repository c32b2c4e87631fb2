// CRC-32 (zlib's, the checksum gzip and PNG use) of a checkpoint dataset that no rank holds
// whole. A dataset's checksum is the CRC-32 of all its bytes in row-major order. Each rank
// checksums the contiguous runs it holds (in pieces, on all threads), then folds them into its
// share: the CRC-32 of the whole dataset with every byte it does not hold taken as zero, XOR the
// CRC-32 of all zeros. CRC-32 is affine over GF(2) (crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0...0) for
// messages of one length), so when the ranks' runs tile the dataset, the XOR of their shares
// XOR crc32_of_zeros(size) is its checksum: combining costs one XOR reduction of a word per
// dataset, however many runs the ranks hold (a column-parallel slice has one per row).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace feast {

uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc = 0);

// The CRC-32 of n zero bytes (O(log n), no zeros touched).
uint32_t crc32_of_zeros(int64_t n);

// The checksum of one contiguous run of a dataset's bytes.
struct ChecksumPiece {
  int64_t dataset = 0;  // index into the checkpoint's dataset list
  int64_t offset = 0;   // first byte within the dataset
  int64_t bytes = 0;
  uint32_t crc = 0;
};

// One rank's shares of every dataset (0 where it holds nothing) and the bytes it holds of
// each; a dataset whose pieces overlap or run past its end gets bytes = kBroken, which no sum
// over the ranks can bring back to the dataset's size.
inline constexpr int64_t kBroken = INT64_MIN / 4;
struct ChecksumShares {
  std::vector<int64_t> share;  // the 32-bit shares, widened for an integer XOR reduction
  std::vector<int64_t> bytes;
};
ChecksumShares checksum_shares(std::vector<ChecksumPiece> pieces, const std::vector<int64_t>& dataset_bytes);

// A dataset's checksum from the XOR of every rank's share.
inline uint32_t dataset_checksum(int64_t xor_of_shares, int64_t dataset_bytes) {
  return uint32_t(xor_of_shares) ^ crc32_of_zeros(dataset_bytes);
}

}  // namespace feast
