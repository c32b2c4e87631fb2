#include "data/packing.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace feast::prepare_data {
namespace {

// The room left in each of n windows, as a tree of maxima (a leaf per window), so that the first
// window with room for an item is found in O(log n).
class RoomTree {
 public:
  RoomTree(size_t n, int64_t capacity) : leaves_(1) {
    while (leaves_ < n) leaves_ *= 2;
    max_.assign(2 * leaves_, 0);
    for (size_t i = 0; i < n; ++i) max_[leaves_ + i] = capacity;
    for (size_t i = leaves_ - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }
  // The first window with at least `need` room (one exists: n windows for n items).
  size_t first_with(int64_t need) const {
    size_t i = 1;
    while (i < leaves_) i = max_[2 * i] >= need ? 2 * i : 2 * i + 1;
    return i - leaves_;
  }
  void take(size_t window, int64_t amount) {
    size_t i = leaves_ + window;
    max_[i] -= amount;
    for (i /= 2; i >= 1; i /= 2) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }

 private:
  size_t leaves_;
  std::vector<int64_t> max_;
};

}  // namespace

std::vector<std::vector<size_t>> first_fit_decreasing(const std::vector<int64_t>& lengths, int64_t capacity) {
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  RoomTree room(lengths.size(), capacity);
  std::vector<std::vector<size_t>> windows;
  for (const size_t item : order) {
    FEAST_CHECK(lengths[item] >= 1 && lengths[item] <= capacity,
                "first_fit_decreasing: item " << item << " of length " << lengths[item] << " in windows of "
                                              << capacity);
    const size_t w = room.first_with(lengths[item]);
    room.take(w, lengths[item]);
    if (w >= windows.size()) windows.resize(w + 1);
    windows[w].push_back(item);
  }
  return windows;
}

void DocumentPacker::append(std::span<const int32_t> tokens, std::span<const uint8_t> counted) {
  if (tokens.empty()) return;
  starts_.push_back(size());
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  if (counted.empty())
    counted_.insert(counted_.end(), tokens.size(), uint8_t{1});
  else
    counted_.insert(counted_.end(), counted.begin(), counted.end());
}

PackedSplit DocumentPacker::write(ShardStream& stream, size_t first, size_t last, int32_t pad,
                                  std::vector<uint8_t>& starts) const {
  PackedSplit out;
  // The pieces to place: [begin, begin + length) of the token buffer.
  std::vector<int64_t> begins, lengths;
  for (size_t d = first; d < last; ++d) {
    const int64_t begin = starts_[d], end = d + 1 < starts_.size() ? starts_[d + 1] : size();
    ++out.documents;
    if (end - begin > window_) {
      ++out.split_documents;
      out.pieces += (end - begin + window_ - 1) / window_;
    }
    for (int64_t at = begin; at < end; at += window_) {
      begins.push_back(at);
      lengths.push_back(std::min(window_, end - at));
    }
  }
  const std::vector<int32_t> padding(static_cast<size_t>(window_), pad);
  const std::vector<uint8_t> not_counted(static_cast<size_t>(window_), 0);
  for (const std::vector<size_t>& items : first_fit_decreasing(lengths, window_)) {
    int64_t used = 0;
    for (const size_t i : items) {
      const auto at = static_cast<size_t>(begins[i]), n = static_cast<size_t>(lengths[i]);
      stream.append(std::span(tokens_).subspan(at, n), std::span(counted_).subspan(at, n));
      starts.push_back(1);
      starts.insert(starts.end(), n - 1, uint8_t{0});
      used += lengths[i];
    }
    const auto rest = static_cast<size_t>(window_ - used);
    if (rest > 0) {
      stream.append(std::span(padding).first(rest), std::span(not_counted).first(rest));
      starts.push_back(1);
      starts.insert(starts.end(), rest - 1, uint8_t{0});
    }
    out.padding_tokens += window_ - used;
    ++out.windows;
  }
  return out;
}

}  // namespace feast::prepare_data
