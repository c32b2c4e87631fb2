// Safetensors: our writer read back through our reader (F32, BF16, F16, slabs of every rank),
// and files from the reference Python library (read exactly, and written byte for byte).
// Malformed files: safetensors_malformed_test.cpp; model folders: safetensors_model_test.cpp.
#include "interop/hf/safetensors_model.h"
#include "interop/hf/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "core/error.h"
#include "tests/interop/hf/safetensors_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

namespace fs = std::filesystem;
using namespace ::feast::testing;  // safetensors_test_helpers.h

std::string fixture(const std::string& name) {
  return std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/safetensors/" + name;
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The slab start/count of a row-major array, element by element (the reference for read_f32).
std::vector<float> naive_slab(const std::vector<float>& full, const std::vector<int64_t>& shape,
                              const std::vector<int64_t>& start, const std::vector<int64_t>& count) {
  std::vector<float> out;
  const int64_t n = product(count);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, offset = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      offset += (start[d] + rest % count[d]) * stride;
      rest /= count[d];
      stride *= shape[d];
    }
    out.push_back(full[size_t(offset)]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Round trips through our writer and reader

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, WholeTensorsAndSlabsMatchTheSource) {
  const std::string dtype = GetParam();
  feast::testing::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  struct Source {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::vector<Source> src = {{"layers.0.w", {3, 5, 7}, {}}, {"v", {11}, {}}, {"m", {4, 6}, {}},
                             {"scalar", {}, {}},           {"empty", {0, 4}, {}}};
  unsigned seed = 1;
  for (auto& s : src) s.values = random_floats(size_t(product(s.shape)), seed++);
  std::vector<TensorToWrite> tensors;
  for (const auto& s : src) tensors.push_back({s.name, s.shape, s.values.data()});
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "round trip"}}, dtype);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}}));
  ASSERT_EQ(f.tensors().size(), src.size());
  const int bytes = dtype == "F32" ? 4 : 2;
  for (size_t i = 0; i < src.size(); ++i) {
    const SafetensorsTensor& t = f.tensors()[i];  // in the order written
    EXPECT_EQ(t.name, src[i].name);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.shape, src[i].shape);
    EXPECT_EQ(t.numel(), product(src[i].shape));
    EXPECT_EQ(int64_t(t.end - t.begin), t.numel() * bytes);
    EXPECT_EQ(f.find(src[i].name), &t);
    std::vector<float> want;
    for (float x : src[i].values) want.push_back(stored(x, dtype));
    expect_same_floats(f.read_f32(t.name), want, t.name);
  }
  EXPECT_EQ(f.find("absent"), nullptr);
  // The header is padded so the data starts 8-byte aligned, as the Python library writes it.
  const Bytes raw = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | raw[size_t(i)];
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', true);

  // Slabs at odd offsets, and ones whose inner dimensions are whole (read as one run).
  struct Slab {
    size_t source;
    std::vector<int64_t> start, count;
  };
  const std::vector<Slab> slabs = {
      {1, {3}, {5}},          {1, {0}, {11}},          {1, {10}, {1}},          {1, {11}, {0}},
      {2, {1, 2}, {2, 3}},    {2, {3, 5}, {1, 1}},     {2, {1, 0}, {3, 6}},     {2, {0, 5}, {4, 1}},
      {0, {1, 1, 2}, {2, 3, 4}}, {0, {1, 0, 0}, {1, 5, 7}}, {0, {0, 2, 0}, {3, 2, 7}},
      {0, {2, 4, 6}, {1, 1, 1}}, {0, {0, 0, 0}, {3, 5, 7}}, {0, {1, 3, 0}, {2, 0, 7}},
      {3, {}, {}},            {4, {0, 1}, {0, 3}},
  };
  for (const auto& s : slabs) {
    const Source& source = src[s.source];
    std::vector<float> want;
    for (float x : naive_slab(source.values, source.shape, s.start, s.count)) want.push_back(stored(x, dtype));
    std::vector<float> got(want.size() + 1, -123.0f);  // one past the end must stay untouched
    f.read_f32(source.name, s.start, s.count, got.data());
    EXPECT_EQ(got.back(), -123.0f) << source.name;
    got.pop_back();
    expect_same_floats(got, want, source.name + " slab");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RoundTrip, ::testing::Values("F32", "BF16", "F16"));

