// An owning, 64-byte aligned, fixed-size array of T in host memory. Flat parameter, gradient
// and activation buffers are Buffers; the step never allocates (views index into them).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace feast {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : size_(n) {
    if (n == 0) return;
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!p) throw std::bad_alloc();
    std::memset(static_cast<void*>(p), 0, bytes);
    data_.reset(p);
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }
  void zero() {
    if (size_) std::memset(static_cast<void*>(data()), 0, size_ * sizeof(T));
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace feast
