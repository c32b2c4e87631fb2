// Opening a shared library at run time and taking its entry points, with errors that say what
// to install. The CPU backend's BLAS libraries are opened this way, not linked (blas_library.h,
// onednn_library.h).
#pragma once

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace feast::cpu {

// dlopen(path) with every symbol bound now and visible to later libraries; throws feast::Error
// "cannot open <what>: <dlerror>; <fix>".
inline void* open_shared_library(const std::string& path, const std::string& what, const std::string& fix) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) throw Error("cannot open " + what + ": " + dlerror() + "; " + fix);
  return handle;
}

// `f` = the library's `name`; throws feast::Error "<path>: has no <name> (<hint>)".
template <typename F>
void resolve_symbol(void* handle, const char* name, F& f, const std::string& path, const std::string& hint) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  if (!f) throw Error(path + ": has no " + name + " (" + hint + ")");
}

}  // namespace feast::cpu
