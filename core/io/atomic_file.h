// One way to write a file that readers never see half-written (token shards, loss masks,
// meta.json, metrics, summaries, safetensors files, exported configs): the bytes go to a
// temporary beside it (path + ".tmp"), are flushed to the disk, and the temporary is renamed over
// the path; then the folder is synced, so that the rename itself survives a crash. A failure at
// any point (a full disk, an unwritable folder) removes the temporary and throws Error naming
// the path and the cause, and the path holds what it held before.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace feast {

// When the bytes reach the disk. kNow: at commit (fsync of the file, then of its folder).
// kByCaller: the commit only renames; the caller writes many files (a dataset's thousands of
// shards) and syncs their file system once (sync_file_system) before it publishes what refers
// to them, which costs one call instead of two fsyncs per file.
enum class Durability { kNow, kByCaller };

class AtomicFile {
 public:
  // Creates the temporary (truncating one a crash left behind).
  explicit AtomicFile(std::string path, Durability durability = Durability::kNow);
  // Not committed: the temporary is removed and the path left as it was.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes the temporary to the disk, renames it over the path and syncs the folder.
  void commit();

  const std::string& path() const { return path_; }

 private:
  void discard() noexcept;

  std::string path_, temporary_;
  Durability durability_;
  int fd_ = -1;
};

// The whole file at once, through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view contents);

// Renames `from` over `to` and syncs `to`'s folder, so that the rename survives a crash: how a
// file another library wrote (a checkpoint's HDF5 file) is committed under its final name.
void rename_durably(const std::string& from, const std::string& to);

// fsync of a file or a folder; throws Error naming it.
void sync_path(const std::string& path, bool directory);

// Flushes everything written to the file system that holds `path` (syncfs), folders included.
void sync_file_system(const std::string& path);

}  // namespace feast
