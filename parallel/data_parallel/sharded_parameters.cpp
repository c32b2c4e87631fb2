#include "parallel/data_parallel/sharded_parameters.h"

#include <algorithm>

#include "core/error.h"

namespace feast {

ShardedPages::ShardedPages(size_t total, size_t element_bytes, size_t page, ShardRange shard,
                           const ParameterUnits& units)
    : page_bytes(page) {
  const size_t bytes = total * element_bytes;
  if (page == 0) {  // nothing can be given back: one page, the whole buffer, always held
    gives_back = false;
    pages = 1;
    pinned = {true};
    unit_pages.assign(units.ranges.size(), {0, 0});
    page_bytes = bytes;
    working_set_ = bytes;
    return;
  }
  pages = (bytes + page - 1) / page;
  pinned.assign(pages, false);
  auto first_page = [&](size_t element) { return element * element_bytes / page; };
  auto end_page = [&](size_t element) { return (element * element_bytes + page - 1) / page; };
  auto pin = [&](size_t begin, size_t end) {
    if (begin < end)
      for (size_t p = first_page(begin); p < end_page(end); ++p) pinned[p] = true;
  };
  pin(shard.begin, shard.end);
  for (const FlatRange& u : units.ranges) unit_pages.push_back({first_page(u.begin), end_page(u.end)});
  // Two neighbouring steps' units held at once, their pages counted once each.
  size_t most = 0;
  std::vector<bool> held(pages);
  for (size_t i = 0; i < units.walk.size(); ++i) {
    std::fill(held.begin(), held.end(), false);
    for (size_t j = i; j <= std::min(i + 1, units.walk.size() - 1); ++j)
      for (const int u : units.walk[j])
        for (size_t p = unit_pages[size_t(u)].first; p < unit_pages[size_t(u)].second; ++p) held[p] = !pinned[p];
    most = std::max(most, size_t(std::count(held.begin(), held.end(), true)));
  }
  working_set_ = pinned_bytes() + most * page;
}

size_t ShardedPages::pinned_bytes() const {
  return size_t(std::count(pinned.begin(), pinned.end(), true)) * page_bytes;
}

ShardedParameters::ShardedParameters(Backend& backend, const TensorView& params, ShardRange shard,
                                     const ParameterUnits& units, Communicator& dp)
    : backend_(backend),
      params_(params),
      shard_(shard),
      units_(units.ranges),
      dp_(dp),
      layout_(params.numel, dtype_size(params.dtype), backend.page_bytes(), shard, units),
      refs_(layout_.pages, 0),
      state_(units_.size(), State::kWhole),
      work_(units_.size()),
      launched_(units_.size(), 0.0) {
  for (size_t i = 0; i < units_.size(); ++i)
    FEAST_CHECK(units_[i].begin < units_[i].end && units_[i].begin == (i == 0 ? 0 : units_[i - 1].end),
                "ZeRO 3: the stage's parameter units are not neighbouring ranges in order");
  FEAST_CHECK(!units_.empty() && units_.back().end == params.numel,
              "ZeRO 3: the stage's parameter units do not cover its parameters");
  // Every unit starts whole (the buffer was just written) and held by nobody: release_all
  // gives their pages back.
  held_pages_ = layout_.pages;
  keep_whole_ = true;
}

WorkHandle ShardedParameters::gather(FlatRange r) {
  // Every rank's part of the range lands where its shard lies; this rank's is already there
  // (the communicator sends it in place).
  const std::vector<size_t> counts = shard_counts(params_.numel, dp_.size(), r.begin, r.end);
  const size_t mine = std::clamp(shard_.begin, r.begin, r.end);
  const size_t e = dtype_size(params_.dtype);
  char* base = static_cast<char*>(params_.data);
  return dp_.allgather(base + mine * e, base + r.begin * e, counts, params_.dtype);
}

void ShardedParameters::claim_pages(int unit, int delta) {
  // The unit's pages that go from no holder to one (delta +1) or from one to none (delta -1)
  // are committed or given back, each run of neighbouring pages in one call.
  const auto [first, end] = layout_.unit_pages[size_t(unit)];
  char* base = static_cast<char*>(params_.data);
  size_t run = end;  // first page of the current run of such pages
  auto flush = [&](size_t p) {
    if (run < p) {
      const TensorView pages{base + run * layout_.page_bytes, DType::kFloat32, params_.device,
                             (p - run) * layout_.page_bytes / 4};
      delta > 0 ? backend_.commit(pages) : backend_.decommit(pages);
    }
    run = end;
  };
  for (size_t p = first; p < end; ++p) {
    if (layout_.pinned[p] || (refs_[p] += delta) != (delta > 0 ? 1 : 0)) {
      flush(p);
      continue;
    }
    held_pages_ = delta > 0 ? held_pages_ + 1 : held_pages_ - 1;
    if (run == end) run = p;
  }
  flush(end);
  peak_pages_ = std::max(peak_pages_, held_pages_);
}

void ShardedParameters::start(int unit) {
  claim_pages(unit, +1);
  launched_[size_t(unit)] = step_clock_.seconds();
  work_[size_t(unit)] = gather(units_[size_t(unit)]);
  state_[size_t(unit)] = State::kGathering;
}

void ShardedParameters::finish(int unit) {
  Timer wait;
  work_[size_t(unit)]->wait();
  work_[size_t(unit)].reset();
  exposed_ += wait.seconds();
  spans_.push_back({launched_[size_t(unit)], step_clock_.seconds()});
  state_[size_t(unit)] = State::kWhole;
}

void ShardedParameters::acquire(int unit) {
  if (state_[size_t(unit)] == State::kReleased) start(unit);
  if (state_[size_t(unit)] == State::kGathering) finish(unit);
}

void ShardedParameters::prefetch(int unit) {
  if (state_[size_t(unit)] == State::kReleased) start(unit);
}

void ShardedParameters::release(int unit) {
  if (keep_whole_) return;
  if (state_[size_t(unit)] == State::kGathering) finish(unit);
  if (state_[size_t(unit)] == State::kReleased) return;
  claim_pages(unit, -1);
  state_[size_t(unit)] = State::kReleased;
}

void ShardedParameters::release_all() {
  if (keep_whole_) {
    // Whole since construction or gather_all: every page is held, and each unit claims its own
    // (a page two units share is claimed twice), so releasing them all leaves the pinned ones.
    keep_whole_ = false;
    held_pages_ = layout_.pages;
    std::fill(refs_.begin(), refs_.end(), 0);
    for (const auto& [first, end] : layout_.unit_pages)
      for (size_t p = first; p < end; ++p) ++refs_[p];
    for (size_t u = 0; u < units_.size(); ++u) state_[u] = State::kWhole;
  }
  for (size_t u = 0; u < units_.size(); ++u) release(int(u));
  peak_pages_ = held_pages_;
}

void ShardedParameters::gather_all() {
  // Whole for what reads the weights after training: not a step's peak.
  const size_t steps_peak = peak_pages_;
  for (size_t u = 0; u < units_.size(); ++u) prefetch(int(u));
  for (size_t u = 0; u < units_.size(); ++u) acquire(int(u));
  keep_whole_ = true;
  peak_pages_ = steps_peak;
}

void ShardedParameters::hold_all() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (state_[u] == State::kGathering) finish(int(u));
    if (state_[u] == State::kReleased) {
      claim_pages(int(u), +1);
      state_[u] = State::kWhole;
    }
  }
  keep_whole_ = true;
}

void ShardedParameters::begin_step() {
  step_clock_ = Timer();
  spans_.clear();
  exposed_ = 0;
}

ReductionTimes ShardedParameters::gather_times() const { return {covered_seconds(spans_), exposed_}; }

}  // namespace feast
