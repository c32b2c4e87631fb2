// Reader for golden-data fixtures written by tests/fixtures/*.py: b"FEASTFIX", u32 version (1),
// u32 count, then named float32 arrays (u32 name length, name, u32 ndim, i64 dims, data).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace feast::testing {

struct FixtureArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

inline std::map<std::string, FixtureArray> read_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open fixture");
  auto read = [&](void* dst, size_t n) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in) throw std::runtime_error(path + ": truncated fixture");
  };
  char magic[8];
  read(magic, 8);
  if (std::memcmp(magic, "FEASTFIX", 8) != 0) throw std::runtime_error(path + ": bad magic");
  uint32_t version = 0, count = 0;
  read(&version, 4);
  read(&count, 4);
  if (version != 1) throw std::runtime_error(path + ": unknown fixture version");
  std::map<std::string, FixtureArray> arrays;
  for (uint32_t a = 0; a < count; ++a) {
    uint32_t len = 0, ndim = 0;
    read(&len, 4);
    std::string name(len, '\0');
    read(name.data(), len);
    read(&ndim, 4);
    FixtureArray arr;
    arr.shape.resize(ndim);
    read(arr.shape.data(), 8 * ndim);
    size_t n = 1;
    for (int64_t d : arr.shape) n *= static_cast<size_t>(d);
    arr.data.resize(n);
    read(arr.data.data(), 4 * n);
    arrays.emplace(std::move(name), std::move(arr));
  }
  return arrays;
}

}  // namespace feast::testing
