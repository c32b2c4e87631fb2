// Maps counter-based random draws (training) or a running window index (validation) onto
// (shard, offset) positions and copies the windows out of the memory-mapped shards.
#include "data/sampler.h"

#include <algorithm>
#include <optional>
#include <span>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"

namespace feast {

namespace {

// Stream tag of the training sampler ("TRNSAMPL"): keeps its draws independent of any other
// consumer of the same seed, such as parameter initialisation.
constexpr uint64_t kTrainSamplerStream = 0x54524E53414D504Cull;

// Prefix sums of per-shard counts; throws when the total is zero because every shard is
// shorter than one window.
std::vector<int64_t> prefix_sums(const Dataset& data, int seq_len, const char* who,
                                 int64_t (*per_shard)(int64_t length, int seq_len)) {
  if (seq_len < 1) {
    throw DataError(std::string(who) + ": seq_len must be >= 1, got " + std::to_string(seq_len));
  }
  std::vector<int64_t> sums(data.num_shards() + 1, 0);
  size_t longest = 0;
  for (size_t i = 0; i < data.num_shards(); ++i) {
    sums[i + 1] = sums[i] + per_shard(data.shard(i).size(), seq_len);
    if (data.shard(i).size() > data.shard(longest).size()) longest = i;
  }
  if (sums.back() == 0) {
    std::ostringstream os;
    os << who << ": no shard of '" << data.pattern() << "' holds seq_len + 1 = " << seq_len + 1
       << " tokens; the longest, " << data.shard(longest).path() << ", has "
       << data.shard(longest).size() << ": prepare more data or lower seq_len";
    throw DataError(os.str());
  }
  return sums;
}

// (shard, offset in that shard's index space) of flat index i.
std::pair<size_t, int64_t> locate(const std::vector<int64_t>& sums, int64_t i) {
  const auto it = std::upper_bound(sums.begin(), sums.end(), i);
  const size_t shard = static_cast<size_t>(it - sums.begin()) - 1;
  return {shard, i - sums[shard]};
}

// The recorded document starts of tokens [start, start + T] (packed data), or empty.
std::span<const uint8_t> recorded_starts(const Dataset& data, size_t shard, int64_t start, int seq_len) {
  return data.has_document_starts() ? data.document_starts(shard).window(start, seq_len + 1)
                                    : std::span<const uint8_t>{};
}

// inputs = tokens [start, start + T), targets = tokens [start + 1, start + T + 1), read once
// (so the vocabulary check sees each id once), then targets whose mask entry is 0 set to -1.
// Under document masks (document_eos >= 0) token start + i (0 < i <= T) begins a document where
// the data records one (packed data), or else after an end-of-text token; a target that begins a
// document is -1, and positions (when given) count each token's place in its document.
void copy_window(const Dataset& data, size_t shard, int64_t start, int seq_len, int32_t document_eos,
                 int32_t* inputs, int32_t* targets, int32_t* positions) {
  data.read(shard, start, seq_len, inputs);
  std::copy(inputs + 1, inputs + seq_len, targets);
  data.read(shard, start + seq_len, 1, targets + seq_len - 1);
  if (document_eos >= 0) {
    const std::span<const uint8_t> starts = recorded_starts(data, shard, start, seq_len);
    auto begins = [&](int i) { return starts.empty() ? inputs[i - 1] == document_eos : starts[size_t(i)] != 0; };
    for (int i = 0; i < seq_len; ++i) {
      if (positions) positions[i] = i == 0 || begins(i) ? 0 : positions[i - 1] + 1;
      if (begins(i + 1)) targets[i] = -1;
    }
  }
  if (!data.has_loss_mask()) return;
  const std::span<const uint8_t> mask = data.loss_mask(shard).window(start + 1, seq_len);
  for (int i = 0; i < seq_len; ++i)
    if (mask[size_t(i)] == 0) targets[i] = -1;
}

// The counted targets of a window. Recorded document starts and masks are bytes to count; the
// end-of-text rule needs the window's tokens.
int64_t counted_in_window(const Dataset& data, size_t shard, int64_t start, int seq_len, int32_t document_eos) {
  if (document_eos < 0)
    return data.has_loss_mask() ? data.loss_mask(shard).counted(start + 1, seq_len) : seq_len;
  if (data.has_document_starts()) {
    const std::span<const uint8_t> starts = recorded_starts(data, shard, start, seq_len);
    const std::span<const uint8_t> mask =
        data.has_loss_mask() ? data.loss_mask(shard).window(start + 1, seq_len) : std::span<const uint8_t>{};
    int64_t counted = 0;
    for (int i = 0; i < seq_len; ++i) counted += starts[size_t(i) + 1] == 0 && (mask.empty() || mask[size_t(i)] != 0);
    return counted;
  }
  std::vector<int32_t> inputs(static_cast<size_t>(seq_len)), targets(inputs.size());
  copy_window(data, shard, start, seq_len, document_eos, inputs.data(), targets.data(), nullptr);
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

// The distance between window starts of packed data (its window), checked against seq_len.
int64_t packed_stride(const Dataset& data, int seq_len, const char* who) {
  const std::optional<int64_t> window = data.packed_window();
  if (!window) return 0;
  if (*window != int64_t{seq_len} + 1) {
    std::ostringstream os;
    os << who << ": '" << data.pattern() << "' was packed into windows of " << *window << " tokens (seq_len "
       << *window - 1 << ", " << data.meta_path() << "), but training.seq_len is " << seq_len
       << ": set training.seq_len = " << *window - 1 << ", or pack the data again with prepare-data --pack --seq-len "
       << seq_len;
    throw DataError(os.str());
  }
  return *window;
}

}  // namespace

TrainSampler::TrainSampler(const Dataset& dataset, uint64_t seed, int seq_len, int32_t document_eos)
    : dataset_(dataset), seed_(seed), seq_len_(seq_len), document_eos_(document_eos) {
  const int64_t packed = seq_len >= 1 ? packed_stride(dataset, seq_len, "TrainSampler") : 0;
  stride_ = packed ? packed : 1;
  first_start_ = prefix_sums(dataset, seq_len, "TrainSampler", packed ? +[](int64_t length, int t) {
    return length / (int64_t{t} + 1);
  } : +[](int64_t length, int t) { return std::max<int64_t>(0, length - t); });
  num_starts_ = first_start_.back();
}

void TrainSampler::fill(int64_t step, int64_t first_sequence, int count, int32_t* inputs, int32_t* targets,
                        int32_t* positions) const {
  FEAST_CHECK(step >= 0 && first_sequence >= 0 && count >= 0,
              "TrainSampler::fill: step " << step << ", first_sequence " << first_sequence
                                          << ", count " << count << " must be >= 0");
  for (int r = 0; r < count; ++r) {
    const auto [shard, start] = window(step, first_sequence + r);
    const size_t row = static_cast<size_t>(r) * static_cast<size_t>(seq_len_);
    copy_window(dataset_, shard, start, seq_len_, document_eos_, inputs + row, targets + row,
                positions ? positions + row : nullptr);
  }
}

int64_t TrainSampler::counted_targets(int64_t step, int64_t first_sequence, int count) const {
  FEAST_CHECK(step >= 0 && first_sequence >= 0 && count >= 0,
              "TrainSampler::counted_targets: step " << step << ", first_sequence " << first_sequence
                                                     << ", count " << count << " must be >= 0");
  if (!dataset_.has_loss_mask() && document_eos_ < 0) return int64_t{count} * seq_len_;
  int64_t total = 0;
  for (int r = 0; r < count; ++r) {
    const auto [shard, start] = window(step, first_sequence + r);
    total += counted_in_window(dataset_, shard, start, seq_len_, document_eos_);
  }
  return total;
}

std::pair<size_t, int64_t> TrainSampler::window(int64_t step, int64_t j) const {
  const uint64_t stream = hash_combine(static_cast<uint64_t>(step), kTrainSamplerStream);
  const auto flat = static_cast<int64_t>(
      uniform_index(seed_, stream, static_cast<uint64_t>(j), static_cast<uint64_t>(num_starts_)));
  const auto [shard, k] = locate(first_start_, flat);
  return {shard, k * stride_};
}

ValSampler::ValSampler(const Dataset& dataset, int seq_len, int32_t document_eos)
    : dataset_(dataset), seq_len_(seq_len), document_eos_(document_eos) {
  const int64_t packed = seq_len >= 1 ? packed_stride(dataset, seq_len, "ValSampler") : 0;
  stride_ = packed ? packed : seq_len;
  first_window_ = prefix_sums(dataset, seq_len, "ValSampler", packed ? +[](int64_t length, int t) {
    return length / (int64_t{t} + 1);
  } : +[](int64_t length, int t) { return length > t ? (length - 1) / t : 0; });
  num_windows_ = first_window_.back();
}

void ValSampler::fill(int64_t first_window, int count, int32_t* inputs, int32_t* targets, int32_t* positions) const {
  FEAST_CHECK(first_window >= 0 && count >= 0,
              "ValSampler::fill: first_window " << first_window << " and count " << count << " must be >= 0");
  for (int r = 0; r < count; ++r) {
    const auto [shard, start] = window(first_window + r);
    const size_t row = static_cast<size_t>(r) * static_cast<size_t>(seq_len_);
    copy_window(dataset_, shard, start, seq_len_, document_eos_, inputs + row, targets + row,
                positions ? positions + row : nullptr);
  }
}

int64_t ValSampler::counted_targets(int64_t first_window, int count) const {
  FEAST_CHECK(first_window >= 0 && count >= 0, "ValSampler::counted_targets: first_window "
                                                   << first_window << " and count " << count << " must be >= 0");
  if (!dataset_.has_loss_mask() && document_eos_ < 0) return int64_t{count} * seq_len_;
  int64_t total = 0;
  for (int r = 0; r < count; ++r) {
    const auto [shard, start] = window(first_window + r);
    total += counted_in_window(dataset_, shard, start, seq_len_, document_eos_);
  }
  return total;
}

std::pair<size_t, int64_t> ValSampler::window(int64_t w) const {
  const auto [shard, k] = locate(first_window_, w % num_windows_);
  return {shard, k * stride_};
}

}  // namespace feast
