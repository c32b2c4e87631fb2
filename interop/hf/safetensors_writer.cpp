// Writing safetensors (see safetensors_writer.h): the header as the Python library lays it out,
// float32 data converted to BF16 or F16 in chunks, every file through an AtomicFile.
#include "interop/hf/safetensors_writer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "interop/hf/safetensors.h"

namespace feast {

namespace fs = std::filesystem;

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
      if (d < 0) throw Error(path + ": tensor '" + t.name + "' has negative shape " + safetensors_shape_string(t.shape));
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel) || numel > (uint64_t(1) << 60))
        throw Error(path + ": tensor '" + t.name + "' of shape " + safetensors_shape_string(t.shape) + " is too large");
    }
    if (numel > 0 && !t.data) throw Error(path + ": tensor '" + t.name + "' has no data");
    sizes.push_back(numel * esize);
  }
  return sizes;
}

// A file descriptor that writes everything or throws, and closes when dropped.
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

  AtomicFile out(path);
  {
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
  }
  out.commit();
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
    written.push_back(kSafetensorsSingleName);
    write_file((fs::path(folder) / kSafetensorsSingleName).string(), tensors, sizes, metadata, dtype, esize);
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
    write_file_atomically((fs::path(folder) / kSafetensorsIndexName).string(), text);
    written.push_back(kSafetensorsIndexName);
  }

  // Weights of an earlier export would shadow or contradict this one (a reader takes
  // model.safetensors over the index); remove those this export did not write.
  const std::set<std::string> keep(written.begin(), written.end());
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == kSafetensorsSingleName || name == kSafetensorsIndexName || is_shard_name(name);
    if (ours && !keep.count(name)) stale.push_back(entry.path());
  }
  for (const auto& p : stale) fs::remove(p, ec);
  return written;
}

}  // namespace feast
