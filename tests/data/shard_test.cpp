// Shard format: both versions round-trip exactly, and every kind of wrong file is rejected with
// a message that names the path and the problem.
#include "data/shard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;

std::vector<int32_t> read_all(const Shard& s) {
  std::vector<int32_t> out(static_cast<size_t>(s.size()));
  s.read(0, s.size(), out.data());
  return out;
}

// Writes a header with the given fields followed by `payload_bytes` zero bytes.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t count,
               size_t payload_bytes) {
  std::vector<int32_t> header(kShardHeaderInts, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
  const std::vector<char> zeros(payload_bytes, 0);
  f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

// The DataError message of opening path; fails the test if opening succeeds.
std::string open_error(const std::string& path) {
  try {
    Shard s(path);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "opening " << path << " did not throw";
  return "";
}

TEST(Shard, Version1RoundTripsAndIsLlmcLayout) {
  TempDir dir;
  const std::string path = dir.file("v1.bin");
  const std::vector<int32_t> tokens = {0, 1, 255, 256, 50256, 65535, 7};
  write_shard(path, tokens, TokenWidth::u16);

  Shard s(path);
  EXPECT_EQ(s.width(), TokenWidth::u16);
  EXPECT_EQ(s.format().version, 1);
  EXPECT_EQ(s.size(), 7);
  EXPECT_EQ(read_all(s), tokens);

  // Byte layout as llm.c writes it: int32 header then uint16 tokens.
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 1024u + 7 * 2);
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 7);
  uint16_t fifth;
  std::memcpy(&fifth, bytes.data() + 1024 + 4 * 2, 2);
  EXPECT_EQ(fifth, 50256);
}

TEST(Shard, WideIdsAreWrittenInLlmcsLlama3Layout) {
  TempDir dir;
  const std::string path = dir.file("v7.bin");
  const std::vector<int32_t> tokens = {0, 65536, 100000, 128255, 3};
  write_shard(path, tokens, TokenWidth::u32);
  Shard s(path);
  EXPECT_EQ(s.width(), TokenWidth::u32);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(read_all(s), tokens);
  EXPECT_EQ(s.max_token(), 128255);
  // Byte for byte what llm.c's write_datafile(..., "llama-3") writes: magic 20240801, version 7.
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 1024u + 5 * 4);
  int32_t header[4];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 5);
  EXPECT_EQ(header[3], 0);
  uint32_t third;
  std::memcpy(&third, bytes.data() + 1024 + 2 * 4, 4);
  EXPECT_EQ(third, 100000u);
}

TEST(Shard, ReadsAShardLaidOutAsLlmcWritesIt) {
  // Built here byte by byte as llm.c's dev/data/data_common.py lays it out: 256 int32 header
  // (magic 20240801, version 7, count, zeros), then uint32 tokens.
  TempDir dir;
  const std::string path = dir.file("llmc_llama3.bin");
  const std::vector<uint32_t> tokens = {128000, 9906, 1917, 0, 128001};
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = 7;
  header[2] = int32_t(tokens.size());
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
  }
  Shard s(path);
  EXPECT_EQ(s.width(), TokenWidth::u32);
  EXPECT_EQ(read_all(s), (std::vector<int32_t>{128000, 9906, 1917, 0, 128001}));
}

TEST(Shard, ReadsFeastsEarlierUint32Shards) {
  TempDir dir;
  const std::string path = dir.file("v2.bin");
  write_raw(path, 20240520, 2, 2, 8);
  Shard s(path);
  EXPECT_EQ(s.width(), TokenWidth::u32);
  EXPECT_EQ(s.size(), 2);
}

