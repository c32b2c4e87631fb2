// The datasets of a checkpoint file and a rank's part in them: the dataset list of a parameter
// table, the slices a rank owns (and checksums) or needs, the checksums combined over the job,
// and the HDF5 plumbing that opens the file and moves slices. Internal to checkpoint/.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_handle.h"
#include "comm/communicator.h"
#include "model/parameters.h"

namespace feast::checkpoint_io {

// The four tensors saved per logical parameter, in dataset-index order.
inline constexpr const char* kKinds[] = {"model", "optim/master", "optim/exp_avg", "optim/exp_avg_sq"};
inline constexpr int kModel = 0;
inline constexpr const char* kCrcAttribute = "crc32";

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

// What this rank owns: for each tensor it counts in the norm, the part inside its
// data-parallel share; four accesses (model and optimizer kinds) per such run. Owned parts of
// all ranks tile every dataset exactly.
std::vector<Access> owned_accesses(const RankState& st, const DatasetList& list);

// Everything this rank must read to resume: each local tensor whole (model) and its optimizer
// range (master weights and moments). A tied copy reads its target's datasets.
std::vector<Access> needed_accesses(const RankState& st, const DatasetList& list);

// The checksums of the owned runs of `accesses`. Runs are cut into pieces of at most 8 MiB and
// checksummed on all threads (the combination puts them back together), so a save or load
// spends a fraction of its time here instead of one core's 4 GB/s.
std::vector<ChecksumPiece> checksum_pieces(const std::vector<Access>& accesses, const DatasetList& list,
                                           bool parallel = true);

// A dataset's checksum over the whole job, and whether the ranks' pieces tiled it exactly.
struct CombinedChecksum {
  bool complete = false;
  uint32_t crc = 0;
};

// Collective: every dataset's checksum from every rank's pieces (checksum.h): two reductions of
// one word per dataset (the XOR of the shares, the sum of the bytes held).
std::vector<CombinedChecksum> job_checksums(Communicator& world, const std::vector<ChecksumPiece>& mine,
                                            const DatasetList& list);

std::vector<hsize_t> dims_of(const std::vector<int64_t>& v);

// A file access list: MPI-IO over the group's communicator when it has one, else the default
// POSIX driver; version-2 object headers (HDF5 1.8+), which checksum every piece of metadata.
hdf5::Handle access_list(Communicator& world, const std::string& path);

// Opens `path` to read. A file HDF5 cannot open (cut short by a full disk or a copy, damaged,
// or no HDF5 file at all) is said to be no checkpoint first, in words a reader can act on;
// HDF5's innermost reason follows for whoever digs further.
hdf5::Handle open_to_read(const std::string& path, hid_t fapl);

// Reads or writes one access with independent I/O (collective I/O would need every rank to
// call for every dataset).
void transfer(hid_t ds, const Access& a, const DatasetList& list, bool write, const std::string& path);

// The names of the datasets directly under `group_path` ("" when the group is missing).
std::set<std::string> dataset_names(hid_t file, const std::string& group_path, const std::string& path);

// The extent of a dataspace.
std::vector<int64_t> dims_of_space(hid_t space, const std::string& what);

}  // namespace feast::checkpoint_io
