#include "interop/hf/weights_fingerprint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/io/mapped_file.h"

namespace feast {

std::string weights_fingerprint(const SafetensorsModel& model) {
  constexpr int64_t kChunk = int64_t(64) << 20;
  uLong crc = crc32(0L, Z_NULL, 0);
  int64_t total = 0;
  for (const SafetensorsFile& file : model.files()) {
    MappedFile map(file.path(), "a safetensors file");
    map.map(MappedFile::Access::kSequential);
    const int64_t size = map.size();
    const int64_t chunks = (size + kChunk - 1) / kChunk;
    std::vector<uLong> crcs(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(dynamic)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk, n = std::min(kChunk, size - begin);
      crcs[size_t(c)] = crc32(crc32(0L, Z_NULL, 0), map.data() + begin, uInt(n));
    }
    for (int64_t c = 0; c < chunks; ++c)
      crc = crc32_combine(crc, crcs[size_t(c)], z_off_t(std::min(kChunk, size - c * kChunk)));
    total += size;
  }
  char text[96];
  std::snprintf(text, sizeof text, "crc32 %08lx, %lld bytes in %zu file(s)", crc, static_cast<long long>(total),
                model.files().size());
  return text;
}

std::string lora_base_mismatch(const std::string& trained_on, const std::string& here, const std::string& init_from) {
  if (trained_on == here) return "";
  return "the LoRA base: the adapters were trained on " +
         (trained_on.empty() ? std::string("a base initialised from the seed") : "weights of " + trained_on) +
         ", model.init_from (" + (init_from.empty() ? std::string("unset") : init_from) + ") holds " +
         (here.empty() ? std::string("no weights") : here);
}

}  // namespace feast
