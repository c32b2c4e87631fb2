#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace feast {
namespace {

size_t product(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// Rows of each block of a row-split tensor (one block when the spec lists none).
std::vector<int64_t> row_blocks(const ParamSpec& s) {
  return s.blocks.empty() ? std::vector<int64_t>{s.shape[0]} : s.blocks;
}

int64_t columns(const ParamSpec& s) { return s.shape.size() > 1 ? s.shape[1] : 1; }

}  // namespace

bool Placement::on(const StageSpec& st) const {
  switch (kind) {
    case Kind::kFirstStage: return st.has_embedding;
    case Kind::kLastStage: return st.has_head;
    case Kind::kLayer: return st.holds_layer(layer);
  }
  return false;
}

ParamTable::ParamTable(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    ParamSpec& s = specs_[i];
    s.numel = product(s.shape);
    if (!s.blocks.empty())
      FEAST_CHECK(std::accumulate(s.blocks.begin(), s.blocks.end(), int64_t{0}) == s.shape[0],
                  s.name << ": its blocks do not add up to its " << s.shape[0] << " rows");
    if (s.tied_to >= 0) {
      FEAST_CHECK(size_t(s.tied_to) < i && specs_[size_t(s.tied_to)].tied_to < 0,
                  s.name << " is tied to a tensor that is not an earlier untied one");
      const ParamSpec& target = specs_[size_t(s.tied_to)];
      FEAST_CHECK(target.shape == s.shape && target.split == s.split && target.blocks == s.blocks,
                  s.name << " is tied to " << target.name << " but their shapes or splits differ");
      s.offset = target.offset;
      continue;
    }
    s.offset = total_;
    total_ += s.numel;
  }
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return s;
  throw Error("no parameter named '" + name + "' in the model's parameter table");
}

float initial_value(const ParamSpec& s, uint64_t seed, int64_t i) {
  if (s.init_std <= 0) return s.init_value;
  if (s.init_rows >= 0 && i >= s.init_rows * columns(s)) return 0.0f;  // vocabulary padding
  return static_cast<float>(s.init_std * normal_at(seed, hash_name(s.name), static_cast<uint64_t>(i)));
}

int64_t LocalParam::logical_index(int64_t i) const {
  const ParamSpec& s = *logical;
  if (tp == 1 || s.split == TpSplit::kReplicated) return i;
  const int64_t cols = columns(s);
  if (s.split == TpSplit::kInputCols) {
    const int64_t local_cols = cols / tp;
    return (i / local_cols) * cols + tp_rank * local_cols + i % local_cols;
  }
  // Row splits: the rank holds part tp_rank of every block, in block order.
  int64_t local_row = i / cols, block_start = 0;
  for (int64_t rows : row_blocks(s)) {
    const int64_t part = rows / tp;
    if (local_row < part) return (block_start + tp_rank * part + local_row) * cols + i % cols;
    local_row -= part;
    block_start += rows;
  }
  throw Error(s.name + ": local element " + std::to_string(i) + " is outside its tensor-parallel slice");
}

size_t LogicalSlice::numel() const { return product(count); }

std::vector<LogicalSlice> LocalParam::logical_slices(size_t begin, size_t end) const {
  FEAST_CHECK(begin <= end && end <= numel, "elements [" << begin << ", " << end << ") of " << spec->name);
  const ParamSpec& s = *logical;
  const bool matrix = s.shape.size() > 1;
  const int64_t cols = columns(s);
  // The local tensor as pieces, each a rectangle [row0, row0 + rows) x [col0, col0 + width) of
  // the logical tensor stored contiguously row by row.
  struct Piece {
    int64_t row0, rows, col0, width;
  };
  std::vector<Piece> pieces;
  if (tp == 1 || s.split == TpSplit::kReplicated) {
    pieces.push_back({0, s.shape[0], 0, cols});
  } else if (s.split == TpSplit::kInputCols) {
    pieces.push_back({0, s.shape[0], tp_rank * (cols / tp), cols / tp});
  } else {
    int64_t block_start = 0;
    for (int64_t rows : row_blocks(s)) {
      pieces.push_back({block_start + tp_rank * (rows / tp), rows / tp, 0, cols});
      block_start += rows;
    }
  }
  std::vector<LogicalSlice> out;
  auto emit = [&](int64_t row, int64_t rows, int64_t col, int64_t width, size_t local) {
    LogicalSlice sl;
    sl.start = matrix ? std::vector<int64_t>{row, col} : std::vector<int64_t>{row};
    sl.count = matrix ? std::vector<int64_t>{rows, width} : std::vector<int64_t>{rows};
    sl.local_offset = local;
    out.push_back(std::move(sl));
  };
  size_t piece_begin = 0;
  for (const Piece& p : pieces) {
    const size_t piece_end = piece_begin + size_t(p.rows * p.width);
    const size_t b = std::max(begin, piece_begin), e = std::min(end, piece_end);
    if (b < e) {
      // [b, e) within the piece: a partial first row, whole rows, a partial last row.
      int64_t at = int64_t(b - piece_begin);
      const int64_t stop = int64_t(e - piece_begin);
      if (at % p.width != 0) {
        const int64_t n = std::min(stop, (at / p.width + 1) * p.width) - at;
        emit(p.row0 + at / p.width, 1, p.col0 + at % p.width, n, piece_begin + size_t(at));
        at += n;
      }
      if (stop - at >= p.width) {
        const int64_t rows = (stop - at) / p.width;
        emit(p.row0 + at / p.width, rows, p.col0, p.width, piece_begin + size_t(at));
        at += rows * p.width;
      }
      if (at < stop) emit(p.row0 + at / p.width, 1, p.col0, stop - at, piece_begin + size_t(at));
    }
    piece_begin = piece_end;
  }
  return out;
}