TEST(SafetensorsRead, SlabOutsideTheShapeOrOfTheWrongRankIsRefused) {
  feast::testing::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::vector<float> v = random_floats(12, 3);
  write_safetensors(path, {{"m", {3, 4}, v.data()}}, {});
  const SafetensorsFile f(path);
  float out[16];
  auto expect_refused = [&](std::vector<int64_t> start, std::vector<int64_t> count, const std::string& part) {
    try {
      f.read_f32("m", start, count, out);
      ADD_FAILURE() << "slab read";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("'m'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_refused({2, 0}, {2, 4}, "leaves its shape [3, 4]");
  expect_refused({0, 3}, {1, 2}, "leaves its shape");
  expect_refused({-1, 0}, {1, 1}, "leaves its shape");
  expect_refused({0, 0}, {1, -1}, "leaves its shape");
  expect_refused({4, 0}, {0, 1}, "leaves its shape");
  expect_refused({0, INT64_MAX}, {1, INT64_MAX}, "leaves its shape");
  expect_refused({0}, {3}, "2 dimensions");
  EXPECT_THROW(f.read_f32("x", std::vector<int64_t>{0}, std::vector<int64_t>{1}, out), DataError);
  EXPECT_THROW(f.read_f32("x"), DataError);
}

TEST(SafetensorsRead, MissingFileIsADataError) {
  feast::testing::TempDir dir;
  EXPECT_THROW(SafetensorsFile(dir.file("nothing.safetensors")), DataError);
  EXPECT_THROW(SafetensorsFile(dir.path()), DataError);  // a directory
}

TEST(SafetensorsRead, MovedFileKeepsItsMapping) {
  feast::testing::TempDir dir;
  const std::vector<float> v = random_floats(5, 4);
  write_safetensors(dir.file("a.safetensors"), {{"x", {5}, v.data()}}, {});
  SafetensorsFile a(dir.file("a.safetensors"));
  SafetensorsFile b(std::move(a));
  expect_same_floats(b.read_f32("x"), v, "moved");
  write_safetensors(dir.file("c.safetensors"), {{"y", {1}, v.data()}}, {});
  SafetensorsFile c(dir.file("c.safetensors"));
  c = std::move(b);
  expect_same_floats(c.read_f32("x"), v, "move-assigned");
  EXPECT_EQ(c.find("y"), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Files of the reference library (tests/fixtures/safetensors/make_tiny.py)

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(SafetensorsReference, ReadsEveryValueOfTheLibrarysFileExactly) {
  const SafetensorsFile f(fixture("tiny.safetensors"));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"source", "make_tiny.py"}}));
  // The library orders data by dtype alignment, then name; tensors() follows the data.
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"i64", "f64", "empty", "f32", "scalar", "bf16", "f16"}));

  expect_same_floats(f.read_f32("f32"), {0.0f, 1.5f, -2.25f, 3.4028234663852886e38f, bits_to_float(1), -0.0f}, "f32");
  const float inf = INFINITY;
  expect_same_floats(f.read_f32("f16"),
                     {1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), inf, -0.0f, NAN, std::ldexp(1.0f, -14)}, "f16");
  expect_same_floats(f.read_f32("bf16"), {1.0f, -3.0f, 0.15625f, std::ldexp(1.0f, 100)}, "bf16");
  expect_same_floats(f.read_f32("f64"), {0.5f, static_cast<float>(1.0 / 3.0)}, "f64");
  expect_same_floats(f.read_f32("scalar"), {7.0f}, "scalar");
  EXPECT_EQ(f.find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(f.find("empty")->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(f.read_f32("empty").empty());
  // A 2-D slab of a bf16 tensor: the second column.
  float col[2];
  f.read_f32("bf16", std::vector<int64_t>{0, 1}, std::vector<int64_t>{2, 1}, col);
  EXPECT_EQ(col[0], -3.0f);
  EXPECT_EQ(col[1], std::ldexp(1.0f, 100));

  const SafetensorsTensor* i64 = f.find("i64");
  ASSERT_NE(i64, nullptr);
  EXPECT_EQ(i64->dtype, "I64");
  ASSERT_EQ(i64->end - i64->begin, 24u);
  int64_t ints[3];
  std::memcpy(ints, f.bytes(*i64), 24);
  EXPECT_EQ(ints[0], 1);
  EXPECT_EQ(ints[1], -2);
  EXPECT_EQ(ints[2], int64_t(1) << 40);
  try {
    f.read_f32("i64");
    ADD_FAILURE() << "read I64 as float";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'i64'"), std::string::npos) << e.what();
  }
}

// make_tiny.py's writer_source(): special values and generated bit patterns.
std::vector<float> writer_source() {
  std::vector<uint32_t> bits = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x477FE000,
                                0x477FF000, 0x477FEFFF, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x3F801000,
                                0x3F803000, 0x33000000, 0x33C00000, 0x38800000};
  uint32_t x = 12345;
  while (bits.size() < 96) {
    x = x * 1103515245u + 12345u;
    const uint32_t r1 = x;
    x = x * 1103515245u + 12345u;
    const uint32_t r2 = x;
    bits.push_back((r1 & 0x80000000u) | ((100 + (r1 >> 8) % 50) << 23) | (r2 & 0x7FFFFFu));
  }
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(bits_to_float(b));
  return v;
}

