#include "checkpoint/checkpoint_file.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "checkpoint/checksum.h"
#include "model/architecture.h"
#include "comm/agreement.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"

namespace feast {
namespace {

// The four tensors saved per logical parameter, in dataset-index order.
constexpr const char* kKinds[] = {"model", "optim/master", "optim/exp_avg", "optim/exp_avg_sq"};
constexpr int kModel = 0;
constexpr const char* kCrcAttribute = "crc32";

// The datasets of a checkpoint for one logical table: every tensor that has values of its own
// (a tied tensor is saved once, under its target's name), four kinds each.
struct DatasetList {
  std::vector<const ParamSpec*> specs;  // the saved logical tensors
  std::map<const ParamSpec*, int64_t> index_of;

  explicit DatasetList(const ParamTable& table) {
    for (const ParamSpec& s : table.specs()) {
      if (s.tied_to >= 0) continue;
      index_of[&s] = int64_t(specs.size());
      specs.push_back(&s);
    }
  }
  int64_t size() const { return int64_t(specs.size()) * 4; }
  int64_t id(int kind, const ParamSpec* s) const { return kind * int64_t(specs.size()) + index_of.at(s); }
  const ParamSpec& spec(int64_t id) const { return *specs[size_t(id % int64_t(specs.size()))]; }
  std::string path(int64_t id) const {
    return std::string(kKinds[id / int64_t(specs.size())]) + "/" + spec(id).name;
  }
  int64_t bytes(int64_t id) const { return int64_t(spec(id).numel * sizeof(float)); }
};

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

// A rank's access to one dataset: the rectangles it touches and the contiguous host memory (in
// the rectangles' order) they map to.
struct Access {
  int64_t dataset = 0;
  std::vector<LogicalSlice> slices;
  float* memory = nullptr;
  size_t numel() const {
    size_t n = 0;
    for (const LogicalSlice& s : slices) n += s.numel();
    return n;
  }
};

// The optimizer state that covers local tensor p, if this rank keeps any of it.
const AdamW::TensorState* state_for(const RankState& st, const LocalParam* p) {
  for (const AdamW::TensorState& ts : st.optimizer)
    if (ts.param == p) return &ts;
  return nullptr;
}

float* view_at(const TensorView& v, size_t element) { return v.as<float>() + element; }

// What this rank owns: for each tensor it counts in the norm, the part inside its
// data-parallel share; four accesses (model and optimizer kinds) per such run. Owned parts of
// all ranks tile every dataset exactly.
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

// Everything this rank must read to resume: each local tensor whole (model) and its optimizer
// range (master weights and moments). A tied copy reads its target's datasets.
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

// The checksums of the owned runs of `accesses`. Runs are cut into pieces of at most 8 MiB and
// checksummed on all threads (the combination puts them back together), so a save or load
// spends a fraction of its time here instead of one core's 4 GB/s.
std::vector<ChecksumPiece> checksum_pieces(const std::vector<Access>& accesses, const DatasetList& list,
                                           bool parallel = true) {
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

// A dataset's checksum over the whole job, and whether the ranks' pieces tiled it exactly.
struct CombinedChecksum {
  bool complete = false;
  uint32_t crc = 0;
};

// Collective: every dataset's checksum from every rank's pieces (checksum.h): two reductions of
// one word per dataset (the XOR of the shares, the sum of the bytes held).
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

// A file access list: MPI-IO over the group's communicator when it has one, else the default
// POSIX driver; version-2 object headers (HDF5 1.8+), which checksum every piece of metadata.
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

// Opens `path` to read. A file HDF5 cannot open (cut short by a full disk or a copy, damaged,
// or no HDF5 file at all) is said to be no checkpoint first, in words a reader can act on;
// HDF5's innermost reason follows for whoever digs further.
hdf5::Handle open_to_read(const std::string& path, hid_t fapl) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (file < 0)
    throw CheckpointError(path + " is not a readable feast checkpoint (truncated or corrupt HDF5 file: " +
                          hdf5::last_error() + ")");
  return {file, H5Fclose};
}

// Selects `slices` (a union of rectangles, in file order) in `space`.
void select(hid_t space, const std::vector<LogicalSlice>& slices, const std::string& what) {
  hdf5::check(H5Sselect_none(space), what);
  for (const LogicalSlice& s : slices) {
    const std::vector<hsize_t> start = dims_of(s.start), count = dims_of(s.count);
    hdf5::check(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr), what);
  }
}

// Reads or writes one access with independent I/O (collective I/O would need every rank to
// call for every dataset).
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

void write_scalar(hid_t loc, const char* name, hid_t type, const void* value, const std::string& path) {
  const std::string what = path + ": attribute " + name;
  hdf5::Handle space = hdf5::space(H5Screate(H5S_SCALAR), what);
  hdf5::Handle attr = hdf5::attribute(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), what);
  hdf5::check(H5Awrite(attr, type, value), what);
}
void write_int(hid_t loc, const char* name, int64_t v, const std::string& path) {
  write_scalar(loc, name, H5T_STD_I64LE, &v, path);
}
// Fixed-length (not variable-length) strings: they live in the attribute's checksummed header
// rather than in HDF5's unchecked global heap, and every reader handles them.
void write_string(hid_t loc, const char* name, const std::string& v, const std::string& path) {
  hdf5::Handle type = hdf5::type(H5Tcopy(H5T_C_S1), path);
  hdf5::check(H5Tset_size(type, std::max<size_t>(v.size(), 1)), path);
  hdf5::check(H5Tset_cset(type, H5T_CSET_UTF8), path);
  hdf5::check(H5Tset_strpad(type, H5T_STR_NULLPAD), path);
  write_scalar(loc, name, type, v.empty() ? "" : v.data(), path);
}

