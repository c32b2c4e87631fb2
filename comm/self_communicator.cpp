#include "comm/self_communicator.h"

#include <cstring>

#include "core/error.h"

namespace feast {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  WorkHandle allreduce(void*, size_t, DType, const CollectiveOptions&) override { return done(); }
  WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                            const CollectiveOptions&) override {
    copy(recv, send, counts[0], dtype);
    return done();
  }
  WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                       const CollectiveOptions&) override {
    copy(recv, send, counts[0], dtype);
    return done();
  }
  WorkHandle broadcast(void*, size_t, DType, int, const CollectiveOptions&) override { return done(); }
  WorkHandle alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                      const CollectiveOptions&) override {
    copy(recv, send, count_per_rank, dtype);
    return done();
  }
  WorkHandle alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t>, DType dtype, const CollectiveOptions&) override {
    copy(recv, send, send_counts[0], dtype);
    return done();
  }
  WorkHandle send(const void*, size_t, DType, int, int) override { throw unsupported("send"); }
  WorkHandle recv(void*, size_t, DType, int, int) override { throw unsupported("recv"); }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int, const std::string& name) override {
    if (color < 0) return nullptr;
    return std::make_unique<SelfCommunicator>(name);
  }

 private:
  static WorkHandle done() { return std::make_unique<DoneWork>(); }
  static void copy(void* dst, const void* src, size_t count, DType dtype) {
    if (dst != src) std::memmove(dst, src, count * dtype_size(dtype));
  }
  Error unsupported(const char* call) const {
    return Error(std::string(call) + " on the single-rank group '" + name_ + "': there is no peer");
  }
  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace feast
