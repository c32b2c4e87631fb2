// Safetensors: our writer read back through our reader (F32, BF16, F16, slabs of every rank),
// files from the reference Python library (read exactly, and written byte for byte), each
// kind of malformed header refused with a DataError that names it, a fuzz of truncations and
// header edits that must never crash, and sharded model folders as transformers lays them out.
#include "interop/hf/safetensors_model.h"
#include "interop/hf/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "core/error.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

std::string fixture(const std::string& name) {
  return std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/safetensors/" + name;
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A file from its parts: the length (the header's own unless given), the header, the data.
Bytes make_file(const std::string& header, size_t data_bytes, uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX) length = header.size();
  Bytes b;
  b.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<unsigned char>(length >> (8 * i)));
  for (char c : header) b.push_back(static_cast<unsigned char>(c));
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>(i));
  return b;
}

// Opening `path` throws DataError whose message names the path and every one of `parts`.
void expect_data_error(const std::string& path, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << path << " opened; expected a DataError mentioning " << *parts.begin();
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

// Writes a file with this header and data size and expects opening it to fail so.
void expect_bad_header(const std::string& header, size_t data_bytes, std::initializer_list<std::string> parts) {
  feast::testing::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, make_file(header, data_bytes));
  expect_data_error(path, parts);
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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

void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
    } else {
      EXPECT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

float stored(float x, const std::string& dtype) {
  if (dtype == "BF16") return bf16_to_float(float_to_bf16(x));
  if (dtype == "F16") return f16_to_float(float_to_f16(x));
  return x;
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

// ---------------------------------------------------------------------------------------------
// Malformed files: each problem gets a DataError that says what it is

TEST(SafetensorsMalformed, FileShorterThanTheLength) {
  feast::testing::TempDir dir;
  write_bytes(dir.file("s"), Bytes{1, 0, 0, 0, 0});
  expect_data_error(dir.file("s"), {"5 bytes", "fewer than the 8"});
  write_bytes(dir.file("e"), Bytes{});
  expect_data_error(dir.file("e"), {"0 bytes"});
}

TEST(SafetensorsMalformed, HeaderLengthPastTheEndOfTheFile) {
  feast::testing::TempDir dir;
  write_bytes(dir.file("f"), make_file("{}", 0, 1000));
  expect_data_error(dir.file("f"), {"1000 bytes", "only 2 follow"});
  write_bytes(dir.file("g"), make_file("{}", 0, UINT64_MAX - 3));  // 8 + N would overflow
  expect_data_error(dir.file("g"), {"header length"});
}

TEST(SafetensorsMalformed, AbsurdHeaderLength) {
  feast::testing::TempDir dir;
  write_bytes(dir.file("f"), make_file("{}", 0, uint64_t(1) << 40));
  expect_data_error(dir.file("f"), {"over the 100000000"});
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  expect_bad_header("{\"w\": {\"dtype\": \"F32\", ", 0, {"not valid JSON"});
  expect_bad_header("", 0, {"not valid JSON"});
  expect_bad_header("{} trailing", 0, {"not valid JSON"});
  expect_bad_header(std::string("{}\0\0\0\0\0\0", 8), 0, {"not valid JSON", "NUL byte at offset 2"});
  expect_bad_header(std::string("{\"a\0\": 1}", 9), 0, {"not valid JSON"});
}

TEST(SafetensorsMalformed, HeaderNotUtf8) {
  expect_bad_header("{\"w\xff\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}", 4,
                    {"not valid JSON", "UTF-8"});
  expect_bad_header("{\"__metadata__\": {\"k\": \"\xc3\x28\"}}", 0, {"not valid JSON", "UTF-8"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  expect_bad_header("[1, 2]", 0, {"is a JSON array, not an object"});
  expect_bad_header("\"text\"", 0, {"not an object"});
}

TEST(SafetensorsMalformed, RepeatedKey) {
  expect_bad_header(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      8, {"repeats the key 'w'"});
  expect_bad_header(R"({"w": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}})", 4,
                    {"repeats the key 'dtype'"});
}

TEST(SafetensorsMalformed, DeeplyNestedHeaderIsRefusedWithoutRecursion) {
  const size_t depth = 1'000'000;  // deep enough to overflow the stack of a recursive walk
  expect_bad_header(std::string(depth, '[') + std::string(depth, ']'), 0, {"more than 64 levels deep (at byte 64)"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [)" + std::string(depth, '[') + std::string(depth, ']') +
                        R"(], "data_offsets": [0, 4]}})",
                    4, {"levels deep"});
  // Brackets inside strings do not count; a nested shape entry is named by its type.
  feast::testing::TempDir dir;
  write_bytes(dir.file("s"), make_file(R"({"__metadata__": {"k": ")" + std::string(1000, '[') + R"(\"["}})", 0));
  EXPECT_EQ(SafetensorsFile(dir.file("s")).metadata().at("k"), std::string(1000, '[') + "\"[");
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [[[1]]], "data_offsets": [0, 4]}})", 4,
                    {"tensor 'w'", "shape entry a JSON array is not"});
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  expect_bad_header(R"({"w": [1, 2]})", 0, {"tensor 'w'", "not an object"});
}

