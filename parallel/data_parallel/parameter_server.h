// Data-parallel training through a parameter server (parallel.dp_sync = "parameter-server"):
// the data-parallel ranks are also the servers, rank r serving shard r of the stage's flat
// buffer (the same shards as ZeRO, so a checkpoint's owner of an element is its server) and
// keeping the optimizer state of that shard only. Each step every worker pushes its gradient of
// shard r to server r with point-to-point messages, server r sums the pushes (its own first,
// then the others in rank order, float32), the optimizer updates shard r on its server, and
// every worker pulls shard r's new weights back from server r. This is the textbook traffic
// pattern: server r's link carries (dp - 1) pushes and pulls of its shard, where a ring
// all-reduce spreads the same sum over every link.
//
// Sparse embedding (parallel.ps_sparse_embedding, an untied model): the token embedding's rows
// move only where a batch reads them. At the start of a step each worker asks the servers for
// the rows its own batch reads (row indices) and pulls just those; after the backward it pushes
// the gradients of the same rows (every other row's gradient is exactly zero); after the update
// it pulls the rest of the model densely. Rows it did not pull are stale in its copy but never
// read by its forward; pull_all_rows() makes the copy whole before anything else reads it.
// Legend: V rows of this rank's vocabulary slice, C embedding width.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "backend/backend.h"
#include "model/pipeline_stage.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/zero_shard.h"

namespace feast {

// Where the token embedding (V, C) lies in a stage's flat buffer, for the sparse server.
struct EmbeddingRows {
  size_t offset = 0;        // flat offset of local row 0
  int64_t rows = 0;         // V: local rows (this tensor-parallel rank's slice of the padded vocabulary)
  int64_t width = 0;        // C: elements per row
  int64_t first_token = 0;  // the token id of local row 0
};

// Bytes one rank moved as a worker in one step: what it sent to other servers and received
// from them (its own shard never crosses a link).
struct DpTraffic {
  double push_bytes = 0;     // gradients sent to the servers (sparse: only the rows its batch read)
  double pull_bytes = 0;     // weights received from the servers, plus the row indices it asked for
  double refresh_bytes = 0;  // sparse: whole-embedding pulls before an evaluation or at the end
};

class ParameterServer final : public DataParallelSync {
 public:
  // ranges, bucket_elems, embedding: as GradientSync's (the local gradient and the tied
  // embedding's sum over the embedding group are GradientSync's, with no data-parallel group);
  // dp: the data-parallel group (null when dp = 1); sparse: the token embedding's rows when
  // this stage holds an untied one and ps_sparse_embedding is set. The sparse path packs rows
  // in host memory: the parameters must be host memory then.
  ParameterServer(Backend& backend, size_t total, const std::vector<GradRange>& ranges, size_t bucket_elems,
                  Communicator* dp, Communicator* embedding, std::optional<EmbeddingRows> sparse);

  GradientSync& sink() override { return local_; }
  void begin_step() override;
  // The local gradient (summed over the embedding group first) is pushed: each server ends
  // with the sum of its shard over every worker. Collective over dp.
  void finish_step() override;
  // Every worker pulls each server's updated shard (sparse: less the embedding rows, which the
  // next step pulls as its batch needs them). Collective over dp.
  void share_update(const TensorView& params) override;

  ShardRange shard() const override { return shard_; }
  TensorView shard_grads() const override { return local_.optimizer_grads().slice(shard_.begin, shard_.size()); }
  ShardRange optimizer_range() const override { return shard_; }
  TensorView optimizer_grads() const override { return shard_grads(); }
  size_t gradient_bytes() const override { return local_.gradient_bytes(); }
  size_t communication_bytes() const override { return local_.communication_bytes() + scratch_.bytes(); }
  void progress() override { local_.progress(); }
  double take_wait_seconds() override { return local_.take_wait_seconds(); }
  ReductionTimes reduction_times() const override { return local_.reduction_times(); }
  std::string describe() const override { return sparse_ ? "parameter server, sparse embedding" : "parameter server"; }

  // Sparse only (a no-op otherwise), after begin_step and before the forward: `tokens` are
  // every token this worker's batch of the step reads; the embedding rows they name are pulled
  // from their servers into `params`. Collective over dp.
  void pull_rows(std::span<const int32_t> tokens, const TensorView& params);
  // Sparse only: pulls the embedding rows this worker's copy lacks, so that all of `params` is
  // current (before an evaluation, at the end of training). Collective over dp; a no-op when
  // nothing is stale.
  void pull_all_rows(const TensorView& params);
  bool sparse() const { return sparse_.has_value(); }

  // This rank's traffic in the step since begin_step.
  const DpTraffic& traffic_last_step() const { return traffic_; }
  // What a dense server's step moves for this rank (bytes of float32 gradients pushed, of
  // parameters of `param_dtype` pulled).
  DpTraffic dense_traffic(DType param_dtype) const;

 private:
  using Segments = std::vector<FlatRange>;
  // The rows of sorted `rows` that have elements in server s's shard.
  std::span<const int32_t> rows_in_shard(int s, const std::vector<int32_t>& rows) const;
  // The pieces of server s's shard that travel: `dense` the shard less the embedding (all of it
  // without a sparse embedding); `rows` (sorted local rows) those rows' parts in the shard;
  // `all_rows` the embedding's whole part in the shard.
  Segments segments(int s, bool dense, const std::vector<int32_t>* rows, bool all_rows = false) const;
  // One round of the pattern: this rank sends to every other rank p the pieces send_segs(p) of
  // `from`, then receives from every other rank, in rank order, the pieces recv_segs(p) and adds
  // them into `into` (accumulate) or copies them there. Returns the bytes sent and received.
  struct Moved {
    double sent = 0, received = 0;
  };
  template <typename SendSegs, typename RecvSegs>
  Moved exchange(const TensorView& from, const TensorView& into, SendSegs send_segs, RecvSegs recv_segs,
                 bool accumulate, int tag);

  Backend& backend_;
  size_t total_;
  GradientSync local_;  // this worker's own gradient of the whole stage
  Communicator* dp_;
  int dp_size_ = 1, dp_rank_ = 0;
  ShardRange shard_;
  std::optional<EmbeddingRows> sparse_;
  Tensor scratch_;  // a received push or pull: at most the largest shard
  std::vector<int32_t> rows_;                   // sparse: the rows this worker's step reads
  std::vector<std::vector<int32_t>> requested_;  // sparse, as a server: each worker's rows of this shard
  bool rows_pulled_ = false;  // sparse: pull_rows ran in this step
  bool stale_ = false;        // sparse: some embedding rows of this worker's copy are out of date
  DpTraffic traffic_;
};

}  // namespace feast
