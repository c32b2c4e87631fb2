// Writing safetensors files and model folders that transformers loads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace feast {

// A float32 tensor to write, row-major.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes one file: the header padded with spaces to a multiple of 8 bytes (as the Python library
// does), then the tensors in the given order, stored as "F32", "BF16" (round to nearest even,
// NaN stays NaN) or "F16" (round to nearest even, overflow to inf). Written atomically
// (core/io/atomic_file.h), so a reader never sees half a file; throws Error naming the path.
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

}  // namespace feast