TEST(SafetensorsMalformed, MissingFields) {
  expect_bad_header(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, {"tensor 'w'", "\"dtype\" field is missing"});
  expect_bad_header(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, {"tensor 'w'", "\"shape\" field is missing"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1]}})", 4, {"tensor 'w'", "\"data_offsets\" field is missing"});
}

TEST(SafetensorsMalformed, DtypeWrongTypeOrUnknown) {
  expect_bad_header(R"({"w": {"dtype": 32, "shape": [1], "data_offsets": [0, 4]}})", 4, {"tensor 'w'", "\"dtype\" is not a string"});
  expect_bad_header(R"({"w": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}})", 4, {"tensor 'w'", "unknown dtype \"F31\""});
  expect_bad_header(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", 4, {"unknown dtype \"f32\""});
}

TEST(SafetensorsMalformed, ShapeNotNonNegativeIntegers) {
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", 16, {"tensor 'w'", "\"shape\" is not an array"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", 16, {"tensor 'w'", "shape entry -4"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}})", 16, {"tensor 'w'", "not a non-negative integer"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": ["4"], "data_offsets": [0, 16]}})", 16, {"tensor 'w'", "not a non-negative integer"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 16]}})", 16,
                    {"tensor 'w'", "not a non-negative integer"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1e30], "data_offsets": [0, 16]}})", 16, {"not a non-negative integer"});
}

TEST(SafetensorsMalformed, ElementCountOverflow) {
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0,
                    {"tensor 'w'", "more elements than 64 bits"});
  // The count fits in 64 bits, its bytes do not.
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0,
                    {"tensor 'w'", "too large"});
  // A huge product with a zero in it is an empty tensor, not an overflow.
  feast::testing::TempDir dir;
  write_bytes(dir.file("z"),
              make_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})", 0));
  const SafetensorsFile f(dir.file("z"));
  EXPECT_EQ(f.find("w")->numel(), 0);
}

TEST(SafetensorsMalformed, DataOffsetsNotTwoOrderedNonNegativeIntegers) {
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": 4}})", 4, {"tensor 'w'", "not two non-negative integers"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8, {"tensor 'w'", "not two"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4, {"tensor 'w'", "not two"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.5]}})", 4, {"tensor 'w'", "not two"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8, {"tensor 'w'", "begin after they end"});
}

TEST(SafetensorsMalformed, ByteRangeDoesNotMatchDtypeAndShape) {
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20,
                    {"tensor 'w'", "hold 20 bytes", "F32 of shape [2, 3] needs 24"});
  expect_bad_header(R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})", 24, {"tensor 'w'", "needs 12"});
  // Sub-byte types must fill whole bytes.
  expect_bad_header(R"({"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}})", 2, {"tensor 'w'", "whole bytes"});
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      12, {"tensor 'b'", "overlaps tensor 'a'"});
  // The same range twice.
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
      8, {"overlaps"});
  // A zero-size tensor inside another's data.
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
      8, {"tensor 'z'", "overlaps tensor 'a'"});
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  expect_bad_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})",
      20, {"tensor 'b'", "gap of 4 unused bytes [8, 12)"});
  expect_bad_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, {"tensor 'a'", "gap of 4"});
}

TEST(SafetensorsMalformed, BytesPastTheLastTensor) {
  expect_bad_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12,
                    {"4 bytes past the last tensor"});
  expect_bad_header("{}", 1, {"1 bytes past the last tensor"});
}

TEST(SafetensorsMalformed, TensorRunsPastTheEndOfTheFile) {
  expect_bad_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4,
                    {"tensor 'a'", "runs past the end of the file"});
  expect_bad_header(
      R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [18446744073709551615, 18446744073709551615]}})", 0,
      {"tensor 'a'", "not two non-negative integers"});
  expect_bad_header(
      R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [9223372036854775807, 9223372036854775807]}})", 0,
      {"tensor 'a'", "runs past the end"});
}

