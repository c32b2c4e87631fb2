// Writing a checkpoint collectively: each rank its owned slices, with every dataset's checksum
// over the job, from the training state directly (write_checkpoint) or from a copy of it taken
// for a background thread (CheckpointSnapshot).
#include "checkpoint/checkpoint_file.h"

#include <cstring>
#include <exception>
#include <optional>

#include "checkpoint/checkpoint_datasets.h"
#include "checkpoint/checkpoint_meta.h"
#include "comm/agreement.h"

namespace feast {

using namespace checkpoint_io;

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

void fail_checkpoint_writes_for_testing(bool fail) { g_fail_writes = fail; }

}  // namespace feast
