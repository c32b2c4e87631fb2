// Host address space whose pages hold memory only while in use: an anonymous mapping is
// reserved without memory (its pages are zero and cost nothing until written), and pages are
// given back with madvise(MADV_DONTNEED). The CPU backend's reserve(), commit() and decommit()
// (ZeRO 3 keeps a stage's whole flat parameter buffer as such a range and holds memory only
// for its own shard and the blocks gathered at the moment).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "core/tensor.h"

namespace feast {

class ReservedHostAllocator final : public Allocator {
 public:
  Device device() const override { return kCpu; }
  // Page-aligned, zero; throws std::bad_alloc when the address space cannot be mapped.
  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;

 private:
  std::mutex mutex_;
  std::map<void*, size_t> sizes_;  // every live mapping's length
};

ReservedHostAllocator& reserved_host_allocator();
size_t host_page_bytes();
// Gives the memory of whole pages [data, data + bytes) back; they read as zero afterwards.
void decommit_host_pages(void* data, size_t bytes);

}  // namespace feast
