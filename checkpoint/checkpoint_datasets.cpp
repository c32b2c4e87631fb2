// A rank's slices of a checkpoint's datasets, their checksums over the job, and moving them
// between memory and the HDF5 file; also how shapes are written in messages.
#include "checkpoint/checkpoint_datasets.h"

#include <mpi.h>

#include <algorithm>

#include "comm/mpi_communicator.h"
#include "core/error.h"

namespace feast::checkpoint_io {

namespace {

// Row-major file order: calls fn(first element in the dataset, elements, first element within
// the slice) for each contiguous run of `slice` in a tensor of `shape` (1-D or 2-D).
template <typename Fn>
void for_each_run(const std::vector<int64_t>& shape, const LogicalSlice& slice, Fn fn) {
  if (shape.size() == 1) {
    fn(slice.start[0], slice.count[0], int64_t{0});
    return;
  }
  const int64_t cols = shape[1];
  if (slice.start[1] == 0 && slice.count[1] == cols) {
    fn(slice.start[0] * cols, slice.count[0] * cols, int64_t{0});
    return;
  }
  for (int64_t r = 0; r < slice.count[0]; ++r)
    fn((slice.start[0] + r) * cols + slice.start[1], slice.count[1], r * slice.count[1]);
}

// The optimizer state that covers local tensor p, if this rank keeps any of it.
const AdamW::TensorState* state_for(const RankState& st, const LocalParam* p) {
  for (const AdamW::TensorState& ts : st.optimizer)
    if (ts.param == p) return &ts;
  return nullptr;
}

float* view_at(const TensorView& v, size_t element) { return v.as<float>() + element; }

// Selects `slices` (a union of rectangles, in file order) in `space`.
void select(hid_t space, const std::vector<LogicalSlice>& slices, const std::string& what) {
  hdf5::check(H5Sselect_none(space), what);
  for (const LogicalSlice& s : slices) {
    const std::vector<hsize_t> start = dims_of(s.start), count = dims_of(s.count);
    hdf5::check(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr), what);
  }
}

}  // namespace

std::vector<Access> owned_accesses(const RankState& st, const DatasetList& list) {
  std::vector<Access> out;
  for (const LocalParam& p : st.table->params()) {
    if (!p.counts_in_norm) continue;
    const size_t lo = std::max(p.offset, st.share_begin), hi = std::min(p.offset + p.numel, st.share_end);
    if (lo >= hi) continue;
    const size_t b = lo - p.offset, e = hi - p.offset;
    std::vector<LogicalSlice> slices = p.logical_slices(b, e);
    out.push_back({list.id(kModel, p.logical), slices, view_at(st.params, p.offset + b)});
    const AdamW::TensorState* ts = state_for(st, &p);
    FEAST_CHECK(ts && ts->local_begin <= b && e <= ts->local_end,
                "the optimizer state of " << p.spec->name << " does not cover this rank's share of it");
    const TensorView* views[] = {&ts->master, &ts->exp_avg, &ts->exp_avg_sq};
    for (int k = 1; k < 4; ++k)
      out.push_back({list.id(k, p.logical), slices, view_at(*views[k - 1], b - ts->local_begin)});
  }
  return out;
}

std::vector<Access> needed_accesses(const RankState& st, const DatasetList& list) {
  std::vector<Access> out;
  for (const LocalParam& p : st.table->params())
    out.push_back({list.id(kModel, p.logical), p.logical_slices(), view_at(st.params, p.offset)});
  for (const AdamW::TensorState& ts : st.optimizer) {
    const std::vector<LogicalSlice> slices = ts.param->logical_slices(ts.local_begin, ts.local_end);
    const TensorView* views[] = {&ts.master, &ts.exp_avg, &ts.exp_avg_sq};
    for (int k = 1; k < 4; ++k) out.push_back({list.id(k, ts.param->logical), slices, views[k - 1]->as<float>()});
  }
  return out;
}

