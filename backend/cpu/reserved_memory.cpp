#include "backend/cpu/reserved_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "core/error.h"

namespace feast {

void* ReservedHostAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const std::lock_guard<std::mutex> lock(mutex_);
  sizes_[p] = bytes;
  return p;
}

void ReservedHostAllocator::deallocate(void* p) noexcept {
  if (!p) return;
  size_t bytes = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    bytes = it->second;
    sizes_.erase(it);
  }
  munmap(p, bytes);
}

ReservedHostAllocator& reserved_host_allocator() {
  static ReservedHostAllocator allocator;
  return allocator;
}

size_t host_page_bytes() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

void decommit_host_pages(void* data, size_t bytes) {
  const size_t page = host_page_bytes();
  FEAST_CHECK(reinterpret_cast<uintptr_t>(data) % page == 0 && bytes % page == 0,
              "decommit of " << bytes << " bytes at " << data << ": not whole pages of " << page << " bytes");
  if (bytes == 0) return;
  FEAST_CHECK(madvise(data, bytes, MADV_DONTNEED) == 0, "madvise(MADV_DONTNEED) of " << bytes << " bytes failed");
}

}  // namespace feast
