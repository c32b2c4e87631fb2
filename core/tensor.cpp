#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace feast {
namespace {

class HostAllocator final : public Allocator {
 public:
  Device device() const override { return kCpu; }
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;  // aligned_alloc needs a multiple of the alignment
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
};

}  // namespace

Allocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

TensorView TensorView::slice(size_t offset, size_t n) const {
  FEAST_CHECK(offset <= numel && n <= numel - offset,
              "elements [" << offset << ", " << offset + n << ") of a tensor of " << numel);
  TensorView v = *this;
  v.data = static_cast<char*>(data) + offset * dtype_size(dtype);
  v.numel = n;
  return v;
}

Tensor::Tensor(Allocator& allocator, DType dtype, size_t numel) : allocator_(&allocator), dtype_(dtype), numel_(numel) {
  if (numel > 0) data_ = allocator.allocate(numel * dtype_size(dtype));
}

Tensor::~Tensor() { release(); }

Tensor::Tensor(Tensor&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      dtype_(other.dtype_),
      numel_(std::exchange(other.numel_, 0)) {}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    dtype_ = other.dtype_;
    numel_ = std::exchange(other.numel_, 0);
  }
  return *this;
}

void Tensor::release() noexcept {
  if (data_ && allocator_) allocator_->deallocate(data_);
  data_ = nullptr;
}

}  // namespace feast