class WriterMatchesReference : public ::testing::TestWithParam<std::string> {};

TEST_P(WriterMatchesReference, ByteForByte) {
  const std::string dtype = GetParam();
  std::string lower = dtype;
  for (auto& c : lower) c = char(std::tolower(c));
  const std::vector<float> v = writer_source();
  feast::testing::TempDir dir;
  const std::string path = dir.file("ours.safetensors");
  write_safetensors(path, {{"a", {8, 12}, v.data()}, {"b", {}, v.data() + 9}, {"c", {0, 3}, nullptr}},
                    {{"format", "pt"}}, dtype);
  const Bytes ours = read_bytes(path), theirs = read_bytes(fixture("writer_" + lower + ".safetensors"));
  ASSERT_EQ(ours.size(), theirs.size());
  const SafetensorsFile f(path);
  const size_t data = ours.size() - (f.tensors().back().end);
  EXPECT_TRUE(std::equal(ours.begin(), ours.begin() + long(data), theirs.begin())) << "the headers differ";
  // Every element the same, except that torch writes bf16 NaN as 0xFFFF and we as 0x7FC0:
  // both are NaN, so a NaN only has to stay one.
  const size_t esize = dtype == "F32" ? 4 : 2;
  for (size_t i = 0; i * esize + data < ours.size(); ++i) {
    const size_t at = data + i * esize;
    if (std::isnan(v[i % 96])) {
      const SafetensorsFile ref(fixture("writer_" + lower + ".safetensors"));
      EXPECT_TRUE(std::isnan(ref.read_f32("a")[i])) << i;
      EXPECT_TRUE(std::isnan(f.read_f32("a")[i])) << i;
      continue;
    }
    EXPECT_TRUE(std::equal(ours.begin() + long(at), ours.begin() + long(at + esize), theirs.begin() + long(at)))
        << dtype << " element " << i << " (source bits 0x" << std::hex << [&] {
             uint32_t b;
             std::memcpy(&b, &v[i % 96], 4);
             return b;
           }() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WriterMatchesReference, ::testing::Values("F32", "BF16", "F16"));

#if defined(__FLT16_MAX__)
// The compiler's _Float16 conversions (libgcc's soft-float routines) as an independent check.
TEST(HalfConversion, WideningIsExactForAllHalves) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 x;
    const uint16_t hh = uint16_t(h);
    std::memcpy(&x, &hh, 2);
    const float want = static_cast<float>(x), got = f16_to_float(hh);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      EXPECT_EQ(float_to_f16(got) & 0x7C00u, 0x7C00u);  // still NaN after the round trip
      EXPECT_NE(float_to_f16(got) & 0x3FFu, 0u);
    } else {
      EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << h;
      EXPECT_EQ(float_to_f16(got), hh) << h;  // every half survives the round trip
    }
  }
}

TEST(HalfConversion, NarrowingRoundsAsTheCompilerDoes) {
  std::mt19937 rng(7);
  auto check = [](uint32_t bits) {
    const float f = bits_to_float(bits);
    const _Float16 want = static_cast<_Float16>(f);
    uint16_t w;
    std::memcpy(&w, &want, 2);
    if (std::isnan(f)) return;
    EXPECT_EQ(float_to_f16(f), w) << std::hex << "0x" << bits;
  };
  for (int i = 0; i < 200000; ++i) check(uint32_t(rng()));
  // Every float in the half range's edges: around subnormals, ties, and overflow.
  for (uint32_t b = 0x33000000u - 4096; b < 0x33000000u + 4096; ++b) check(b);
  for (uint32_t b = 0x38800000u - 65536; b < 0x38800000u + 65536; ++b) check(b);
  for (uint32_t b = 0x477FE000u - 8192; b < 0x47800000u + 8192; ++b) check(b);
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m : {0x0u, 0x1000u, 0x3000u, 0x0FFFu, 0x1001u, 0x7FFFFFu, 0x400000u})
      check((e << 23) | m), check(0x80000000u | (e << 23) | m);
}
#endif

}  // namespace
}  // namespace feast
