// PinnedBuffer's cache, and the host-only versions of the device-memory functions (a build
// without CUDA); core/cuda/device_memory_cuda.cu supplies the others.
#include "core/device_memory.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <utility>

namespace feast {

// The pinned allocation itself (cudaMallocHost, or malloc without CUDA).
void* allocate_pinned(size_t bytes);
void free_pinned(void* p) noexcept;

#if !defined(FEAST_WITH_CUDA)
bool is_device_memory(const void*) { return false; }
int current_device() { return -1; }
void use_device(int) {}
void copy_memory(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}
void* allocate_pinned(size_t bytes) {
  void* p = std::malloc(bytes);
  if (!p) throw std::bad_alloc();
  return p;
}
void free_pinned(void* p) noexcept { std::free(p); }
#endif

namespace {

// Freed buffers by size; a request takes the smallest that fits within twice its size. Never
// returned to the system: staging sizes repeat every step.
struct PinnedCache {
  std::mutex mutex;
  std::multimap<size_t, void*> free;
};

PinnedCache& cache() {
  static PinnedCache* c = new PinnedCache;  // never destroyed: buffers may be freed at exit
  return *c;
}

}  // namespace

PinnedBuffer::PinnedBuffer(size_t bytes) {
  const size_t want = bytes == 0 ? 1 : bytes;
  {
    PinnedCache& c = cache();
    std::lock_guard lock(c.mutex);
    auto it = c.free.lower_bound(want);
    if (it != c.free.end() && it->first <= 2 * want) {
      bytes_ = it->first;
      data_ = it->second;
      c.free.erase(it);
      return;
    }
  }
  data_ = allocate_pinned(want);
  bytes_ = want;
}

PinnedBuffer::~PinnedBuffer() {
  if (!data_) return;
  PinnedCache& c = cache();
  std::lock_guard lock(c.mutex);
  c.free.emplace(bytes_, data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    PinnedBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace feast
