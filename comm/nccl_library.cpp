#include "comm/nccl_library.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

namespace feast::nccl {
namespace {

struct Loaded {
  Library lib;
  std::string error;  // empty when loaded
};

Loaded load_once() {
  Loaded l;
  // libnccl.so.2 is the name NCCL's packages and pip's nvidia-nccl install; LD_LIBRARY_PATH
  // (or the loader's cache) must reach it.
  void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    l.error = std::string("cannot load NCCL (libnccl.so.2): ") + (e ? e : "unknown error") +
              "; install NCCL or add its lib directory to LD_LIBRARY_PATH";
    return l;
  }
  bool ok = true;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn && ok) {
      ok = false;
      l.error = std::string("NCCL (libnccl.so.2) lacks ") + name + ": it is older than 2.14, which feast needs";
    }
  };
  Library& b = l.lib;
  resolve(b.GetVersion, "ncclGetVersion");
  resolve(b.GetUniqueId, "ncclGetUniqueId");
  resolve(b.CommInitRankConfig, "ncclCommInitRankConfig");
  resolve(b.CommFinalize, "ncclCommFinalize");
  resolve(b.CommDestroy, "ncclCommDestroy");
  resolve(b.CommAbort, "ncclCommAbort");
  resolve(b.CommGetAsyncError, "ncclCommGetAsyncError");
  resolve(b.GetErrorString, "ncclGetErrorString");
  resolve(b.AllReduce, "ncclAllReduce");
  resolve(b.ReduceScatter, "ncclReduceScatter");
  resolve(b.AllGather, "ncclAllGather");
  resolve(b.Reduce, "ncclReduce");
  resolve(b.Broadcast, "ncclBroadcast");
  resolve(b.Send, "ncclSend");
  resolve(b.Recv, "ncclRecv");
  resolve(b.GroupStart, "ncclGroupStart");
  resolve(b.GroupEnd, "ncclGroupEnd");
  if (ok && b.GetVersion(&b.version) != ncclSuccess) b.version = 0;
  // Non-blocking communicators came with 2.14 (21400 in NCCL_VERSION_CODE's encoding); bfloat16
  // reductions with 2.10.
  if (ok && b.version < 21400) {
    l.error = "NCCL (libnccl.so.2) is version " + std::to_string(b.version) +
              "; feast needs 2.14 or later (non-blocking communicators)";
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load_once();
  return l;
}

}  // namespace

const Library* load(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return nullptr;
  }
  return &l.lib;
}

const Library& library() {
  std::string why;
  const Library* lib = load(&why);
  if (!lib) throw Error(why);
  return *lib;
}

}  // namespace feast::nccl
