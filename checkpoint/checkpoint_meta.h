// A checkpoint's HDF5 attributes: the root's CheckpointMeta (where training is and how the run
// was laid out) written and read, and the scalar attributes each dataset carries (its CRC-32).
// Internal to checkpoint/.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/hdf5_handle.h"

namespace feast::checkpoint_io {

void write_scalar(hid_t loc, const char* name, hid_t type, const void* value, const std::string& path);

std::optional<hdf5::Handle> open_attribute(hid_t loc, const char* name, const std::string& what);

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

// The root group's attributes. Reading requires format_version (this trainer's; else
// CheckpointMismatch), step, tokens_seen and seed; the others have defaults for older files.
void write_meta(hid_t file, const CheckpointMeta& m, const std::string& path);
CheckpointMeta read_meta(hid_t file, const std::string& path);

}  // namespace feast::checkpoint_io
