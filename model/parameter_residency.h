// Which of a stage's parameters are whole in its flat buffer, and when. Under ZeRO 3 each
// data-parallel rank keeps only its shard of a block's parameters: the stage asks for a block's
// whole parameters (a unit) just before it runs the block, forward or backward, names the block
// it runs next so that its parameters can arrive while this one computes, and lets them go
// right after. Without ZeRO 3 the stage has no residency and every parameter is always whole.
#pragma once

namespace feast {

class ParameterResidency {
 public:
  virtual ~ParameterResidency() = default;
  // Unit `unit`'s parameters are whole in the flat buffer when this returns.
  virtual void acquire(int unit) = 0;
  // Unit `unit` will be acquired next: start bringing it in.
  virtual void prefetch(int unit) = 0;
  // Done with unit `unit` until the next acquire.
  virtual void release(int unit) = 0;
};

}  // namespace feast
