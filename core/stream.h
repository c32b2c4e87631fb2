// Ordering of device work (CUDA's streams and events in the interface every backend shares).
// Work enqueued on one stream runs in order; an event recorded on a stream marks a point that
// another stream, or the host, can wait for. On the CPU every call finishes before it returns,
// so its stream and events are no-ops and code written against them stays correct on a GPU.
#pragma once

#include <memory>

namespace feast {

class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks the host until everything enqueued so far has finished.
  virtual void synchronize() = 0;
  // The device API's handle (a cudaStream_t), for libraries that take one (NCCL); nullptr on
  // the CPU.
  virtual void* native_handle() const { return nullptr; }
};

class Event {
 public:
  virtual ~Event() = default;
  // Marks the current end of `stream`'s work.
  virtual void record(Stream& stream) = 0;
  // Makes `stream` wait (without blocking the host) until the recorded point is reached.
  virtual void block(Stream& stream) = 0;
  // Blocks the host until the recorded point is reached.
  virtual void synchronize() = 0;
};

// The CPU's streams and events: work is done when the call that did it returns.
Stream& cpu_stream();
std::unique_ptr<Stream> make_cpu_stream();
std::unique_ptr<Event> make_cpu_event();

}  // namespace feast
