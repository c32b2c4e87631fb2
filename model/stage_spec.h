// Which part of the model one rank holds: a contiguous range of layers (its pipeline stage),
// whether it holds the embedding (first stage) and the final norm + head + loss (last stage),
// and its slice of tensor parallelism.
#pragma once

#include "model/model_config.h"

namespace feast {

struct StageSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;  // first pipeline stage: wte, wpe
  bool has_head = true;       // last pipeline stage: ln_f and the tied head (its own wte copy)
  int tp_rank = 0;
  int tp = 1;

  // The whole model on one rank.
  static StageSpec whole(const ModelConfig& c) { return {0, c.n_layer, true, true, 0, 1}; }
};

}  // namespace feast
