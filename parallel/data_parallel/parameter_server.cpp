#include "parallel/data_parallel/parameter_server.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace feast {
namespace {

// Message tags on the data-parallel group, one per kind of message, so that a round's messages
// never match another round's.
constexpr int kTagAskCount = 7101;  // sparse: how many rows a worker asks a server for
constexpr int kTagAskRows = 7102;   // sparse: which rows
constexpr int kTagRows = 7103;      // sparse: the rows' weights, server to worker
constexpr int kTagPush = 7104;      // gradients, worker to server
constexpr int kTagPull = 7105;      // updated weights, server to worker
constexpr int kTagRefresh = 7106;   // sparse: the whole embedding's part of a shard

}  // namespace

ParameterServer::ParameterServer(Backend& backend, size_t total, const std::vector<GradRange>& ranges,
                                 size_t bucket_elems, Communicator* dp, Communicator* embedding,
                                 std::optional<EmbeddingRows> sparse)
    : backend_(backend),
      total_(total),
      // The worker's own gradient, and the tied embedding's sum over the embedding group, are
      // GradientSync's with no data-parallel group: the servers do the data-parallel part.
      local_(backend, total, ranges, /*zero_stage=*/0, bucket_elems, /*dp=*/nullptr, embedding),
      dp_(dp),
      sparse_(sparse) {
  if (dp_) {
    dp_size_ = dp_->size();
    dp_rank_ = dp_->rank();
  }
  shard_ = shard_range(total, dp_size_, dp_rank_);
  if (sparse_)
    FEAST_CHECK(sparse_->rows > 0 && sparse_->width > 0 &&
                    sparse_->offset + size_t(sparse_->rows * sparse_->width) <= total,
                "the sparse embedding's " << sparse_->rows << " x " << sparse_->width << " rows at flat offset "
                                          << sparse_->offset << " do not fit the stage's " << total << " elements");
  // A received push or a packed pull: at most one shard (shard 0 is the largest).
  if (dp_size_ > 1) scratch_ = backend.allocate(DType::kFloat32, shard_range(total, dp_size_, 0).size());
  requested_.resize(size_t(dp_size_));
}

std::span<const int32_t> ParameterServer::rows_in_shard(int s, const std::vector<int32_t>& rows) const {
  const ShardRange sh = shard_range(total_, dp_size_, s);
  const size_t e0 = sparse_->offset, w = size_t(sparse_->width), e1 = e0 + size_t(sparse_->rows) * w;
  const size_t lo = std::max(sh.begin, e0), hi = std::min(sh.end, e1);
  if (lo >= hi) return {};
  // Rows [first, last) have elements in [lo, hi); the last may be cut by the shard's end.
  const auto first = int32_t((lo - e0) / w), last = int32_t((hi - e0 + w - 1) / w);
  const auto b = std::lower_bound(rows.begin(), rows.end(), first);
  const auto e = std::lower_bound(b, rows.end(), last);
  return {rows.data() + (b - rows.begin()), size_t(e - b)};
}

ParameterServer::Segments ParameterServer::segments(int s, bool dense, const std::vector<int32_t>* rows,
                                                    bool all_rows) const {
  const ShardRange sh = shard_range(total_, dp_size_, s);
  Segments out;
  // Adjacent pieces merge, so consecutive rows travel as one piece and a dense shard as one.
  const auto put = [&](size_t b, size_t e) {
    if (b >= e) return;
    if (!out.empty() && out.back().end == b) out.back().end = e;
    else out.push_back({b, e});
  };
  if (!sparse_) {
    if (dense) put(sh.begin, sh.end);
    return out;
  }
  const size_t e0 = sparse_->offset, w = size_t(sparse_->width), e1 = e0 + size_t(sparse_->rows) * w;
  if (dense) put(sh.begin, std::min(sh.end, e0));
  const size_t lo = std::max(sh.begin, e0), hi = std::min(sh.end, e1);
  if (all_rows) {
    put(lo, hi);
  } else if (rows) {
    for (const int32_t r : rows_in_shard(s, *rows))
      put(std::max(lo, e0 + size_t(r) * w), std::min(hi, e0 + size_t(r + 1) * w));
  }
  if (dense) put(std::max(sh.begin, e1), sh.end);
  return out;
}

template <typename SendSegs, typename RecvSegs>
ParameterServer::Moved ParameterServer::exchange(const TensorView& from, const TensorView& into, SendSegs send_segs,
                                                 RecvSegs recv_segs, bool accumulate, int tag) {
  Moved moved;
  if (dp_size_ == 1) return moved;
  const size_t elem = dtype_size(from.dtype);
  const auto count = [](const Segments& segs) {
    size_t n = 0;
    for (const FlatRange& r : segs) n += r.size();
    return n;
  };
  // Every send is posted before any receive, so no rank waits on a peer that is itself waiting.
  std::vector<WorkHandle> sends;
  std::vector<std::vector<std::byte>> packed;  // kept until the sends complete
  for (int p = 0; p < dp_size_; ++p) {
    if (p == dp_rank_) continue;
    const Segments segs = send_segs(p);
    const size_t n = count(segs);
    const void* data = segs.size() == 1 ? from.slice(segs[0].begin, n).data : from.data;
    if (segs.size() > 1) {
      FEAST_CHECK(from.device == kCpu, "the sparse parameter server packs embedding rows in host memory");
      std::vector<std::byte>& buf = packed.emplace_back(n * elem);
      size_t at = 0;
      for (const FlatRange& r : segs) {
        std::memcpy(buf.data() + at * elem, static_cast<const std::byte*>(from.data) + r.begin * elem, r.size() * elem);
        at += r.size();
      }
      data = buf.data();
    }
    sends.push_back(dp_->send(data, n, from.dtype, p, tag));
    moved.sent += double(n * elem);
  }
  // Receives in rank order: a server adds its workers' pushes in the same order every step.
  for (int p = 0; p < dp_size_; ++p) {
    if (p == dp_rank_) continue;
    const Segments segs = recv_segs(p);
    const size_t n = count(segs);
    moved.received += double(n * elem);
    if (!accumulate && segs.size() == 1) {
      dp_->recv(into.slice(segs[0].begin, n).data, n, into.dtype, p, tag)->wait();
      continue;
    }
    FEAST_CHECK(n * elem <= scratch_.bytes(), "a parameter-server message of " << n << " elements exceeds a shard");
    const TensorView buf{scratch_.data(), into.dtype, scratch_.device(), n};
    dp_->recv(buf.data, n, into.dtype, p, tag)->wait();
    size_t at = 0;
    for (const FlatRange& r : segs) {
      const TensorView dst = into.slice(r.begin, r.size()), src = buf.slice(at, r.size());
      if (accumulate) backend_.add(dst, dst, src, r.size());
      else backend_.copy(dst, src);
      at += r.size();
    }
  }
  for (WorkHandle& s : sends) s->wait();
  return moved;
}