std::vector<ChecksumPiece> checksum_pieces(const std::vector<Access>& accesses, const DatasetList& list,
                                           bool parallel) {
  constexpr int64_t kPiece = int64_t{8} << 20;
  std::vector<ChecksumPiece> out;
  std::vector<const float*> data;
  for (const Access& a : accesses) {
    const std::vector<int64_t>& shape = list.spec(a.dataset).shape;
    size_t slice_start = 0;
    for (const LogicalSlice& s : a.slices) {
      for_each_run(shape, s, [&](int64_t file_elem, int64_t n, int64_t in_slice) {
        const float* run = a.memory + slice_start + size_t(in_slice);
        const int64_t bytes = n * int64_t(sizeof(float));
        for (int64_t at = 0; at < bytes; at += kPiece) {
          out.push_back({a.dataset, file_elem * int64_t(sizeof(float)) + at, std::min(kPiece, bytes - at), 0});
          data.push_back(run + at / int64_t(sizeof(float)));
        }
      });
      slice_start += s.numel();
    }
  }
#pragma omp parallel for schedule(dynamic, 16) if (parallel)
  for (size_t i = 0; i < out.size(); ++i) out[i].crc = crc32_of(data[i], size_t(out[i].bytes));
  return out;
}

std::vector<CombinedChecksum> job_checksums(Communicator& world, const std::vector<ChecksumPiece>& mine,
                                            const DatasetList& list) {
  std::vector<int64_t> bytes(size_t(list.size()));
  for (int64_t d = 0; d < list.size(); ++d) bytes[size_t(d)] = list.bytes(d);
  ChecksumShares shares = checksum_shares(mine, bytes);
  CollectiveOptions xor_op;
  xor_op.op = ReduceOp::kBitXor;
  world.allreduce(shares.share.data(), shares.share.size(), DType::kInt64, xor_op)->wait();
  world.allreduce(shares.bytes.data(), shares.bytes.size(), DType::kInt64)->wait();
  std::vector<CombinedChecksum> out(bytes.size());
  for (size_t d = 0; d < out.size(); ++d)
    out[d] = {shares.bytes[d] == bytes[d], dataset_checksum(shares.share[d], bytes[d])};
  return out;
}

// ---- HDF5 plumbing ----------------------------------------------------------------------------

std::vector<hsize_t> dims_of(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

hdf5::Handle access_list(Communicator& world, const std::string& path) {
  hdf5::Handle fapl = hdf5::plist(H5Pcreate(H5P_FILE_ACCESS), path);
  const MPI_Comm comm = mpi_comm_of(world);
  if (comm != MPI_COMM_NULL) {
    hdf5::check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), path + ": MPI-IO driver");
    // Metadata is written collectively at close; reads stay independent, since each rank opens
    // only the datasets it needs.
    hdf5::check(H5Pset_coll_metadata_write(fapl, true), path);
  } else {
    FEAST_CHECK(world.size() == 1, "a checkpoint of " << world.size() << " ranks needs an MPI communicator");
  }
  hdf5::check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V110), path);
  return fapl;
}

hdf5::Handle open_to_read(const std::string& path, hid_t fapl) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (file < 0)
    throw CheckpointError(path + " is not a readable feast checkpoint (truncated or corrupt HDF5 file: " +
                          hdf5::last_error() + ")");
  return {file, H5Fclose};
}

void transfer(hid_t ds, const Access& a, const DatasetList& list, bool write, const std::string& path) {
  const std::string what = path + ": " + (write ? "writing " : "reading ") + list.path(a.dataset);
  hdf5::Handle file_space = hdf5::space(H5Dget_space(ds), what);
  select(file_space, a.slices, what);
  const hsize_t n = a.numel();
  hdf5::Handle mem_space = hdf5::space(H5Screate_simple(1, &n, nullptr), what);
  if (write)
    hdf5::check(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem_space, file_space, H5P_DEFAULT, a.memory), what);
  else
    hdf5::check(H5Dread(ds, H5T_NATIVE_FLOAT, mem_space, file_space, H5P_DEFAULT, a.memory), what);
}

std::set<std::string> dataset_names(hid_t file, const std::string& group_path, const std::string& path) {
  std::set<std::string> names;
  const htri_t exists = H5Lexists(file, group_path.c_str(), H5P_DEFAULT);
  if (exists <= 0) return names;
  hdf5::Handle g = hdf5::group(H5Gopen2(file, group_path.c_str(), H5P_DEFAULT), path + ": group " + group_path);
  H5Literate(
      g, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
        static_cast<std::set<std::string>*>(out)->insert(name);
        return 0;
      },
      &names);
  return names;
}

std::vector<int64_t> dims_of_space(hid_t space, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  hdf5::check(rank, what);
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)));
  hdf5::check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), what);
  return {dims.begin(), dims.end()};
}

}  // namespace feast::checkpoint_io

namespace feast {

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

double checkpoint_bytes(const ParamTable& table) { return 16.0 * double(table.total_numel()); }

}  // namespace feast
