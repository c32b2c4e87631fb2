// What the safetensors tests share: files built byte by byte, random tensors and how they read
// back at each stored dtype.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/bfloat16.h"

namespace feast::testing {

using Bytes = std::vector<unsigned char>;

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A file from its parts: the length (the header's own unless given), the header, the data.
inline Bytes make_file(const std::string& header, size_t data_bytes, uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX) length = header.size();
  Bytes b;
  b.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<unsigned char>(length >> (8 * i)));
  for (char c : header) b.push_back(static_cast<unsigned char>(c));
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>(i));
  return b;
}

inline std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
    } else {
      EXPECT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

inline float stored(float x, const std::string& dtype) {
  if (dtype == "BF16") return bf16_to_float(float_to_bf16(x));
  if (dtype == "F16") return f16_to_float(float_to_f16(x));
  return x;
}

}  // namespace feast::testing
