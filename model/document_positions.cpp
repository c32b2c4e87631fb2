#include "model/document_positions.h"

#include <cstddef>

namespace feast {

std::vector<int32_t> document_positions(const int32_t* tokens, int B, int T, int32_t eos) {
  std::vector<int32_t> positions(size_t(B) * size_t(T));
  for (int b = 0; b < B; ++b) {
    const size_t row = size_t(b) * size_t(T);
    for (int t = 0; t < T; ++t)
      positions[row + size_t(t)] = t == 0 || tokens[row + size_t(t) - 1] == eos ? 0 : positions[row + size_t(t) - 1] + 1;
  }
  return positions;
}

}  // namespace feast
