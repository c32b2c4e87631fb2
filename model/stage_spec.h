// Which part of the model one rank holds: its layers (its pipeline stage's contiguous range, or
// under interleaved 1F1B one range per model chunk), whether it holds the embedding (first
// stage) and the final norm + head + loss (last stage), and its slice of tensor parallelism.
#pragma once

#include <vector>

#include "model/model_config.h"

namespace feast {

// Layers [first, first + count).
struct LayerRange {
  int first = 0;
  int count = 0;
};

struct StageSpec {
  // Ascending and disjoint; one range unless the pipeline is interleaved (parallel.virtual_stages
  // chunks, chunk c holding virtual stage c·pp + stage). The embedding belongs to chunk 0, the
  // head to the last chunk.
  std::vector<LayerRange> chunks{LayerRange{}};
  bool has_embedding = true;  // first pipeline stage: wte, wpe
  bool has_head = true;       // last pipeline stage: ln_f and the tied head (its own wte copy)
  int tp_rank = 0;
  int tp = 1;
  // Expert parallelism (parallel.ep): this rank is ep_rank of an ep group and holds experts
  // [ep_rank E/ep, (ep_rank + 1) E/ep) of every MoE block.
  int ep_rank = 0;
  int ep = 1;

  int num_layers() const {
    int n = 0;
    for (const LayerRange& r : chunks) n += r.count;
    return n;
  }
  bool holds_layer(int layer) const {
    for (const LayerRange& r : chunks)
      if (layer >= r.first && layer < r.first + r.count) return true;
    return false;
  }

  // The mixture-of-experts blocks among the layers this stage holds.
  int moe_layers(const MoeConfig& moe) const {
    int n = 0;
    for (const LayerRange& r : chunks)
      for (int layer = r.first; layer < r.first + r.count; ++layer) n += moe.is_moe_layer(layer) ? 1 : 0;
    return n;
  }

  // Whether this rank holds expert `expert` of a block of `experts` (every tensor not an expert's:
  // expert = -1).
  bool holds_expert(int expert, int experts) const {
    return expert < 0 || expert / (experts / ep) == ep_rank;
  }

  // The whole model on one rank.
  static StageSpec whole(const ModelConfig& c) {
    StageSpec s;
    s.chunks = {{0, c.n_layer}};
    return s;
  }
};

}  // namespace feast
