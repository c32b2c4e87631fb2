// The root attributes of a checkpoint (CheckpointMeta) and the HDF5 attribute helpers behind
// them: scalars, and fixed-length strings that any reader handles.
#include "checkpoint/checkpoint_meta.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/checkpoint_datasets.h"

namespace feast::checkpoint_io {

void write_scalar(hid_t loc, const char* name, hid_t type, const void* value, const std::string& path) {
  const std::string what = path + ": attribute " + name;
  hdf5::Handle space = hdf5::space(H5Screate(H5S_SCALAR), what);
  hdf5::Handle attr = hdf5::attribute(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), what);
  hdf5::check(H5Awrite(attr, type, value), what);
}

std::optional<hdf5::Handle> open_attribute(hid_t loc, const char* name, const std::string& what) {
  const htri_t exists = H5Aexists(loc, name);
  hdf5::check(exists, what);
  if (!exists) return std::nullopt;
  return hdf5::attribute(H5Aopen(loc, name, H5P_DEFAULT), what);
}

namespace {

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

}  // namespace

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
  write_string(file, "lora_base", m.lora_base, path);
  write_int(file, "tp", m.tp, path);
  write_int(file, "pp", m.pp, path);
  write_int(file, "dp", m.dp, path);
  write_int(file, "cp", m.cp, path);
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
  m.lora_base = read_string(file, "lora_base", path);
  m.tp = int(read_number<int64_t>(file, "tp", path).value_or(1));
  m.pp = int(read_number<int64_t>(file, "pp", path).value_or(1));
  m.dp = int(read_number<int64_t>(file, "dp", path).value_or(1));
  m.cp = int(read_number<int64_t>(file, "cp", path).value_or(1));
  m.zero_stage = int(read_number<int64_t>(file, "zero_stage", path).value_or(0));
  m.micro_batch_size = int(read_number<int64_t>(file, "micro_batch_size", path).value_or(1));
  m.num_micro_batches = int(read_number<int64_t>(file, "num_micro_batches", path).value_or(1));
  m.global_batch = read_number<int64_t>(file, "global_batch", path).value_or(0);
  return m;
}

}  // namespace feast::checkpoint_io

namespace feast {

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  hdf5::silence_errors();
  hdf5::Handle file = checkpoint_io::open_to_read(path, H5P_DEFAULT);
  return checkpoint_io::read_meta(file, path);
}

}  // namespace feast