std::optional<hdf5::Handle> open_attribute(hid_t loc, const char* name, const std::string& what) {
  const htri_t exists = H5Aexists(loc, name);
  hdf5::check(exists, what);
  if (!exists) return std::nullopt;
  return hdf5::attribute(H5Aopen(loc, name, H5P_DEFAULT), what);
}

// The numeric attribute `name` of `loc` as T (HDF5 converts from the stored type), or nothing
// when it is absent.
template <typename T>
std::optional<T> read_number(hid_t loc, const char* name, const std::string& path) {
  const std::string what = path + ": attribute " + name;
  std::optional<hdf5::Handle> attr = open_attribute(loc, name, what);
  if (!attr) return std::nullopt;
  T v = 0;
  const hid_t type = std::is_same_v<T, uint32_t> ? H5T_NATIVE_UINT32
                     : std::is_same_v<T, uint64_t> ? H5T_NATIVE_UINT64
                                                   : H5T_NATIVE_INT64;
  hdf5::check(H5Aread(*attr, type, &v), what);
  return v;
}

// A root attribute every feast checkpoint has.
template <typename T>
T read_required(hid_t loc, const char* name, const std::string& path) {
  if (std::optional<T> v = read_number<T>(loc, name, path)) return *v;
  throw CheckpointError(path + ": attribute " + name +
                        " is missing; this is not a feast checkpoint (docs/checkpoint-format.md)");
}

std::string read_string(hid_t loc, const char* name, const std::string& path) {
  const std::string what = path + ": attribute " + name;
  std::optional<hdf5::Handle> attr = open_attribute(loc, name, what);
  if (!attr) return "";
  hdf5::Handle type = hdf5::type(H5Aget_type(*attr), what);
  if (H5Tget_class(type) != H5T_STRING) throw CheckpointError(what + " is not a string");
  if (H5Tis_variable_str(type) > 0) {  // written by another tool (h5py's default)
    char* value = nullptr;
    hdf5::Handle mem = hdf5::type(H5Tcopy(H5T_C_S1), what);
    hdf5::check(H5Tset_size(mem, H5T_VARIABLE), what);
    // HDF5 converts no string between character sets: h5py writes str as UTF-8, bytes as ASCII.
    hdf5::check(H5Tset_cset(mem, H5Tget_cset(type)), what);
    hdf5::check(H5Aread(*attr, mem, &value), what);
    std::string out = value ? value : "";
    H5free_memory(value);
    return out;
  }
  std::string out(H5Tget_size(type), '\0');
  hdf5::check(H5Aread(*attr, type, out.data()), what);
  out.resize(std::strlen(out.c_str()));
  return out;
}

