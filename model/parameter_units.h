// How ZeRO 3 cuts a stage's flat buffer into units, the pieces gathered whole one at a time.
// The table keeps the vocabulary-sized tensors first (the token embedding, the head's matrix
// or a tied head's copy, the position embedding) and the final norm last, so the units are:
// the front (those first tensors), each block, and the tail (the final norm). They tile the
// buffer, so under ZeRO 3 nothing stays whole on every rank. The walk says which units a
// forward holds at once, step by step: the embedding's step holds the front; the head's holds
// the front (its matrix is there) and the tail. While one step runs the next step's units
// arrive. The stage follows the walk forward and back, and the planner counts its working set
// from the same walk.
#pragma once

#include <vector>

#include "model/gradient_sink.h"
#include "model/parameters.h"

namespace feast {

struct ParameterUnits {
  std::vector<FlatRange> ranges;       // neighbouring, in buffer order, together the whole buffer
  std::vector<std::vector<int>> walk;  // a forward's steps: the units each holds
  bool has_embedding_step = false;  // the first stage: the embedding reads the front
  bool has_head_step = false;       // the last stage: the head reads the front and the tail
  // The walk's steps: the embedding's (if the stage has it), each block's, the head's (if any).
  int embedding_step() const { return has_embedding_step ? 0 : -1; }
  int block_step(int i) const { return (has_embedding_step ? 1 : 0) + i; }
  int head_step() const { return has_head_step ? int(walk.size()) - 1 : -1; }
};

// The units of a stage's table.
ParameterUnits parameter_units(const LocalTable& table);

}  // namespace feast
