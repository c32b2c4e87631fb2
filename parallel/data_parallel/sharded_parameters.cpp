#include "parallel/data_parallel/sharded_parameters.h"

#include <algorithm>

#include "core/error.h"

namespace feast {

std::vector<FlatRange> whole_ranges(size_t total, const std::vector<FlatRange>& units) {
  std::vector<FlatRange> out;
  size_t at = 0;
  for (const FlatRange& u : units) {
    if (u.begin > at) out.push_back({at, u.begin});
    at = u.end;
  }
  if (at < total) out.push_back({at, total});
  return out;
}

ShardedPages::ShardedPages(size_t total, size_t element_bytes, size_t page, ShardRange shard,
                           const std::vector<FlatRange>& units)
    : page_bytes(page) {
  const size_t bytes = total * element_bytes;
  if (page == 0) {  // nothing can be given back: one page, the whole buffer, always held
    gives_back = false;
    pages = 1;
    pinned = {true};
    unit_pages.assign(units.size(), {0, 0});
    page_bytes = bytes;
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
  for (const FlatRange& r : whole_ranges(total, units)) pin(r.begin, r.end);
  for (const FlatRange& u : units) unit_pages.push_back({first_page(u.begin), end_page(u.end)});
}

size_t ShardedPages::pinned_bytes() const {
  return size_t(std::count(pinned.begin(), pinned.end(), true)) * page_bytes;
}

size_t ShardedPages::working_set_bytes() const {
  size_t most = 0;
  for (size_t i = 0; i < unit_pages.size(); ++i) {
    const size_t j = std::min(i + 1, unit_pages.size() - 1);
    const size_t first = std::min(unit_pages[i].first, unit_pages[j].first);
    const size_t end = std::max(unit_pages[i].second, unit_pages[j].second);
    size_t extra = 0;
    for (size_t p = first; p < end; ++p) extra += pinned[p] ? 0 : 1;
    most = std::max(most, extra);
  }
  return pinned_bytes() + most * page_bytes;
}

ShardedParameters::ShardedParameters(Backend& backend, const TensorView& params, ShardRange shard,
                                     std::vector<FlatRange> units, Communicator& dp)
    : backend_(backend),
      params_(params),
      shard_(shard),
      units_(std::move(units)),
      dp_(dp),
      layout_(params.numel, dtype_size(params.dtype), backend.page_bytes(), shard, units_),
      refs_(layout_.pages, 0),
      state_(units_.size(), State::kWhole),
      work_(units_.size()),
      launched_(units_.size(), 0.0) {
  for (size_t i = 0; i < units_.size(); ++i)
    FEAST_CHECK(units_[i].begin < units_[i].end && units_[i].end <= params.numel &&
                    (i == 0 || units_[i - 1].end <= units_[i].begin),
                "ZeRO 3: the stage's parameter units are not disjoint ranges in order");
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

void ShardedParameters::refresh_whole_ranges() {
  for (const FlatRange& r : whole_ranges(params_.numel, units_)) {
    Timer wait;
    gather(r)->wait();
    exposed_ += wait.seconds();
  }
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
