// The one atomic writer and the one mapped-file reader: what a reader of the path sees when a
// write succeeds, fails or is abandoned, and what opening, reading and mapping give or refuse.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/mapped_file.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicFile, CommitReplacesTheFileWholeAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  std::ofstream(path) << "old";
  {
    AtomicFile f(path);
    f.write("new ");
    f.write("contents");
    EXPECT_EQ(contents(path), "old");  // nothing is seen before the commit
    f.commit();
  }
  EXPECT_EQ(contents(path), "new contents");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(AtomicFile, AnAbandonedWriteLeavesTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  std::ofstream(path) << "old";
  try {
    AtomicFile f(path);
    f.write("half of it");
    throw Error("the writer failed midway");
  } catch (const Error&) {
  }
  EXPECT_EQ(contents(path), "old");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(AtomicFile, AFolderThatIsAFileIsNamed) {
  TempDir dir;
  std::ofstream(dir.file("plain")) << "a file, not a folder";
  try {
    write_file_atomically(dir.file("plain/out.txt"), "x");
    ADD_FAILURE() << "a write under a regular file succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("plain/out.txt.tmp") + ": cannot open for writing: Not a directory"),
              std::string::npos)
        << e.what();
  }
}

TEST(AtomicFile, AMissingFolderIsNamed) {
  TempDir dir;
  try {
    write_file_atomically(dir.file("no/such/out.txt"), "x");
    ADD_FAILURE() << "a write into a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/out.txt.tmp: cannot open for writing"), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, RenameDurablyMovesAFile) {
  TempDir dir;
  std::ofstream(dir.file("a")) << "payload";
  rename_durably(dir.file("a"), dir.file("b"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("a")));
  EXPECT_EQ(contents(dir.file("b")), "payload");
  EXPECT_THROW(rename_durably(dir.file("a"), dir.file("c")), Error);
}

TEST(MappedFile, ReadsAHeaderThenMapsTheWholeFile) {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  write_file_atomically(path, "HEADER--payload of the file");
  MappedFile f(path, "a test file");
  EXPECT_EQ(f.size(), 27);
  EXPECT_EQ(f.data(), nullptr);  // nothing mapped yet
  char header[8];
  f.read_at(header, sizeof header, 0);
  EXPECT_EQ(std::string(header, 8), "HEADER--");
  f.map(MappedFile::Access::kRandom);
  ASSERT_NE(f.data(), nullptr);
  EXPECT_EQ(std::memcmp(f.data() + 8, "payload", 7), 0);
  // Reads keep working through the map, and the file can move between owners.
  MappedFile moved = std::move(f);
  char tail[4];
  moved.read_at(tail, sizeof tail, 23);
  EXPECT_EQ(std::string(tail, 4), "file");
}

TEST(MappedFile, MissingShortAndNonRegularFilesAreNamed) {
  TempDir dir;
  try {
    MappedFile f(dir.file("none.bin"), "a token shard", " (run `trainer prepare-data`)");
    ADD_FAILURE() << "a missing file opened";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("none.bin: cannot open a token shard: No such file or directory (run"),
              std::string::npos)
        << e.what();
  }
  try {
    MappedFile f(dir.path(), "a token shard");
    ADD_FAILURE() << "a directory opened";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file; expected a token shard"), std::string::npos) << e.what();
  }
  write_file_atomically(dir.file("short.bin"), "abc");
  MappedFile f(dir.file("short.bin"), "a test file");
  char buf[8];
  try {
    f.read_at(buf, sizeof buf, 0);
    ADD_FAILURE() << "a read past the end succeeded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read bytes [0, 8): the file is shorter"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace feast