void write_meta(hid_t file, const CheckpointMeta& m, const std::string& path) {
  write_int(file, "format_version", m.format_version, path);
  write_int(file, "step", m.step, path);
  write_int(file, "tokens_seen", m.tokens_seen, path);
  write_scalar(file, "seed", H5T_STD_U64LE, &m.seed, path);
  write_int(file, "data_step", m.data_step, path);
  write_int(file, "lr_step", m.lr_step, path);
  write_scalar(file, "rng_seed", H5T_STD_U64LE, &m.rng_seed, path);
  write_int(file, "skipped_steps", m.skipped_steps, path);
  write_string(file, "config", m.config, path);
  write_string(file, "layout", m.layout, path);
  write_int(file, "tp", m.tp, path);
  write_int(file, "pp", m.pp, path);
  write_int(file, "dp", m.dp, path);
  write_int(file, "zero_stage", m.zero_stage, path);
  write_int(file, "micro_batch_size", m.micro_batch_size, path);
  write_int(file, "num_micro_batches", m.num_micro_batches, path);
  write_int(file, "global_batch", m.global_batch, path);
}

CheckpointMeta read_meta(hid_t file, const std::string& path) {
  CheckpointMeta m;
  m.format_version = int(read_required<int64_t>(file, "format_version", path));
  if (m.format_version != kCheckpointFormatVersion)
    throw CheckpointMismatch(path + ": checkpoint format version " + std::to_string(m.format_version) +
                             ", but this trainer reads version " + std::to_string(kCheckpointFormatVersion));
  m.step = read_required<int64_t>(file, "step", path);
  m.tokens_seen = read_required<int64_t>(file, "tokens_seen", path);
  m.seed = read_required<uint64_t>(file, "seed", path);
  m.data_step = read_number<int64_t>(file, "data_step", path).value_or(m.step);
  m.lr_step = read_number<int64_t>(file, "lr_step", path).value_or(m.step);
  m.rng_seed = read_number<uint64_t>(file, "rng_seed", path).value_or(m.seed);
  m.skipped_steps = read_number<int64_t>(file, "skipped_steps", path).value_or(0);
  m.config = read_string(file, "config", path);
  m.layout = read_string(file, "layout", path);
  m.tp = int(read_number<int64_t>(file, "tp", path).value_or(1));
  m.pp = int(read_number<int64_t>(file, "pp", path).value_or(1));
  m.dp = int(read_number<int64_t>(file, "dp", path).value_or(1));
  m.zero_stage = int(read_number<int64_t>(file, "zero_stage", path).value_or(0));
  m.micro_batch_size = int(read_number<int64_t>(file, "micro_batch_size", path).value_or(1));
  m.num_micro_batches = int(read_number<int64_t>(file, "num_micro_batches", path).value_or(1));
  m.global_batch = read_number<int64_t>(file, "global_batch", path).value_or(0);
  return m;
}


// The names of the datasets directly under `group_path` ("" when the group is missing).
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

// The extent of a dataspace.
std::vector<int64_t> dims_of_space(hid_t space, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  hdf5::check(rank, what);
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)));
  hdf5::check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), what);
  return {dims.begin(), dims.end()};
}

std::vector<int64_t> shape_of(hid_t file, const std::string& dataset, const std::string& path) {
  const std::string what = path + ": " + dataset;
  hdf5::Handle ds = hdf5::dataset(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT), what);
  hdf5::Handle space = hdf5::space(H5Dget_space(ds), what);
  hdf5::Handle type = hdf5::type(H5Dget_type(ds), what);
  if (H5Tget_class(type) != H5T_FLOAT)
    throw CheckpointMismatch(what + " is not a floating-point dataset (feast reads float32, float64 or float16)");
  return dims_of_space(space, what);
}

