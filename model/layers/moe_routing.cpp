#include "model/layers/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace feast {

int expert_capacity(double factor, int N, int k, int E) {
  if (factor <= 0) return 0;
  return std::max(1, int(std::ceil(factor * double(N) * double(k) / double(E))));
}

size_t expert_rows_bound(double factor, int N, int k, int E, int ep) {
  const size_t every_choice = size_t(ep) * size_t(N) * size_t(k);
  const int capacity = expert_capacity(factor, N, k, E);
  return capacity > 0 ? std::min(every_choice, size_t(E) * size_t(capacity)) : every_choice;
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

ExpertExchange plan_exchange(const std::vector<int>& rows, const std::vector<int32_t>& received, int P) {
  const int E = int(rows.size()), El = E / P;
  FEAST_CHECK(P >= 1 && E % P == 0 && received.size() == rows.size(),
              "an exchange of " << E << " experts' rows among " << P << " ranks");
  auto got = [&](int q, int i) { return int(received[size_t(q * El + i)]); };
  ExpertExchange x;
  x.send_rows.assign(size_t(P), 0);
  x.recv_rows.assign(size_t(P), 0);
  x.local_offsets.assign(size_t(El) + 1, 0);
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < El; ++i) {
      x.send_rows[size_t(q)] += size_t(rows[size_t(q * El + i)]);
      x.recv_rows[size_t(q)] += size_t(got(q, i));
      x.local_offsets[size_t(i) + 1] += got(q, i);
    }
  for (int i = 0; i < El; ++i) x.local_offsets[size_t(i) + 1] += x.local_offsets[size_t(i)];
  // Where each (rank, expert) block starts among the received rows.
  std::vector<int> block_start(static_cast<size_t>(E));
  for (int b = 0, at = 0; b < E; ++b) {
    block_start[size_t(b)] = at;
    at += int(received[size_t(b)]);
  }
  x.to_experts.resize(size_t(x.rows()));
  x.to_ranks.resize(size_t(x.rows()));
  int r = 0;
  for (int i = 0; i < El; ++i)
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < got(q, i); ++j, ++r) {
        const int from = block_start[size_t(q * El + i)] + j;
        x.to_experts[size_t(r)] = from;
        x.to_ranks[size_t(from)] = r;
      }
  return x;
}

}  // namespace feast
