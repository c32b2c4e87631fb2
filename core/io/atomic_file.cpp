#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace feast {

namespace {

std::string reason(int err) { return std::strerror(err); }

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error("cannot rename " + from + " to " + to + ": " + reason(errno));
}

// Opens `path` with `flags` and runs `sync` (fsync, syncfs) on it; throws Error naming both.
void sync_with(const std::string& path, int flags, int (*sync)(int), const char* name) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw Error(path + ": cannot open to sync: " + reason(errno));
  const int rc = sync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(path + ": " + name + " failed: " + reason(err));
}

}  // namespace

AtomicFile::AtomicFile(std::string path, Durability durability)
    : path_(std::move(path)), temporary_(path_ + ".tmp"), durability_(durability) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(temporary_ + ": cannot open for writing: " + reason(errno) +
                " (check that the folder exists and is writable)");
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  std::remove(temporary_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  FEAST_CHECK(fd_ >= 0, path_ << ": written after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      discard();
      throw Error(temporary_ + ": write failed: " + reason(err));
    }
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  FEAST_CHECK(fd_ >= 0, path_ << ": committed twice");
  // The data reaches the disk before the rename publishes it: a crash leaves the old file or
  // the whole new one.
  if (durability_ == Durability::kNow && ::fsync(fd_) != 0) {
    const int err = errno;
    discard();
    throw Error(temporary_ + ": fsync failed: " + reason(err));
  }
  const int closed = ::close(fd_);
  const int close_err = errno;
  fd_ = -1;
  if (closed != 0) {
    std::remove(temporary_.c_str());
    throw Error(temporary_ + ": close failed: " + reason(close_err));
  }
  try {
    if (durability_ == Durability::kNow)
      rename_durably(temporary_, path_);
    else
      rename_or_throw(temporary_, path_);
  } catch (...) {
    std::remove(temporary_.c_str());
    throw;
  }
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

void sync_path(const std::string& path, bool directory) {
  sync_with(path, O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0), ::fsync, "fsync");
}

void sync_file_system(const std::string& path) { sync_with(path, O_RDONLY | O_CLOEXEC, ::syncfs, "syncfs"); }

void rename_durably(const std::string& from, const std::string& to) {
  rename_or_throw(from, to);
  const std::filesystem::path folder = std::filesystem::path(to).parent_path();
  sync_path(folder.empty() ? "." : folder.string(), /*directory=*/true);
}

}  // namespace feast
