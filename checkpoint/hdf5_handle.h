// Owning wrappers for HDF5 identifiers and the error reporting every HDF5 call in feast goes
// through: HDF5's own error printer is silenced, and a failed call throws CheckpointError whose
// message names the file, what was being done and the innermost reason from HDF5's error stack
// ("truncated file: eof = ..., stored_eof = ...", "checksum error", ...).
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace feast {

// A checkpoint file is missing, corrupt or unreadable, or cannot be written; the message names
// the file and, for data, the dataset.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

namespace hdf5 {

// Turns HDF5's automatic error printing off for this process (idempotent).
void silence_errors();

// The deepest message on HDF5's error stack of this thread ("" when empty); clears the stack.
std::string last_error();

// Throws CheckpointError("<context>: <HDF5's reason>") when `status` < 0; returns it otherwise.
inline hid_t check(hid_t status, const std::string& context) {
  if (status < 0) throw CheckpointError(context + ": " + last_error());
  return status;
}

// An HDF5 identifier closed with the matching H5?close on destruction.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: handles pass straight into H5 calls
  // Closes now; returns HDF5's status (a file's close is where a parallel write completes).
  herr_t reset() {
    herr_t rc = 0;
    if (id_ >= 0 && close_) rc = close_(id_);
    id_ = H5I_INVALID_HID;
    return rc;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

inline Handle file(hid_t id, const std::string& context) { return {check(id, context), H5Fclose}; }
inline Handle group(hid_t id, const std::string& context) { return {check(id, context), H5Gclose}; }
inline Handle dataset(hid_t id, const std::string& context) { return {check(id, context), H5Dclose}; }
inline Handle space(hid_t id, const std::string& context) { return {check(id, context), H5Sclose}; }
inline Handle attribute(hid_t id, const std::string& context) { return {check(id, context), H5Aclose}; }
inline Handle plist(hid_t id, const std::string& context) { return {check(id, context), H5Pclose}; }
inline Handle type(hid_t id, const std::string& context) { return {check(id, context), H5Tclose}; }

}  // namespace hdf5
}  // namespace feast