TEST(SafetensorsMalformed, MetadataNotStringToString) {
  expect_bad_header(R"({"__metadata__": ["format", "pt"]})", 0, {"__metadata__ is not an object"});
  expect_bad_header(R"({"__metadata__": {"format": 1}})", 0, {"__metadata__ key 'format'", "only strings"});
  expect_bad_header(R"({"__metadata__": {"nested": {"a": "b"}}})", 0, {"__metadata__ key 'nested'"});
}

TEST(SafetensorsEdgeCases, ZeroSizeTensorsEmptyFilesAndPaddingAreLegal) {
  feast::testing::TempDir dir;
  write_bytes(dir.file("empty"), make_file("{}", 0));
  EXPECT_TRUE(SafetensorsFile(dir.file("empty")).tensors().empty());
  write_bytes(dir.file("null_meta"), make_file(R"({"__metadata__": null}      )", 0));
  EXPECT_TRUE(SafetensorsFile(dir.file("null_meta")).metadata().empty());
  // Zero-size tensors before, between and after others; sub-byte F4 filling whole bytes.
  write_bytes(dir.file("z"), make_file(R"({"z0": {"dtype": "F32", "shape": [0, 5], "data_offsets": [0, 0]},
      "a": {"dtype": "F4", "shape": [2, 2], "data_offsets": [0, 2]},
      "z1": {"dtype": "BF16", "shape": [3, 0], "data_offsets": [2, 2]},
      "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
      "z2": {"dtype": "I64", "shape": [0], "data_offsets": [4, 4]}})",
                                       4));
  const SafetensorsFile f(dir.file("z"));
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.find("z1")->numel(), 0);
  EXPECT_TRUE(f.read_f32("z0").empty());
  EXPECT_TRUE(f.read_f32("z1").empty());
  EXPECT_EQ(f.bytes(*f.find("b"))[0], 2);
}

// ---------------------------------------------------------------------------------------------
// Fuzz: damage a valid file every which way; opening it succeeds (and then every read stays in
// bounds) or throws DataError, nothing else.

// Opens `path`; true when it opened and every tensor read. Any exception but DataError fails.
bool open_and_read_all(const std::string& path, const std::string& what) {
  try {
    const SafetensorsFile f(path);
    for (const auto& t : f.tensors()) {
      const int bits = safetensors_dtype_bits(t.dtype);
      EXPECT_GT(bits, 0);
      EXPECT_LE(t.end, uint64_t(fs::file_size(path)));
      unsigned sum = 0;
      for (uint64_t i = 0; i < t.end - t.begin; ++i) sum += f.bytes(t)[i];  // in bounds (ASan would see)
      (void)sum;
      if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64") {
        std::vector<float> out(size_t(t.numel()));
        f.read_f32(t.name, std::vector<int64_t>(t.shape.size(), 0), t.shape, out.data());
      }
    }
    return true;
  } catch (const DataError&) {
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << typeid(e).name() << ": " << e.what();
    return false;
  }
}

TEST(SafetensorsFuzz, TruncationsAndHeaderEditsGiveDataErrorOrAValidFile) {
  feast::testing::TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("h":{"dtype":"F16","shape":[3],"data_offsets":[24,30]},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[30,32]},)"
      R"("d":{"dtype":"F64","shape":[],"data_offsets":[32,40]},"i":{"dtype":"I64","shape":[2],"data_offsets":[40,56]},)"
      R"("z":{"dtype":"F32","shape":[0],"data_offsets":[56,56]}})";
  const Bytes valid = make_file(header, 56);
  const std::string path = dir.file("fuzz.safetensors");
  write_bytes(path, valid);
  ASSERT_TRUE(open_and_read_all(path, "the valid file"));

  // Every truncation: none is a valid file (the data must fill to the end).
  for (size_t len = 0; len < valid.size(); ++len) {
    write_bytes(path, Bytes(valid.begin(), valid.begin() + long(len)));
    EXPECT_FALSE(open_and_read_all(path, "truncated to " + std::to_string(len))) << len;
  }

  std::mt19937 rng(2024);
  const size_t header_end = 8 + header.size();
  int opened = 0;
  // Bit flips in the length and the header.
  for (int i = 0; i < 300; ++i) {
    Bytes b = valid;
    const size_t at = rng() % header_end;
    b[at] = static_cast<unsigned char>(b[at] ^ (1u << (rng() % 8)));
    if (i % 3 == 0) {  // sometimes two
      const size_t at2 = rng() % header_end;
      b[at2] = static_cast<unsigned char>(b[at2] ^ (1u << (rng() % 8)));
    }
    write_bytes(path, b);
    opened += open_and_read_all(path, "bit flip " + std::to_string(i));
  }
  // Digit edits, which keep the JSON valid and so reach the shape and offset checks.
  std::vector<size_t> digits;
  for (size_t k = 8; k < header_end; ++k)
    if (std::isdigit(valid[k])) digits.push_back(k);
  for (int i = 0; i < 300; ++i) {
    Bytes b = valid;
    for (int k = 0; k < 1 + i % 2; ++k) b[digits[rng() % digits.size()]] = static_cast<unsigned char>('0' + rng() % 10);
    write_bytes(path, b);
    opened += open_and_read_all(path, "digit edit " + std::to_string(i));
  }
  // Some edits are harmless (a metadata letter, a digit rewritten to itself); most are not.
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 300);
}

