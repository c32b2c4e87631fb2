// What a mixture-of-experts model's step did, over the whole job: the auxiliary losses and how
// the tokens spread over the experts (model/layers/moe.h), for metrics.jsonl and the progress line.
#pragma once

#include <vector>

namespace feast {

// A mixture-of-experts model's step over the whole job (the same on every rank).
struct MoeStepReport {
  double aux_loss = 0;  // the load-balancing loss, before model.moe.aux_loss_coef (transformers' aux_loss)
  double z_loss = 0;    // the router z-loss summed over MoE blocks, before model.moe.z_loss_coef
  std::vector<std::vector<double>> load;  // per MoE block (in model order), choices per expert
  double dropped = 0;   // choices past an expert's capacity
};

}  // namespace feast
