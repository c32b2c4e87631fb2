// Reading one .safetensors file. It is mapped (core/io/mapped_file.h) and its whole header is
// validated when it opens: every tensor's byte range must match its dtype and shape, and the
// ranges must tile the data buffer exactly (no gap, no overlap, nothing past the end), as the
// reference library demands. After that a read can never leave the mapping, and reading a slice
// touches only the pages it covers.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/io/mapped_file.h"
#include "interop/hf/safetensors.h"

namespace feast {

// One .safetensors file, mapped read-only and validated on open; throws DataError (naming the
// path, the tensor and what is wrong) for anything malformed. Move-only.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
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
  MappedFile file_;
  const unsigned char* data_ = nullptr;  // the data buffer: the map + 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace feast