LocalTable::LocalTable(const ParamTable& logical, const StageSpec& st) : logical_(&logical) {
  const int t = st.tp;
  const std::vector<ParamSpec>& specs = logical.specs();
  for (const ParamSpec& s : specs) {
    if (!s.placement.on(st) || !st.holds_expert(s.expert, s.experts)) continue;
    const ParamSpec* values = s.tied_to >= 0 ? &specs[size_t(s.tied_to)] : &s;
    if (s.tied_to >= 0 && values->placement.on(st)) {
      // The target is on this stage too: the tied tensor is the target itself.
      const auto it = std::find_if(params_.begin(), params_.end(), [&](const LocalParam& p) { return p.spec == values; });
      FEAST_CHECK(it != params_.end(), s.name << " is tied to " << values->name << ", which comes later in the table");
      aliases_.emplace_back(s.name, size_t(it - params_.begin()));
      continue;
    }
    LocalParam p;
    p.spec = &s;
    p.logical = values;
    p.shape = s.shape;
    p.tp_rank = st.tp_rank;
    p.tp = t;
    if (s.split == TpSplit::kInputCols) {
      if (s.shape[1] % t != 0)
        throw ConfigError("parallel.tp = " + std::to_string(t) + " does not divide the " + std::to_string(s.shape[1]) +
                          " input columns of " + s.name);
      p.shape[1] /= t;
    } else if (s.split != TpSplit::kReplicated) {
      for (int64_t rows : row_blocks(s))
        if (rows % t != 0)
          throw ConfigError("parallel.tp = " + std::to_string(t) + " does not divide the " + std::to_string(rows) +
                            " rows of " + (s.blocks.size() > 1 ? "a block of " : "") + s.name +
                            (s.split == TpSplit::kVocabRows ? " (the padded vocabulary)" : ""));
      p.shape[0] /= t;
    }
    p.numel = product(p.shape);
    p.offset = total_;
    total_ += p.numel;
    // Under expert parallelism the ranks of an ep group hold the same dense tensors (and ZeRO
    // gives them the same share of them: parallel/data_parallel/grad_sync.h): its first counts them.
    p.counts_in_norm = (s.split != TpSplit::kReplicated || st.tp_rank == 0) && !p.is_tied_copy() &&
                       (s.expert >= 0 || st.ep_rank == 0);
    params_.push_back(p);
  }
  // A tie whose two ends were not both found here spans stages: mark the end this stage holds.
  for (const ParamSpec& s : specs) {
    if (s.tied_to < 0) continue;
    const ParamSpec& target = specs[size_t(s.tied_to)];
    const bool here = s.placement.on(st), target_here = target.placement.on(st);
    if (here == target_here) continue;
    for (LocalParam& p : params_)
      if (p.logical == &target) p.tied_across_stages = true;
  }
}

const LocalParam* LocalTable::find(const std::string& name) const {
  for (const LocalParam& p : params_)
    if (p.spec->name == name) return &p;
  for (const auto& [alias, index] : aliases_)
    if (alias == name) return &params_[index];
  return nullptr;
}

const LocalParam& LocalTable::at(const std::string& name) const {
  if (const LocalParam* p = find(name)) return *p;
  throw Error("this stage holds no parameter named '" + name + "'");
}

bool LocalTable::contains(const std::string& name) const { return find(name) != nullptr; }

void init_local_parameter(const LocalParam& p, uint64_t seed, float* out) {
  const long n = static_cast<long>(p.numel);
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) out[i] = initial_value(*p.logical, seed, p.logical_index(i));
}

}  // namespace feast
