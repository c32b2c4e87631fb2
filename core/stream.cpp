#include "core/stream.h"

namespace feast {
namespace {

class CpuStream final : public Stream {
 public:
  void synchronize() override {}
};

class CpuEvent final : public Event {
 public:
  void record(Stream&) override {}
  void block(Stream&) override {}
  void synchronize() override {}
};

}  // namespace

Stream& cpu_stream() {
  static CpuStream stream;
  return stream;
}

std::unique_ptr<Stream> make_cpu_stream() { return std::make_unique<CpuStream>(); }

std::unique_ptr<Event> make_cpu_event() { return std::make_unique<CpuEvent>(); }

}  // namespace feast