TEST(Shard, ReadsARangeAndRejectsOneOutside) {
  TempDir dir;
  const std::string path = dir.file("r.bin");
  write_shard(path, std::vector<int32_t>{10, 11, 12, 13, 14}, TokenWidth::u16);
  Shard s(path);
  std::vector<int32_t> out(3);
  s.read(2, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{12, 13, 14}));
  EXPECT_THROW(s.read(3, 3, out.data()), DataError);
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  const std::string path = dir.file("e.bin");
  write_shard(path, std::vector<int32_t>{}, TokenWidth::u16);
  Shard s(path);
  EXPECT_EQ(s.size(), 0);
  EXPECT_EQ(s.max_token(), -1);
}

TEST(Shard, MoveKeepsTheMapping) {
  TempDir dir;
  const std::string path = dir.file("m.bin");
  write_shard(path, std::vector<int32_t>{4, 5, 6}, TokenWidth::u16);
  Shard a(path);
  Shard b(std::move(a));
  EXPECT_EQ(read_all(b), (std::vector<int32_t>{4, 5, 6}));
  Shard c(path);
  c = std::move(b);
  EXPECT_EQ(read_all(c), (std::vector<int32_t>{4, 5, 6}));
}

TEST(Shard, WriterRefusesIdsThatDoNotFit) {
  TempDir dir;
  const std::string path = dir.file("big.bin");
  try {
    write_shard(path, std::vector<int32_t>{1, 2, 65536}, TokenWidth::u16);
    FAIL() << "65536 was written as uint16";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("65536"), std::string::npos) << msg;
    EXPECT_NE(msg.find("uint16"), std::string::npos) << msg;
  }
  EXPECT_THROW(write_shard(path, std::vector<int32_t>{-1}, TokenWidth::u32), DataError);
  // Neither the shard nor its temporary file is left behind.
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Shard, WriteReplacesAnExistingShardAtomically) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  write_shard(path, std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  write_shard(path, std::vector<int32_t>{9}, TokenWidth::u32);
  Shard s(path);
  EXPECT_EQ(s.width(), TokenWidth::u32);
  EXPECT_EQ(read_all(s), std::vector<int32_t>{9});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Shard, AnUnknownHeaderNamesWhatWasFoundAndEveryAcceptedFormat) {
  TempDir dir;
  for (auto [magic, version] : {std::pair{12345, 1}, std::pair{20240520, 3}, std::pair{20240801, 1}}) {
    const std::string path = dir.file("unknown.bin");
    write_raw(path, magic, version, 0, 0);
    const std::string msg = open_error(path);
    EXPECT_NE(msg.find(path + ": header has magic " + std::to_string(magic) + " and version " +
                       std::to_string(version)),
              std::string::npos)
        << msg;
    for (const ShardFormat& f : kShardFormats) EXPECT_NE(msg.find(f.name), std::string::npos) << msg;
  }
}

TEST(Shard, RejectsTruncatedFile) {
  TempDir dir;
  const std::string path = dir.file("trunc.bin");
  write_raw(path, 20240520, 1, 10, 19);  // 10 uint16 tokens need 20 bytes
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1043 bytes"), std::string::npos) << msg;
}

TEST(Shard, RejectsTrailingBytes) {
  TempDir dir;
  const std::string path = dir.file("trail.bin");
  write_raw(path, 20240801, 7, 2, 8 + 3);  // 2 uint32 tokens plus 3 stray bytes
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 trailing bytes"), std::string::npos) << msg;
}

TEST(Shard, RejectsFileShorterThanHeader) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  std::ofstream(path, std::ios::binary) << "hello";
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 bytes, shorter than the 1024-byte header"), std::string::npos) << msg;
}

TEST(Shard, RejectsMissingFile) {
  TempDir dir;
  const std::string path = dir.file("nope.bin");
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(path + ": cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

TEST(Shard, WidthForVocab) {
  EXPECT_EQ(width_for_vocab(256), TokenWidth::u16);
  EXPECT_EQ(width_for_vocab(65536), TokenWidth::u16);
  EXPECT_EQ(width_for_vocab(65537), TokenWidth::u32);
}

}  // namespace
}  // namespace feast
