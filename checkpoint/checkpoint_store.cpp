#include "checkpoint/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "parallel/agreement.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

const std::regex kFinalName(R"(step_(\d+)\.h5)");
const std::regex kTemporaryName(R"(\.step_\d+\.h5\.tmp)");

// fsync of a file or a directory, so that a rename that follows is durable.
void sync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw Error(p.string() + ": cannot open to sync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(p.string() + ": fsync failed: " + std::strerror(err));
}

void rename_durably(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
  sync_path(to.parent_path().empty() ? fs::path(".") : to.parent_path(), /*directory=*/true);
}

}  // namespace

std::string CheckpointStore::file_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld.h5", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> CheckpointStore::complete() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && std::regex_match(name, m, kFinalName))
      found.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string CheckpointStore::save(Communicator& world, int64_t step, int keep,
                                  const std::function<void(const std::string&)>& write) {
  const fs::path dir(dir_);
  const fs::path final_path = dir / file_name(step);
  const fs::path temporary = dir / ("." + file_name(step) + ".tmp");
  std::string error;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      error = "checkpoint.dir: cannot create " + dir_ + ": " + ec.message();
    } else {
      // Leftovers of a save that a crash interrupted: never complete, never read.
      for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
        if (std::regex_match(e.path().filename().string(), kTemporaryName)) fs::remove(e.path(), ec);
    }
  }
  agree_on_error(world, error);

  write(temporary.string());

  // Every rank has closed the file (the write's close is collective); only now is it committed.
  if (world.rank() == 0) {
    try {
      sync_path(temporary, /*directory=*/false);
      rename_durably(temporary, final_path);
      const fs::path latest_tmp = dir / ".latest.tmp";
      {
        std::ofstream out(latest_tmp, std::ios::trunc);
        out << file_name(step) << "\n";
        out.flush();
        if (!out) throw Error(latest_tmp.string() + ": cannot write");
      }
      sync_path(latest_tmp, /*directory=*/false);
      rename_durably(latest_tmp, dir / "latest");
      const std::vector<std::string> all = complete();
      int kept = 1;  // the new one
      for (const std::string& p : all) {
        if (p == final_path.string()) continue;
        if (kept < keep) {
          ++kept;
          continue;
        }
        std::error_code ec;
        fs::remove(p, ec);
      }
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_on_error(world, error);
  return final_path.string();
}

}  // namespace feast
