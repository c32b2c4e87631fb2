// A file read through a read-only memory map, as token shards, loss masks and safetensors files
// are read: the page cache serves them, and a process touches only the pages it reads. Opening
// maps nothing and turns read-ahead off, so that a header read with read_at() costs one page (a
// dataset of hundreds of shards opens at a page per shard); map() maps the whole file once the
// header has been checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace feast {

class MappedFile {
 public:
  // How the map will be read, for the kernel's read-ahead (madvise).
  enum class Access { kRandom, kSequential };

  MappedFile() = default;
  // Opens `path`, which must be a regular file. `kind` names what it should be in messages ("a
  // token shard"); `hint` is appended to a failure to open (" (run `trainer prepare-data`)").
  // Throws DataError naming the path.
  MappedFile(const std::string& path, const std::string& kind, const std::string& hint = "");
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

  // Bytes [offset, offset + bytes) of the file, read before (or without) the map.
  void read_at(void* out, size_t bytes, int64_t offset) const;
  // Maps the whole file (the descriptor closes: the map keeps the file) for `access`.
  void map(Access access);
  void advise(Access access) const;
  // The mapped bytes; null before map().
  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }

 private:
  void release() noexcept;

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  void* map_ = nullptr;
};

}  // namespace feast