// ---------------------------------------------------------------------------------------------
// Model folders

struct ModelSource {
  std::vector<std::vector<float>> values;
  std::vector<TensorToWrite> tensors;
};

// Tensors of 40, 40, 40, 200, 12 and 12 bytes in F32.
ModelSource model_source() {
  ModelSource m;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"embed.weight", {2, 5}}, {"layers.0.w", {10}}, {"layers.1.w", {5, 2}},
      {"big", {5, 10}},         {"norm.a", {3}},      {"norm.b", {1, 3}}};
  unsigned seed = 10;
  for (const auto& [name, shape] : specs) m.values.push_back(random_floats(size_t(product(shape)), seed++));
  for (size_t i = 0; i < specs.size(); ++i) m.tensors.push_back({specs[i].first, specs[i].second, m.values[i].data()});
  return m;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

TEST(SafetensorsModel, OneFileWhenEverythingFits) {
  feast::testing::TempDir dir;
  const ModelSource src = model_source();
  EXPECT_EQ(write_safetensors_model(dir.path(), src.tensors, 0), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(write_safetensors_model(dir.path(), src.tensors, 344), std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.names().size(), src.tensors.size());
  EXPECT_EQ(model.file_of("big").metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  for (size_t i = 0; i < src.tensors.size(); ++i)
    expect_same_floats(model.read_f32(src.tensors[i].name), src.values[i], src.tensors[i].name);
}

TEST(SafetensorsModel, ShardedFolderAsTransformersWritesIt) {
  feast::testing::TempDir dir;
  const ModelSource src = model_source();
  // In BF16 the tensors take 20, 20, 20, 100, 6 and 6 bytes. Limit 50: [20 + 20], [20] (+100
  // overflows), [100] alone (over the limit), [6 + 6].
  const std::vector<std::string> files = write_safetensors_model(dir.path(), src.tensors, 50, "BF16");
  EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                             "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                             "model.safetensors.index.json"}));
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  const nlohmann::json index = read_json(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], (10 + 10 + 10 + 50 + 3 + 3) * 2);
  const nlohmann::json want_map = {{"embed.weight", "model-00001-of-00004.safetensors"},
                                   {"layers.0.w", "model-00001-of-00004.safetensors"},
                                   {"layers.1.w", "model-00002-of-00004.safetensors"},
                                   {"big", "model-00003-of-00004.safetensors"},
                                   {"norm.a", "model-00004-of-00004.safetensors"},
                                   {"norm.b", "model-00004-of-00004.safetensors"}};
  EXPECT_EQ(index["weight_map"], want_map);

  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.files().size(), 4u);
  EXPECT_EQ(model.names(), (std::vector<std::string>{"big", "embed.weight", "layers.0.w", "layers.1.w", "norm.a", "norm.b"}));
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    const std::string& name = src.tensors[i].name;
    EXPECT_EQ(fs::path(model.file_of(name).path()).filename().string(), want_map[name].get<std::string>());
    EXPECT_EQ(model.find(name)->dtype, "BF16");
    EXPECT_EQ(model.file_of(name).metadata().at("format"), "pt");
    std::vector<float> want;
    for (float x : src.values[i]) want.push_back(stored(x, "BF16"));
    expect_same_floats(model.read_f32(name), want, name);
  }
  float slab[4];
  model.read_f32("big", std::vector<int64_t>{3, 6}, std::vector<int64_t>{2, 2}, slab);
  EXPECT_EQ(slab[3], stored(src.values[3][4 * 10 + 7], "BF16"));
  EXPECT_EQ(model.find("absent"), nullptr);
  EXPECT_THROW(model.file_of("absent"), DataError);

  // Exporting again unsharded removes the shards and the index.
  write_safetensors_model(dir.path(), src.tensors, 0);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file("model-00001-of-00004.safetensors")));
  EXPECT_EQ(SafetensorsModel(dir.path()).files().size(), 1u);
}

