// ZeRO 3's parameters: each data-parallel rank keeps only its shard of its stage's parameters
// in memory, and gathers a unit (the embedding, a block, the head: model/parameter_units.h)
// whole (a non-blocking all-gather over dp) just before the stage runs it, forward or
// backward, giving the memory back right after. The stage names the units it runs next
// (ParameterResidency::prefetch), so their gather runs while this one computes. After an
// update nothing is gathered: each unit is, when next acquired.
//
// The stage's flat buffer stays one range of addresses (every offset means what it always
// meant: the optimizer, checkpoints and imports work unchanged), reserved with
// Backend::reserve; only its pages hold memory: the pages of this rank's shard always
// (pinned), a unit's other pages while the unit is gathered. Pages that a unit shares with its
// neighbour are counted by reference. A unit is re-gathered for every micro-batch's forward and
// backward (FSDP's reshard-after-forward); keeping units across the micro-batches of a step
// would need the memory of the whole stage, which is ZeRO 2.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/timer.h"
#include "model/gradient_sink.h"
#include "model/parameter_residency.h"
#include "model/parameter_units.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/zero_shard.h"

namespace feast {

// Which pages of a stage's flat buffer ZeRO 3 holds (the planner counts the same): `total`
// elements of `element_bytes`, pages of `page_bytes` (0: pages cannot be given back, so every
// page is held), this rank's shard and the units.
struct ShardedPages {
  ShardedPages(size_t total, size_t element_bytes, size_t page_bytes, ShardRange shard, const ParameterUnits& units);
  size_t page_bytes = 0, pages = 0;
  bool gives_back = true;  // false: one page, the whole buffer, always held
  std::vector<bool> pinned;                       // held always: the shard's pages
  std::vector<std::pair<size_t, size_t>> unit_pages;  // each unit's pages [first, end)
  size_t pinned_bytes() const;
  // The most a pass holds: the pinned pages and the other pages of two neighbouring steps of
  // the walk (the one running and the next one arriving).
  size_t working_set_bytes() const { return working_set_; }

 private:
  size_t working_set_ = 0;
};

class ShardedParameters final : public ParameterResidency {
 public:
  // params: the stage's flat buffer, reserved (Backend::reserve), every element written;
  // shard: this rank's (GradientSync::shard()); units: the stage's
  // (PipelineStage::parameter_units()); dp: the data-parallel group.
  ShardedParameters(Backend& backend, const TensorView& params, ShardRange shard, const ParameterUnits& units,
                    Communicator& dp);
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  void acquire(int unit) override;
  void prefetch(int unit) override;
  void release(int unit) override;

  // Gives back every unit's memory (after the whole buffer was written: initialisation, a
  // loaded checkpoint, imported weights), and stops keeping units whole (gather_all).
  void release_all();
  // Gathers every unit and keeps them whole until release_all: for what reads the weights
  // after training (hooks, evaluation).
  void gather_all();
  // The whole buffer is about to be written (a checkpoint, imported weights): every page held
  // and every unit whole, without communication, until release_all.
  void hold_all();

  bool pages_given_back() const { return layout_.gives_back; }
  // Every unit whole and kept so (after gather_all or hold_all, until release_all).
  bool holds_all() const { return keep_whole_; }
  size_t working_set_bytes() const { return layout_.working_set_bytes(); }
  size_t held_bytes() const { return held_pages_ * layout_.page_bytes; }
  // The most held at once (pinned pages and gathered units) since release_all, gather_all's
  // gathering of every unit excepted.
  size_t peak_bytes() const { return peak_pages_ * layout_.page_bytes; }
  // This step's gathers so far: how long they ran, and how long the stage waited for them.
  ReductionTimes gather_times() const;
  void begin_step();

 private:
  enum class State { kReleased, kGathering, kWhole };
  WorkHandle gather(FlatRange range);
  void start(int unit);
  void finish(int unit);
  // Adds delta (+1 or -1) holders to the unit's pages, committing or giving back those that
  // change between held and not.
  void claim_pages(int unit, int delta);

  Backend& backend_;
  TensorView params_;
  ShardRange shard_;
  std::vector<FlatRange> units_;
  Communicator& dp_;
  ShardedPages layout_;
  std::vector<int> refs_;  // per page: gathered units holding it
  size_t held_pages_ = 0, peak_pages_ = 0;
  std::vector<State> state_;
  std::vector<WorkHandle> work_;
  std::vector<double> launched_;
  bool keep_whole_ = false;
  Timer step_clock_;
  std::vector<std::pair<double, double>> spans_;
  double exposed_ = 0;
};

}  // namespace feast
