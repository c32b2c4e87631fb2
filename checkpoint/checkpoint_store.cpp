#include "checkpoint/checkpoint_store.h"


#include <algorithm>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "checkpoint/hdf5_handle.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "comm/agreement.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

const std::regex kFinalName(R"(step_(\d+)\.h5)");
const std::regex kTemporaryName(R"(\.step_\d+\.h5\.tmp)");

}  // namespace

std::string CheckpointStore::file_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld.h5", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> CheckpointStore::complete() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, m, kFinalName) || !it->is_regular_file(ec)) continue;
    int64_t step = 0;
    const std::string digits = m[1].str();
    if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc()) continue;
    found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

int64_t CheckpointStore::step_of(const std::string& path) {
  std::smatch m;
  const std::string name = fs::path(path).filename().string();
  int64_t step = -1;
  if (std::regex_match(name, m, kFinalName)) {
    const std::string digits = m[1].str();
    std::from_chars(digits.data(), digits.data() + digits.size(), step);
  }
  return step;
}

void CheckpointStore::set_aside(const std::string& path, const std::string& reason) {
  std::error_code ec;
  fs::rename(path, path + "." + reason, ec);
}

void CheckpointStore::prove_shared(Communicator& world, const std::string& token) const {
  const fs::path dir(dir_), probe = dir / ".shared_probe";
  std::string error;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::ofstream out(probe, std::ios::trunc);
    out << token;
    out.close();
    if (ec) error = "checkpoint.dir: cannot create " + dir_ + ": " + ec.message();
    else if (!out) error = "checkpoint.dir: cannot write in " + dir_ + ": " + std::strerror(errno);
  }
  agree_on_error(world, error);
  // Every rank must see the directory rank 0 commits in: a node-local directory would give each
  // node a file with only its own slices, and rank 0 would commit its holes.
  const std::string expected = broadcast_string(world, token, 0);
  std::ifstream in(probe);
  std::string seen;
  std::getline(in, seen);
  if (seen != expected)
    error = "checkpoint.dir " + dir_ + " is not the directory rank 0 saves in (rank 0's probe file is not visible "
            "here); put checkpoints on a file system every node mounts, at a path every rank's config names";
  const auto remove_probe = [&] {  // once every rank has read it: the agreement below is collective
    std::error_code ec;
    if (world.rank() == 0) fs::remove(probe, ec);
  };
  try {
    agree_on_error(world, error);
  } catch (...) {
    remove_probe();
    throw;
  }
  remove_probe();
}

std::string CheckpointStore::save(Communicator& world, int64_t step, int keep,
                                  const std::function<void(const std::string&)>& write) {
  const fs::path dir(dir_);
  const fs::path final_path = dir / file_name(step);
  const fs::path temporary = dir / ("." + file_name(step) + ".tmp");
  // A token unique to this save, so that a probe left by an earlier one proves nothing.
  prove_shared(world, std::to_string(step) + "-" +
                          std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  if (world.rank() == 0) {
    // Leftovers of a save that a crash interrupted: never complete, never read.
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (std::regex_match(it->path().filename().string(), kTemporaryName)) fs::remove(it->path(), ec);
  }

  std::string error;
  try {
    write(temporary.string());
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (const std::optional<std::string> first = first_error(world, error)) {
    if (world.rank() == 0) {
      std::error_code ec;
      fs::remove(temporary, ec);
    }
    throw CheckpointError(*first + " (nothing was committed; the previous checkpoints are intact)");
  }

  // Every rank has closed the file (the write's close is collective); only now is it committed.
  if (world.rank() == 0) {
    try {
      std::error_code ec;
      sync_path(temporary.string(), /*directory=*/false);
      rename_durably(temporary.string(), final_path.string());
      write_file_atomically((dir / "latest").string(), file_name(step) + "\n");
      // Checkpoints of later steps belong to a timeline this run abandoned (it resumed from an
      // earlier one, or started afresh): set them aside so that no resume jumps to them and
      // retention does not count them.
      const std::vector<std::string> all = complete();
      for (const std::string& p : all)
        if (step_of(p) > step) set_aside(p, "superseded");
      int kept = 1;  // the new one
      for (const std::string& p : complete()) {
        if (p == final_path.string()) continue;
        if (kept < keep) {
          ++kept;
          continue;
        }
        fs::remove(p, ec);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_error(world, error);
  return final_path.string();
}

}  // namespace feast