void expect_model_error(const std::string& folder, std::initializer_list<std::string> parts) {
  try {
    SafetensorsModel m(folder);
    ADD_FAILURE() << folder << " opened";
  } catch (const DataError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: " << e.what();
  }
}

TEST(SafetensorsModel, FolderWithoutWeightsNamesWhatItLookedFor) {
  feast::testing::TempDir dir;
  expect_model_error(dir.path(), {dir.path(), "model.safetensors", "model.safetensors.index.json"});
  expect_model_error(dir.file("absent"), {"no such model folder"});
}

TEST(SafetensorsModel, MissingShardIsAnError) {
  feast::testing::TempDir dir;
  write_safetensors_model(dir.path(), model_source().tensors, 100);
  fs::remove(dir.file("model-00002-of-00004.safetensors"));
  expect_model_error(dir.path(), {"model-00002-of-00004.safetensors", "missing", "layers.1.w"});
}

TEST(SafetensorsModel, IndexNamingTheWrongFileIsAnError) {
  feast::testing::TempDir dir;
  write_safetensors_model(dir.path(), model_source().tensors, 100);
  nlohmann::json index = read_json(dir.file("model.safetensors.index.json"));
  index["weight_map"]["layers.1.w"] = "model-00001-of-00004.safetensors";
  write_text(dir.file("model.safetensors.index.json"), index.dump());
  expect_model_error(dir.path(), {"'layers.1.w'", "model-00001-of-00004.safetensors", "does not hold it"});
}

TEST(SafetensorsModel, TensorInTwoShardsIsAnError) {
  feast::testing::TempDir dir;
  const std::vector<float> v = random_floats(4, 1);
  write_safetensors(dir.file("a.safetensors"), {{"x", {4}, v.data()}, {"y", {4}, v.data()}}, {});
  write_safetensors(dir.file("b.safetensors"), {{"x", {4}, v.data()}}, {});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  expect_model_error(dir.path(), {"'x'", "in both"});
}

// transformers loads every tensor of a shard, listed or not (exports of GPT-2 keep attention-mask
// buffers out of the index but in the shards).
TEST(SafetensorsModel, ShardHoldingATensorTheIndexOmitsIsRead) {
  feast::testing::TempDir dir;
  const std::vector<float> v = random_floats(4, 1), w = random_floats(4, 2);
  write_safetensors(dir.file("a.safetensors"), {{"x", {4}, v.data()}, {"extra", {4}, w.data()}}, {});
  write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "a.safetensors"}})");
  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.names(), (std::vector<std::string>{"extra", "x"}));
  expect_same_floats(model.read_f32("x"), v, "x");
  expect_same_floats(model.read_f32("extra"), w, "extra");
}

TEST(SafetensorsModel, MalformedIndexIsAnError) {
  feast::testing::TempDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  write_text(index, "{\"weight_map\": ");
  expect_model_error(dir.path(), {index, "not valid JSON"});
  write_text(index, R"({"metadata": {"total_size": 0}})");
  expect_model_error(dir.path(), {index, "weight_map"});
  write_text(index, R"({"weight_map": {"x": 3}})");
  expect_model_error(dir.path(), {"'x'", "not a file name"});
  // A damaged shard is reported with its own path.
  write_bytes(dir.file("s.safetensors"), make_file("{}", 3));
  write_text(index, R"({"weight_map": {"x": "s.safetensors"}})");
  expect_model_error(dir.path(), {dir.file("s.safetensors"), "past the last tensor"});
}

TEST(SafetensorsModel, SingleFileIsPreferredOverAnIndex) {
  feast::testing::TempDir dir;
  const ModelSource src = model_source();
  write_safetensors(dir.file("model.safetensors"), src.tensors, {});
  write_text(dir.file("model.safetensors.index.json"), "broken");
  const SafetensorsModel model(dir.path());
  EXPECT_EQ(model.names().size(), src.tensors.size());
}

TEST(SafetensorsWrite, BadInputsAndUnwritablePathsAreErrors) {
  feast::testing::TempDir dir;
  const std::vector<float> v(4, 1.0f);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {4}, v.data()}}, {}, "F64"), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {4}, v.data()}, {"x", {4}, v.data()}}, {}), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"__metadata__", {4}, v.data()}}, {}), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {-4}, v.data()}}, {}), Error);
  EXPECT_THROW(write_safetensors(dir.file("a"), {{"x", {4}, nullptr}}, {}), Error);
  try {
    write_safetensors(dir.file("no/such/dir/a.safetensors"), {{"x", {4}, v.data()}}, {});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("no/such/dir/a.safetensors")), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("a")));
}

}  // namespace
}  // namespace feast