// The differences between the file's tensors and the table's, one line each; empty when they
// match. Tensors are compared by name and shape (the model section of the config says why).
std::vector<std::string> compare_tensors(hid_t file, const DatasetList& list, const std::string& path) {
  std::vector<std::string> out;
  for (int k = 0; k < 4; ++k) {
    // Names may hold dots but not slashes, so every tensor of a kind is a direct child.
    std::set<std::string> present = dataset_names(file, kKinds[k], path);
    for (const ParamSpec* s : list.specs) {
      const std::string name = std::string(kKinds[k]) + "/" + s->name;
      if (!present.count(s->name)) {
        out.push_back(name + ": missing from the checkpoint (the model has it, shape " + format_shape(s->shape) + ")");
        continue;
      }
      present.erase(s->name);
      const std::vector<int64_t> shape = shape_of(file, name, path);
      if (shape != s->shape)
        out.push_back(name + ": shape " + format_shape(shape) + " in the checkpoint, " + format_shape(s->shape) +
                      " in the model");
    }
    for (const std::string& extra : present)
      out.push_back(std::string(kKinds[k]) + "/" + extra + ": in the checkpoint, not in the model");
  }
  return out;
}

}  // namespace

namespace {

bool g_fail_writes = false;  // fail_checkpoint_writes_for_testing

// Writes the owned accesses of every rank as one checkpoint file (collective). Every HDF5 call
// that is collective (create, dataset and attribute creation, flush, close) is made by every
// rank whatever happened before it on that rank; errors are collected and agreed on at the
// points where ranks could otherwise part ways, so a failure on one rank (a full disk under
// its slices) ends the save on every rank with that rank's message instead of a hang.
void write_owned(const std::string& path, Communicator& world, const DatasetList& list,
                 const std::vector<Access>& owned, const CheckpointMeta& meta, bool parallel_checksums) {
  hdf5::silence_errors();
  const std::vector<CombinedChecksum> crcs =
      job_checksums(world, checksum_pieces(owned, list, parallel_checksums), list);
  for (int64_t d = 0; d < list.size(); ++d)
    FEAST_CHECK(crcs[size_t(d)].complete, path << ": the ranks' slices of " << list.path(d)
                                                << " do not cover it exactly once (a bug in the parameter table)");

  std::string error;
  std::optional<hdf5::Handle> file;
  try {
    hdf5::Handle fapl = access_list(world, path);
    file = hdf5::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), path + ": cannot create");
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (const std::optional<std::string> first = first_error(world, error)) throw CheckpointError(*first);

  std::vector<hdf5::Handle> datasets;
  try {
    hdf5::Handle lcpl = hdf5::plist(H5Pcreate(H5P_LINK_CREATE), path);
    hdf5::check(H5Pset_create_intermediate_group(lcpl, 1), path);
    // Early allocation and no fill: each rank's independent writes land in space that exists,
    // and nothing is written twice.
    hdf5::Handle dcpl = hdf5::plist(H5Pcreate(H5P_DATASET_CREATE), path);
    hdf5::check(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), path);
    hdf5::check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), path);
    // Creating datasets and attributes is collective: every rank makes every one, alike (their
    // failures, such as a full disk for the metadata, come alike too).
    for (int64_t d = 0; d < list.size(); ++d) {
      const std::string what = path + ": creating " + list.path(d);
      const std::vector<hsize_t> dims = dims_of(list.spec(d).shape);
      hdf5::Handle space = hdf5::space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), what);
      hdf5::Handle ds = hdf5::dataset(
          H5Dcreate2(*file, list.path(d).c_str(), H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT), what);
      write_scalar(ds, kCrcAttribute, H5T_STD_U32LE, &crcs[size_t(d)].crc, path);
      datasets.push_back(std::move(ds));
    }
    write_meta(*file, meta, path);
    // Independent writes: one rank's failure here must not keep it from the collective close.
    if (g_fail_writes) throw CheckpointError(path + ": writing this rank's slices failed (injected by a test)");
    for (const Access& a : owned) transfer(datasets[size_t(a.dataset)], a, list, /*write=*/true, path);
  } catch (const std::exception& e) {
    error = e.what();
  }
  datasets.clear();
  if (H5Fflush(*file, H5F_SCOPE_GLOBAL) < 0 && error.empty()) error = path + ": flushing: " + hdf5::last_error();
  if (file->reset() < 0 && error.empty()) error = path + ": closing after the write: " + hdf5::last_error();
  if (const std::optional<std::string> first = first_error(world, error)) throw CheckpointError(*first);
}

}  // namespace

void write_checkpoint(const std::string& path, Communicator& world, const RankState& st, const CheckpointMeta& meta) {
  const DatasetList list(st.table->logical());
  write_owned(path, world, list, owned_accesses(st, list), meta, /*parallel_checksums=*/true);
}

