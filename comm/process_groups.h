// The communicators one rank needs, built once from the layout and passed explicitly (no
// globals): rank order inside every group equals the order of the layout's rank lists, so
// "rank i of the tp group" means tp coordinate i everywhere.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/layout.h"

namespace feast {

struct ProcessGroups {
  // dp: every rank holding this rank's parameters, context-parallel ranks included (the
  // gradients' and ZeRO's group); cp: the ranks sharing this rank's sequences (its ring).
  std::unique_ptr<Communicator> world, tp, pp, dp, cp;
  // First and last pipeline stage of this rank's (tp, dp) column, for tied embedding
  // gradients; null on ranks of middle stages, and for a model without tied embeddings.
  std::unique_ptr<Communicator> embedding;
};

// Collective over `world`. Throws ConfigError when the layout does not match the world size,
// and Error when a group built does not hold exactly the ranks the layout names. The embedding
// group is built only when tied_embedding is set (a model whose head shares the embedding).
ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, const ParallelLayout& layout,
                                  bool tied_embedding = true);

}  // namespace feast
