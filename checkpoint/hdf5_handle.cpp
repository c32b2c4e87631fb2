#include "checkpoint/hdf5_handle.h"

namespace feast::hdf5 {
namespace {

herr_t deepest(unsigned n, const H5E_error2_t* err, void* out) {
  // The walk goes from the innermost error outward; the innermost says what actually failed.
  if (n == 0) {
    std::string& s = *static_cast<std::string*>(out);
    s = err->desc ? err->desc : "";
    if (s.empty() && err->func_name) s = std::string("failure in ") + err->func_name;
  }
  return 0;
}

}  // namespace

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string last_error() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, deepest, &message);
  H5Eclear2(H5E_DEFAULT);
  return message.empty() ? "HDF5 reported an error" : message;
}

}  // namespace feast::hdf5
