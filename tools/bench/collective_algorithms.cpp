// The ring and the parameter server over send/recv. Each step posts its receive before its
// send (every call is non-blocking underneath), so neighbours never wait on each other's order.
#include "tools/bench/collective_algorithms.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace feast {
namespace {

// One tag per algorithm: MPI matches messages of one sender and tag in the order they were
// sent, so a step's message cannot overtake the previous step's.
constexpr int kRingTag = 7301;
constexpr int kServerTag = 7302;

}  // namespace

void ring_allreduce(Communicator& group, float* data, size_t count) {
  const int n = group.size();
  if (n == 1) return;
  const int me = group.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const size_t base = count / size_t(n), extra = count % size_t(n);
  auto wrap = [n](int k) { return ((k % n) + n) % n; };
  auto length = [&](int k) { return base + (size_t(k) < extra ? 1 : 0); };
  auto begin = [&](int k) { return size_t(k) * base + std::min(size_t(k), extra); };
  std::vector<float> incoming(length(0));

  // Reduce-scatter: at step s rank r passes chunk r - s on and adds chunk r - s - 1 from its
  // neighbour, so after N-1 steps it holds the whole sum of chunk r + 1.
  for (int s = 0; s < n - 1; ++s) {
    const int out = wrap(me - s), in = wrap(me - s - 1);
    WorkHandle rx = group.recv(incoming.data(), length(in), DType::kFloat32, prev, kRingTag);
    WorkHandle tx = group.send(data + begin(out), length(out), DType::kFloat32, next, kRingTag);
    rx->wait();
    float* into = data + begin(in);
    for (size_t i = 0; i < length(in); ++i) into[i] += incoming[i];
    tx->wait();
  }
  // All-gather: the finished chunks travel once around the ring, received in place.
  for (int s = 0; s < n - 1; ++s) {
    const int out = wrap(me + 1 - s), in = wrap(me - s);
    WorkHandle rx = group.recv(data + begin(in), length(in), DType::kFloat32, prev, kRingTag);
    WorkHandle tx = group.send(data + begin(out), length(out), DType::kFloat32, next, kRingTag);
    rx->wait();
    tx->wait();
  }
}

void parameter_server_allreduce(Communicator& group, float* data, size_t count, int server) {
  const int n = group.size();
  if (server < 0 || server >= n)
    throw Error("parameter_server_allreduce on group '" + group.name() + "': server " + std::to_string(server) +
                " is not a rank of its " + std::to_string(n));
  if (n == 1) return;
  const int me = group.rank();
  if (me != server) {
    // Push the gradient, then pull the result: a worker's buffer is not received into while it
    // is still being sent.
    group.send(data, count, DType::kFloat32, server, kServerTag)->wait();
    group.recv(data, count, DType::kFloat32, server, kServerTag)->wait();
    return;
  }
  // The server adds the workers' data to its own in rank order, receiving the next worker's
  // into one buffer while adding the other.
  std::vector<int> workers;
  for (int r = 0; r < n; ++r)
    if (r != server) workers.push_back(r);
  std::vector<float> buffers[2] = {std::vector<float>(count), std::vector<float>(count)};
  WorkHandle pending = group.recv(buffers[0].data(), count, DType::kFloat32, workers[0], kServerTag);
  for (size_t i = 0; i < workers.size(); ++i) {
    WorkHandle following;
    if (i + 1 < workers.size())
      following = group.recv(buffers[(i + 1) % 2].data(), count, DType::kFloat32, workers[i + 1], kServerTag);
    pending->wait();
    const float* from = buffers[i % 2].data();
    for (size_t k = 0; k < count; ++k) data[k] += from[k];
    pending = std::move(following);
  }
  // The update would go here (an optimizer step on the summed gradient); the bench's is the
  // identity. Then every worker gets the result; the sends share the server's link.
  std::vector<WorkHandle> sends;
  for (int r : workers) sends.push_back(group.send(data, count, DType::kFloat32, r, kServerTag));
  for (WorkHandle& s : sends) s->wait();
}

}  // namespace feast
