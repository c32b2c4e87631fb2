// Device memory as the model, the optimizer and the gradient sync see it: a Tensor owns a flat,
// zero-filled allocation of `numel` elements of one dtype on one device (through that device's
// Allocator); a TensorView is a non-owning window on one (pointer, dtype, device, numel) that ops
// check before they touch it. Shapes are not stored: ops take their dimensions explicitly and
// check that the views hold enough elements.
#pragma once

#include <cstddef>
#include <type_traits>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace feast {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // `bytes` of zero-filled memory aligned to 64 bytes; throws std::bad_alloc when there is none.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
};

// Host memory (aligned_alloc): the CPU backend's allocator.
Allocator& host_allocator();

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  size_t numel = 0;

  explicit operator bool() const { return data != nullptr; }
  size_t bytes() const { return numel * dtype_size(dtype); }

  // The data as T*; throws when T is not the view's dtype.
  template <typename T>
  T* as() const {
    FEAST_CHECK(dtype == dtype_of<T>(), "a " << dtype_name(dtype) << " tensor read as " << dtype_name(dtype_of<T>()));
    return static_cast<T*>(data);
  }
  // Elements [offset, offset + n); throws when they are not all inside the view.
  TensorView slice(size_t offset, size_t n) const;
  TensorView first(size_t n) const { return slice(0, n); }
};

// A view of host memory the caller owns.
template <typename T>
TensorView host_view(T* data, size_t numel) {
  return {const_cast<void*>(static_cast<const void*>(data)), dtype_of<std::remove_cv_t<T>>(), kCpu, numel};
}

class Tensor {
 public:
  Tensor() = default;
  Tensor(Allocator& allocator, DType dtype, size_t numel);
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  TensorView view() const { return {data_, dtype_, device(), numel_}; }
  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  size_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * dtype_size(dtype_); }
  Device device() const { return allocator_ ? allocator_->device() : Device{}; }
  template <typename T>
  T* as() const {
    return view().as<T>();
  }

 private:
  void release() noexcept;
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  size_t numel_ = 0;
};

}  // namespace feast
