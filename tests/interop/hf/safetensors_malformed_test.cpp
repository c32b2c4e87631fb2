// Malformed safetensors files: each kind of malformed header refused with a DataError that names
// it, and a fuzz of truncations and header edits that must never crash.
#include "interop/hf/safetensors_model.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "tests/interop/hf/safetensors_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

namespace fs = std::filesystem;
using namespace ::feast::testing;  // safetensors_test_helpers.h

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

}  // namespace
}  // namespace feast
