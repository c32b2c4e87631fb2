#include "model/layers/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace feast {

int expert_capacity(double factor, int N, int k, int E) {
  if (factor <= 0) return 0;
  return std::max(1, int(std::ceil(factor * double(N) * double(k) / double(E))));
}

RoutingPlan plan_routing(const int32_t* expert, int N, int k, int E, int capacity) {
  RoutingPlan p;
  p.rows.assign(size_t(E), 0);
  p.requested.assign(size_t(E), 0);
  p.slot.assign(size_t(N) * size_t(k), -1);
  // Each choice's place among its expert's tokens, in token order (a token's k choices name k
  // different experts, so its order among them does not matter).
  std::vector<int> place(p.slot.size());
  for (size_t i = 0; i < p.slot.size(); ++i) {
    const int e = expert[i];
    FEAST_CHECK(e >= 0 && e < E, "the router chose expert " << e << " of " << E);
    place[i] = p.requested[size_t(e)]++;
  }
  for (int e = 0; e < E; ++e) {
    const int r = p.requested[size_t(e)];
    p.rows[size_t(e)] = capacity > 0 ? std::min(r, capacity) : r;
    p.dropped += r - p.rows[size_t(e)];
  }
  p.offsets.assign(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) p.offsets[size_t(e) + 1] = p.offsets[size_t(e)] + p.rows[size_t(e)];
  p.token.assign(size_t(p.routed_rows()), 0);
  for (size_t i = 0; i < p.slot.size(); ++i) {
    const int e = expert[i];
    if (place[i] >= p.rows[size_t(e)]) continue;  // past the expert's capacity
    const int row = p.offsets[size_t(e)] + place[i];
    p.slot[i] = row;
    p.token[size_t(row)] = int32_t(i / size_t(k));
  }
  return p;
}

}  // namespace feast
