#include "core/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace feast {

MappedFile::MappedFile(const std::string& path, const std::string& kind, const std::string& hint) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw DataError(path + ": cannot open " + kind + ": " + std::strerror(errno) + hint);
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    release();
    throw DataError(path + ": not a regular file; expected " + kind);
  }
  size_ = st.st_size;
  // No read-ahead for reads through this descriptor: a header read would otherwise pull in the
  // pages after it, which for many files is most of the cost of opening them.
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)),
      map_(std::exchange(other.map_, nullptr)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
    map_ = std::exchange(other.map_, nullptr);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (map_) ::munmap(map_, size_t(size_));
  if (fd_ >= 0) ::close(fd_);
  map_ = nullptr;
  fd_ = -1;
}

void MappedFile::read_at(void* out, size_t bytes, int64_t offset) const {
  if (map_) {
    FEAST_CHECK(offset >= 0 && offset + int64_t(bytes) <= size_, path_ << ": read outside the file");
    std::memcpy(out, data() + offset, bytes);
    return;
  }
  FEAST_CHECK(fd_ >= 0, path_ << ": read of a closed file");
  const ssize_t got = ::pread(fd_, out, bytes, offset);
  if (got != ssize_t(bytes))
    throw DataError(path_ + ": cannot read bytes [" + std::to_string(offset) + ", " +
                    std::to_string(offset + int64_t(bytes)) + "): " +
                    (got < 0 ? std::strerror(errno) : "the file is shorter"));
}

void MappedFile::map(Access access) {
  if (map_) return;
  FEAST_CHECK(fd_ >= 0, path_ << ": map of a closed file");
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
    if (m == MAP_FAILED) throw DataError(path_ + ": cannot map the file into memory: " + std::strerror(errno));
    map_ = m;
  }
  ::close(fd_);  // the map keeps the file
  fd_ = -1;
  advise(access);
}

void MappedFile::advise(Access access) const {
  if (map_) ::madvise(map_, size_t(size_), access == Access::kRandom ? MADV_RANDOM : MADV_SEQUENTIAL);
}

}  // namespace feast
