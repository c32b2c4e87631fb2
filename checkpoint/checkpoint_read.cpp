// Reading a checkpoint collectively: each rank the slices its layout needs, after the file's
// tensors are compared with the model's, with the owned parts' checksums verified over the job;
// and CheckpointWeights, the whole model's weights read that way by one process.
#include "checkpoint/checkpoint_file.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <set>

#include "checkpoint/checkpoint_datasets.h"
#include "checkpoint/checkpoint_meta.h"
#include "comm/agreement.h"
#include "comm/self_communicator.h"
#include "model/architecture.h"

namespace feast {

using namespace checkpoint_io;

namespace {

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

CheckpointWeights::CheckpointWeights(const std::string& path, const ModelConfig& model)
    : CheckpointWeights(path, model, decoder_param_table(model)) {}

CheckpointWeights::CheckpointWeights(const std::string& path, const ModelConfig& model, ParamTable logical)
    : logical_(std::move(logical)), local_(logical_, StageSpec::whole(model)), flat_(local_.total_numel()) {
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