void ParameterServer::begin_step() {
  local_.begin_step();
  traffic_ = {};
  rows_pulled_ = false;
}

void ParameterServer::pull_rows(std::span<const int32_t> tokens, const TensorView& params) {
  if (!sparse_) return;
  std::vector<char> read(size_t(sparse_->rows), 0);
  for (const int32_t t : tokens) {
    const int64_t r = int64_t{t} - sparse_->first_token;
    if (r >= 0 && r < sparse_->rows) read[size_t(r)] = 1;
  }
  rows_.clear();
  for (size_t r = 0; r < read.size(); ++r)
    if (read[r]) rows_.push_back(int32_t(r));
  rows_pulled_ = true;
  if (dp_size_ == 1) return;

  // The requests: to each server, how many of its rows this worker reads, then which.
  std::vector<int64_t> counts(size_t(dp_size_), 0);
  std::vector<WorkHandle> sends;
  for (int s = 0; s < dp_size_; ++s) {
    if (s == dp_rank_) continue;
    const std::span<const int32_t> ask = rows_in_shard(s, rows_);
    counts[size_t(s)] = int64_t(ask.size());
    sends.push_back(dp_->send(&counts[size_t(s)], 1, DType::kInt64, s, kTagAskCount));
    sends.push_back(dp_->send(ask.data(), ask.size(), DType::kInt32, s, kTagAskRows));
    traffic_.pull_bytes += double(sizeof(int64_t) + ask.size() * sizeof(int32_t));
  }
  for (int w = 0; w < dp_size_; ++w) {
    if (w == dp_rank_) continue;
    int64_t n = 0;
    dp_->recv(&n, 1, DType::kInt64, w, kTagAskCount)->wait();
    std::vector<int32_t>& rows = requested_[size_t(w)];
    rows.resize(size_t(n));
    dp_->recv(rows.data(), rows.size(), DType::kInt32, w, kTagAskRows)->wait();
  }
  for (WorkHandle& s : sends) s->wait();
  // The replies: each server's current weights of the rows asked for.
  const Moved m = exchange(
      params, params, [&](int w) { return segments(dp_rank_, false, &requested_[size_t(w)]); },
      [&](int s) { return segments(s, false, &rows_); }, /*accumulate=*/false, kTagRows);
  traffic_.pull_bytes += m.received;
}

void ParameterServer::finish_step() {
  local_.finish_step();
  if (dp_size_ == 1) return;
  FEAST_CHECK(!sparse_ || rows_pulled_, "sparse parameter server: pull_rows must run before every step's forward");
  // Push: the gradient of each server's shard (sparse: the embedding rows this worker read;
  // the gradient of every other row is exactly zero) to that server, which adds them to its own.
  const TensorView grads = local_.optimizer_grads();
  const Moved m = exchange(
      grads, grads, [&](int s) { return segments(s, true, &rows_); },
      [&](int w) { return segments(dp_rank_, true, &requested_[size_t(w)]); }, /*accumulate=*/true, kTagPush);
  traffic_.push_bytes += m.sent;
}

void ParameterServer::share_update(const TensorView& params) {
  if (dp_size_ == 1) return;
  const Moved m = exchange(
      params, params, [&](int) { return segments(dp_rank_, true, nullptr); },
      [&](int s) { return segments(s, true, nullptr); }, /*accumulate=*/false, kTagPull);
  traffic_.pull_bytes += m.received;
  // The embedding rows of other shards changed on their servers (every row: weight decay and
  // the moments move rows no batch read); this copy catches up with those it reads.
  if (sparse_) stale_ = true;
}

void ParameterServer::pull_all_rows(const TensorView& params) {
  if (!sparse_ || !stale_ || dp_size_ == 1) return;
  const Moved m = exchange(
      params, params, [&](int) { return segments(dp_rank_, false, nullptr, true); },
      [&](int s) { return segments(s, false, nullptr, true); }, /*accumulate=*/false, kTagRefresh);
  traffic_.refresh_bytes += m.received;
  stale_ = false;
}

DpTraffic ParameterServer::dense_traffic(DType param_dtype) const {
  DpTraffic t;
  for (int s = 0; s < dp_size_; ++s) {
    if (s == dp_rank_) continue;
    const double n = double(shard_range(total_, dp_size_, s).size());
    t.push_bytes += n * sizeof(float);
    t.pull_bytes += n * double(dtype_size(param_dtype));
  }
  return t;
}

}  // namespace feast