struct CheckpointSnapshot::Impl {
  DatasetList list;
  CheckpointMeta meta;
  std::vector<float> data;    // the owned slices, one after another
  std::vector<Access> owned;  // pointing into data
  explicit Impl(const ParamTable& table) : list(table) {}
};

CheckpointSnapshot::CheckpointSnapshot(const RankState& state, const CheckpointMeta& meta)
    : impl_(std::make_unique<Impl>(state.table->logical())) {
  capture(state, meta);
}

void CheckpointSnapshot::capture(const RankState& state, const CheckpointMeta& meta) {
  impl_->meta = meta;
  impl_->owned = owned_accesses(state, impl_->list);
  size_t total = 0;
  for (const Access& a : impl_->owned) total += a.numel();
  // The same size each time: the memory is reused, so only the first copy pays for its pages.
  if (impl_->data.size() != total) impl_->data.resize(total);
  float* at = impl_->data.data();
  for (Access& a : impl_->owned) {
    std::memcpy(at, a.memory, a.numel() * sizeof(float));
    a.memory = at;
    at += a.numel();
  }
}

CheckpointSnapshot::~CheckpointSnapshot() = default;
CheckpointSnapshot::CheckpointSnapshot(CheckpointSnapshot&&) noexcept = default;
CheckpointSnapshot& CheckpointSnapshot::operator=(CheckpointSnapshot&&) noexcept = default;

size_t CheckpointSnapshot::bytes() const { return impl_->data.size() * sizeof(float); }
int64_t CheckpointSnapshot::step() const { return impl_->meta.step; }

void CheckpointSnapshot::write(const std::string& path, Communicator& world) const {
  // Written beside training: one thread, so the training threads keep their cores.
  write_owned(path, world, impl_->list, impl_->owned, impl_->meta, /*parallel_checksums=*/false);
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  hdf5::silence_errors();
  hdf5::Handle file = open_to_read(path, H5P_DEFAULT);
  return read_meta(file, path);
}

void read_checkpoint(const std::string& path, Communicator& world, const RankState& st) {
  hdf5::silence_errors();
  const DatasetList list(st.table->logical());
  std::string error;
  std::vector<std::string> differences;
  std::vector<std::optional<uint32_t>> stored(size_t(list.size()));
  std::vector<ChecksumPiece> pieces;  // of the owned parts, as read
  {
    std::optional<hdf5::Handle> file;
    try {
      hdf5::Handle fapl = access_list(world, path);
      file = open_to_read(path, fapl);
      read_meta(*file, path);
      differences = compare_tensors(*file, list, path);
      if (differences.empty()) {
        for (int64_t d = 0; d < list.size(); ++d) {
          hdf5::Handle ds = hdf5::dataset(H5Dopen2(*file, list.path(d).c_str(), H5P_DEFAULT), path);
          stored[size_t(d)] = read_number<uint32_t>(ds, kCrcAttribute, path + ": " + list.path(d));
          if (!stored[size_t(d)])
            throw CheckpointError(path + ": " + list.path(d) + " has no " + kCrcAttribute +
                                  " attribute; every dataset of a checkpoint carries one (docs/checkpoint-format.md)");
        }
        // The owned parts are checksummed as soon as they are read: on the CPU the master
        // weights alias the parameters, so reading optim/master overwrites what model/ put there
        // (and CheckpointWeights reads both moments into one buffer).
        const std::vector<Access> owned = owned_accesses(st, list);
        for (const Access& a : needed_accesses(st, list)) {
          const std::string what = path + ": " + list.path(a.dataset);
          hdf5::Handle ds = hdf5::dataset(H5Dopen2(*file, list.path(a.dataset).c_str(), H5P_DEFAULT), what);
          transfer(ds, a, list, /*write=*/false, path);
          for (const Access& o : owned) {
            if (o.dataset != a.dataset || o.memory < a.memory || o.memory >= a.memory + a.numel()) continue;
            const std::vector<ChecksumPiece> p = checksum_pieces({o}, list);
            pieces.insert(pieces.end(), p.begin(), p.end());
          }
        }
      }
    } catch (const CheckpointMismatch& e) {
      differences.push_back(e.what());
    } catch (const std::exception& e) {  // an HDF5 error, or a std::bad_alloc from a corrupt size
      error = e.what();
    }
    // Closing is collective with MPI-IO: every rank gets here, whatever it found.
  }
  if (const std::optional<std::string> first = first_error(world, error)) throw CheckpointError(*first);
  if (!differences.empty()) {
    std::string msg = path + " holds a different model than the one configured:";
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < std::min(differences.size(), kShown); ++i) msg += "\n  " + differences[i];
    if (differences.size() > kShown) msg += "\n  ... and " + std::to_string(differences.size() - kShown) + " more";
    throw CheckpointMismatch(msg);
  }
  const std::vector<CombinedChecksum> actual = job_checksums(world, pieces, list);
  std::vector<std::string> bad;
  for (int64_t d = 0; d < list.size(); ++d) {
    const std::optional<uint32_t>& want = stored[size_t(d)];
    if (!actual[size_t(d)].complete || actual[size_t(d)].crc != *want) bad.push_back(list.path(d));
  }
  if (!bad.empty()) {
    std::string msg = path + ": checksum mismatch in dataset " + bad.front();
    if (bad.size() > 1) msg += " and " + std::to_string(bad.size() - 1) + " other(s)";
    throw CheckpointError(msg + "; the file is corrupt");
  }
}

