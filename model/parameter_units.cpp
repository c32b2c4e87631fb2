#include "model/parameter_units.h"

#include "core/error.h"

namespace feast {

ParameterUnits parameter_units(const LocalTable& table) {
  ParameterUnits u;
  // Each tensor's unit key: -1 the front (first- or last-stage tensors before any block), the
  // block's layer, -2 the tail (last-stage tensors after the blocks).
  int current = -3, front = -1, tail = -1;
  std::vector<int> blocks;  // their units, in order
  size_t end = 0;
  for (const LocalParam& p : table.params()) {
    FEAST_CHECK(p.offset == end, p.spec->name << " does not follow the tensor before it in the flat buffer");
    end = p.offset + p.numel;
    const Placement& at = p.spec->placement;
    if (at.kind == Placement::Kind::kFirstStage) u.has_embedding_step = true;
    if (at.kind == Placement::Kind::kLastStage) u.has_head_step = true;
    const bool in_layer = at.kind == Placement::Kind::kLayer;
    const int key = in_layer ? at.layer : blocks.empty() ? -1 : -2;
    FEAST_CHECK(key != -2 || at.kind == Placement::Kind::kLastStage,
                p.spec->name << " (a first-stage tensor) follows the blocks in the flat buffer");
    if (key == current) {
      u.ranges.back().end = end;
      continue;
    }
    FEAST_CHECK(current != -2, p.spec->name << " follows the final norm in the flat buffer");
    FEAST_CHECK(!in_layer || key > current, p.spec->name << ": layer " << key << "'s tensors are not together");
    const int unit = int(u.ranges.size());
    (key == -1 ? front : key == -2 ? tail : blocks.emplace_back()) = unit;
    u.ranges.push_back({p.offset, end});
    current = key;
  }
  FEAST_CHECK(end == table.total_numel(), "the stage's tensors do not tile its flat buffer");
  if (u.has_embedding_step) u.walk.push_back({front});
  for (const int b : blocks) u.walk.push_back({b});
  if (u.has_head_step) {
    u.walk.push_back({});
    for (const int unit : {front, tail})
      if (unit >= 0) u.walk.back().push_back(unit);
  }
  return u;
}

}  // namespace feast
