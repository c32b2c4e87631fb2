#include "model/parameter_units.h"

#include "core/error.h"

namespace feast {

ParameterUnits parameter_units(const LocalTable& table) {
  ParameterUnits u;
  // Each tensor's unit key: -1 the front (first- or last-stage tensors before any block), the
  // block's layer, -2 the tail (last-stage tensors after the blocks).
  int current = -3, last_layer = -1;
  size_t end = 0;
  for (const LocalParam& p : table.params()) {
    FEAST_CHECK(p.offset == end, p.spec->name << " does not follow the tensor before it in the flat buffer");
    end = p.offset + p.numel;
    const Placement& at = p.spec->placement;
    if (at.kind == Placement::Kind::kFirstStage) u.has_embedding_step = true;
    if (at.kind == Placement::Kind::kLastStage) u.has_head_step = true;
    const bool in_layer = at.kind == Placement::Kind::kLayer;
    const int key = in_layer ? at.layer : u.first_block < 0 ? -1 : -2;
    FEAST_CHECK(key != -2 || at.kind == Placement::Kind::kLastStage,
                p.spec->name << " (a first-stage tensor) follows the blocks in the flat buffer");
    if (key == current) {
      u.ranges.back().end = end;
      continue;
    }
    FEAST_CHECK(current != -2, p.spec->name << " follows the final norm in the flat buffer");
    FEAST_CHECK(!in_layer || key > last_layer, p.spec->name << ": layer " << key << "'s tensors are not together");
    if (key == -1) u.front = int(u.ranges.size());
    if (key == -2) u.tail = int(u.ranges.size());
    if (in_layer && u.first_block < 0) u.first_block = int(u.ranges.size());
    if (in_layer) last_layer = key;
    u.ranges.push_back({p.offset, end});
    current = key;
  }
  FEAST_CHECK(end == table.total_numel(), "the stage's tensors do not tile its flat buffer");
  if (u.has_embedding_step) u.walk.push_back({u.front});
  for (int i = 0; u.first_block >= 0 && u.first_block + i < int(u.ranges.size()) && u.first_block + i != u.tail; ++i)
    u.walk.push_back({u.first_block + i});
  if (u.has_head_step) {
    u.walk.push_back({});
    if (u.front >= 0) u.walk.back().push_back(u.front);
    if (u.tail >= 0) u.walk.back().push_back(u.tail);
  }
  return u;
}

}  // namespace feast
