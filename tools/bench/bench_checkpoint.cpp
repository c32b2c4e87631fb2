#include "tools/bench/bench_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "checkpoint/async_checkpoint_writer.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/decoder_stage.h"
#include "optim/adamw.h"
#include "parallel/data_parallel/zero_shard.h"
#include "tools/bench/shared_temp_dir.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

// Drops a file's pages from the page cache (after fsync they are clean, so this needs no
// privileges), so the next read comes from the disk.
void drop_from_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double plain_write(const std::string& path, size_t bytes) {
  std::vector<char> chunk(size_t{8} << 20, 1);
  Timer t;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(path + ": " + std::strerror(errno));
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, chunk.data(), std::min(chunk.size(), bytes - done));
    if (n <= 0) throw Error(path + ": write failed: " + std::strerror(errno));
    done += size_t(n);
  }
  ::fsync(fd);
  ::close(fd);
  return t.seconds();
}

double plain_read(const std::string& path) {
  drop_from_cache(path);
  std::vector<char> chunk(size_t{8} << 20);
  Timer t;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": " + std::strerror(errno));
  while (::read(fd, chunk.data(), chunk.size()) > 0) {
  }
  ::close(fd);
  return t.seconds();
}

}  // namespace

int run_checkpoint_bench(const CheckpointBenchOptions& o, std::unique_ptr<Communicator> world) {
  const ModelConfig& mc = o.model;
  std::string dir = o.dir;
  const int repeat = o.repeat;
  std::optional<SharedTempDir> scratch;  // removed after, unless --dir was given
  if (dir.empty()) {
    scratch.emplace(*world, "feast_bench_ckpt");
    dir = scratch->path();
  }

  // One stage holding the whole model; with N ranks, ZeRO 1: each keeps 1/N of the optimizer.
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  DecoderStage model(mc, StageSpec::whole(mc), StageShape{1, 1, 1}, *backend, nullptr);
  initialize_parameters(model, 1337);
  const size_t n = model.parameters().numel;
  const ShardRange share = shard_range(n, world->size(), world->rank());
  AdamW opt(*backend, model.table(), model.parameters(), share.begin, share.end, AdamWConfig{});
  RankState st{&model.table(), model.parameters(), opt.tensor_states(), share.begin, share.end};
  CheckpointMeta meta;
  meta.step = 1;
  meta.layout = "tp1 pp1 dp" + std::to_string(world->size()) + " zero1";
  meta.dp = world->size();

  CheckpointStore store(dir);
  AsyncCheckpointWriter writer(world->split(0, world->rank(), "checkpoint-writer"), dir, 1);
  double save = 1e30, load = 1e30, write = 1e30, read = 1e30, stall = 1e30, background = 1e30;
  std::string path;
  size_t bytes = 0;
  for (int r = 0; r < repeat; ++r) {
    world->barrier();
    Timer t;
    path = store.save(*world, 1, 1, [&](const std::string& tmp) { write_checkpoint(tmp, *world, st, meta); });
    world->barrier();
    save = std::min(save, t.seconds());
    if (world->rank() == 0) {
      bytes = fs::file_size(path);
      drop_from_cache(path);
    }
    world->barrier();
    {
      Timer a;
      writer.begin(st, meta, *world);
      stall = std::min(stall, a.seconds());
      writer.wait(*world);
      background = std::min(background, a.seconds());
    }
    if (world->rank() == 0) drop_from_cache(path);
    world->barrier();
    Timer l;
    read_checkpoint(path, *world, st);
    world->barrier();
    load = std::min(load, l.seconds());
    if (world->rank() == 0) {
      const std::string plain = dir + "/plain.bin";
      write = std::min(write, plain_write(plain, bytes));
      read = std::min(read, plain_read(plain));
      fs::remove(plain);
    }
  }
  const double gb = double(bytes) / 1e9;
  char line[160];
  std::snprintf(line, sizeof line,
                "checkpoint bench: %.1fM parameters, file %.3f GB (weights, master weights, 2 moments), %d rank(s), "
                "best of %d, in %s",
                double(n) / 1e6, gb, world->size(), repeat, dir.c_str());
  log::info(line);
  log::info("what                                             seconds      GB/s");
  auto row = [&](const char* what, double s) {
    std::snprintf(line, sizeof line, "%-46s %9.3f %9.2f", what, s, gb / s);
    log::info(line);
  };
  row("plain write + fsync (one process)", write);
  row("checkpoint save (= training stall per save)", save);
  row("async save: training stall (copy to memory)", stall);
  row("async save: written and committed", background);
  row("plain read, cold (one process)", read);
  row("checkpoint load + verify, cold", load);
  return 0;
}

}  // namespace feast