void fail_checkpoint_writes_for_testing(bool fail) { g_fail_writes = fail; }

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}


std::vector<DatasetReport> verify_checkpoint(const std::string& path) {
  hdf5::silence_errors();
  hdf5::Handle file = open_to_read(path, H5P_DEFAULT);
  std::vector<DatasetReport> out;
  std::vector<std::string> names;
  for (const char* kind : kKinds)
    for (const std::string& n : dataset_names(file, kind, path)) names.push_back(std::string(kind) + "/" + n);
  for (const std::string& name : names) {
    DatasetReport r;
    r.name = name;
    try {
      const std::string what = path + ": " + name;
      hdf5::Handle ds = hdf5::dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), what);
      hdf5::Handle space = hdf5::space(H5Dget_space(ds), what);
      r.shape = dims_of_space(space, what);
      hdf5::Handle type = hdf5::type(H5Dget_type(ds), what);
      const size_t size = H5Tget_size(type);
      r.dtype = H5Tget_class(type) == H5T_FLOAT ? "float" + std::to_string(size * 8) : "non-float";
      r.stored_crc = read_number<uint32_t>(ds, kCrcAttribute, what);
      const hssize_t n = H5Sget_simple_extent_npoints(space);
      std::vector<unsigned char> bytes(size_t(n) * size);
      hdf5::check(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), what);
      r.actual_crc = crc32_of(bytes.data(), bytes.size());
    } catch (const Error& e) {
      r.error = e.what();
    }
    out.push_back(std::move(r));
  }
  return out;
}

CheckpointWeights::CheckpointWeights(const std::string& path, const ModelConfig& model)
    : logical_(decoder_param_table(model)), local_(logical_, StageSpec::whole(model)), flat_(local_.total_numel()) {
  // The state of one rank holding the whole model without ZeRO, as a CPU run keeps it: the
  // master weights are the parameters, so optim/master is read over model/ once model/ is
  // verified. The moments are only verified: read_checkpoint checksums each slice as soon as it
  // has read it, so both moments of every tensor can pass through one buffer of the largest.
  size_t largest = 0;
  for (const LocalParam& p : local_.params()) largest = std::max(largest, p.numel);
  std::vector<float> moments(largest);
  RankState st;
  st.table = &local_;
  st.params = host_view(flat_.data(), flat_.size());
  st.share_end = flat_.size();
  for (const LocalParam& p : local_.params()) {
    const TensorView scratch = host_view(moments.data(), p.numel);
    st.optimizer.push_back({&p, 0, p.numel, st.params.slice(p.offset, p.numel), scratch, scratch});
  }
  read_checkpoint(path, *make_self_communicator(), st);
}

std::vector<float> CheckpointWeights::tensor(const std::string& name) const {
  const LocalParam& p = local_.at(name);
  return {flat_.begin() + std::ptrdiff_t(p.offset), flat_.begin() + std::ptrdiff_t(p.offset + p.numel)};
}

}  // namespace feast
