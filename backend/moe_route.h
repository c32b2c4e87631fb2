// A mixture of experts' router, the parts of one token's row both backends share (FEAST_HD): the
// top-k choice from its probabilities and the gradient of its logits. The softmax itself (exp,
// log) stays with each backend's own functions.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace feast {

// ex (k) = the k most probable of E experts, most probable first (ties: the lower index); w (k)
// = their probabilities, divided by their sum when renormalize.
template <typename T>
FEAST_HD void moe_top_k(const T* p, int E, int k, bool renormalize, int32_t* ex, T* w) {
  T chosen = 0;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || ex[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    ex[j] = best;
    w[j] = p[best];
    chosen += p[best];
  }
  if (renormalize)
    for (int j = 0; j < k; ++j) w[j] /= chosen;
}

// d (E) = d loss / d logits of a row with probabilities p (E) and logsumexp lse, its choices ex
// (k) with weights w (k) and their gradient dw (k), from dprob (E) (d loss / d p, the same for
// every row) and z_scale (d loss / d lse = 2 z_scale lse). A chosen expert's probability gets
// dw_j, or (dw_j - sum_m dw_m w_m) / S where the weights are p_j / S renormalised; the softmax
// turns d loss / d p into p_e (dp_e - sum_f p_f dp_f).
template <typename T, typename D>
FEAST_HD void moe_route_grad_row(D* d, const T* p, T lse, const int32_t* ex, const T* w, const T* dw, const T* dprob,
                                 T z_scale, int E, int k, bool renormalize) {
  T S = 0, wdot = 0;
  for (int j = 0; j < k; ++j) {
    S += p[ex[j]];
    wdot += dw[j] * w[j];
  }
  auto chosen = [&](int j) { return renormalize ? (dw[j] - wdot) / S : dw[j]; };
  T dot = 0;
  for (int e = 0; e < E; ++e) dot += p[e] * dprob[e];
  for (int j = 0; j < k; ++j) dot += p[ex[j]] * chosen(j);
  const T dz = 2 * z_scale * lse;
  for (int e = 0; e < E; ++e) {
    T dp = dprob[e];
    for (int j = 0; j < k; ++j)
      if (ex[j] == e) dp += chosen(j);
    d[e] = D(p[e] * (dp - dot + dz));
  }
}

}  // namespace feast
