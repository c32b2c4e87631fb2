// Where a micro-batch's tokens go in a mixture-of-experts block: from each token's top-k experts
// (the router's choice), the rows each expert takes, expert by expert and within an expert in
// token order, so that each expert's tokens are one contiguous block of rows for its products.
// Under a capacity (model.moe.capacity_factor) an expert takes the first `capacity` tokens that
// chose it, in token order, and the choices past that are dropped: they skip the expert. Computed
// on the host from the experts the router picked (a few ints per token).
// Legend: N tokens, k choices per token, E experts, M rows routed (at most N k).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace feast {

struct RoutingPlan {
  std::vector<int> rows;        // (E) rows each expert takes
  std::vector<int> offsets;     // (E + 1) the first row of each expert; offsets[E] = M
  std::vector<int> requested;   // (E) choices of each expert, dropped ones included (load balance)
  std::vector<int32_t> token;   // (M) the token of each row
  std::vector<int32_t> slot;    // (N k) the row of each choice, -1 when dropped
  int64_t dropped = 0;          // choices past their expert's capacity

  int routed_rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// The tokens an expert takes per micro-batch of N tokens: ceil(factor * N * k / E); 0 (no limit)
// when factor is 0 (dropless).
int expert_capacity(double factor, int N, int k, int E);

// The most rows one rank's experts take from a micro-batch of N tokens on each of the ep ranks
// (what their buffers are sized for): every choice of every ep rank when dropless, ep N k; under
// a capacity at most `capacity` rows from each rank for each of its E / ep experts, E capacity.
size_t expert_rows_bound(double factor, int N, int k, int E, int ep);

// expert (N k): each token's choices, in the router's order. capacity 0 = none.
RoutingPlan plan_routing(const int32_t* expert, int N, int k, int E, int capacity);

// Expert parallelism's exchange of one micro-batch among P ranks of E / P experts each (rank q's
// experts [q E/P, (q+1) E/P)). What travels, and how the received rows, which come rank by rank
// and each rank's expert by expert, are reordered so that each of this rank's experts has its
// rows together.
struct ExpertExchange {
  std::vector<size_t> send_rows, recv_rows;  // (P) rows to and from each rank
  std::vector<int> local_offsets;            // (E/P + 1) this rank's experts' first rows, in expert order
  // (R) expert-order row r is received row to_experts[r]; received row i is expert-order row
  // to_ranks[i].
  std::vector<int32_t> to_experts, to_ranks;
  int rows() const { return local_offsets.empty() ? 0 : local_offsets.back(); }  // R
};

// rows (E): the rows this rank sends each expert (its RoutingPlan's); received (E): the rows
// each rank sends each of this rank's experts, rank q's for expert i at q E/P + i (what an
// all-to-all of the ranks' rows delivers).
ExpertExchange plan_exchange(const std::vector<int>& rows, const std::vector<int32_t>& received, int P);

}  // namespace feast
