// NCCL, loaded when first needed (dlopen of libnccl.so.2) rather than linked: the trainer then
// starts where NCCL is not installed (CI, login nodes, CPU-only machines) and needs NCCL only
// when parallel.backend picks it. Built only where nccl.h was found (FEAST_WITH_NCCL); only this
// file's .cpp and nccl_communicator.cpp see NCCL's types.
#pragma once

#include <nccl.h>

#include <string>

// Non-blocking communicators (ncclConfig_t::blocking) came with NCCL 2.14.
#if !defined(NCCL_VERSION_CODE)
#error "feast needs nccl.h from NCCL 2.14 or later (non-blocking communicators); this one has no version"
#elif NCCL_VERSION_CODE < 21400
#error "feast needs nccl.h from NCCL 2.14 or later (non-blocking communicators)"
#endif

#include "core/cuda/cuda_check.h"

namespace feast::nccl {

// The NCCL functions the trainer calls, resolved from the library.
struct Library {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduce) Reduce = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  int version = 0;  // NCCL_VERSION_CODE of the loaded library (2.28.9 -> 22809)
};

// The loaded library, or nullptr with the reason in *why (what was tried, what failed).
const Library* load(std::string* why);
// The loaded library; throws feast::Error with the reason when it cannot be loaded.
const Library& library();

}  // namespace feast::nccl

// A failed NCCL call throws feast::Error naming the call, NCCL's reason, the file and the line.
#define FEAST_NCCL_CHECK(lib, call)                                                                      \
  do {                                                                                                   \
    const ncclResult_t feast_nccl_result_ = (lib).call;                                                  \
    if (feast_nccl_result_ != ncclSuccess)                                                               \
      ::feast::cuda::throw_cuda_failure("NCCL", #call, (lib).GetErrorString(feast_nccl_result_), __FILE__, \
                                        __LINE__);                                                       \
  } while (0)

// The same for a call on a non-blocking communicator, which may also answer ncclInProgress: NCCL
// goes on with it in the background, and the caller waits for the communicator to settle
// (ncclCommGetAsyncError) before its next call.
#define FEAST_NCCL_ISSUE(lib, call)                                                                      \
  do {                                                                                                   \
    const ncclResult_t feast_nccl_result_ = (lib).call;                                                  \
    if (feast_nccl_result_ != ncclSuccess && feast_nccl_result_ != ncclInProgress)                        \
      ::feast::cuda::throw_cuda_failure("NCCL", #call, (lib).GetErrorString(feast_nccl_result_), __FILE__, \
                                        __LINE__);                                                       \
  } while (0)
