// Verification for `trainer inspect`: every dataset of a checkpoint read whole by one process,
// with its shape, type and stored checksum against the checksum of what was read.
#include "checkpoint/checkpoint_file.h"

#include <utility>

#include "checkpoint/checkpoint_datasets.h"
#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/checksum.h"

namespace feast {

using namespace checkpoint_io;

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

}  // namespace feast
