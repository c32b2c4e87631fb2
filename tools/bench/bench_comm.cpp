// `trainer bench comm`: time every collective at every size, check each result once the timing
// is done, fit the link's alpha and beta to ping-pong times, and put the library's all-reduce, a
// ring and a parameter server beside the formulas.
#include "tools/bench/bench_comm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"
#include "core/log.h"
#include "core/plural.h"
#include "core/timer.h"
#include "backend/backend.h"
#include "comm/agreement.h"
#include "comm/gpu_transport.h"
#include "comm/mpi_world.h"
#include "comm/topology/cpu_threads.h"
#include "comm/topology/grid_report.h"
#include "core/formatted.h"
#include "tools/bench/collective_algorithms.h"

namespace feast {
namespace {

constexpr int kSendRecvTag = 7310;
constexpr int kPingPongTag = 7311;

// Rank r's element i: a small integer that depends on i only through i mod 61, so sums over
// up to ~270,000 ranks stay exact in float32 and a block from the wrong rank or place differs.
float value(int rank, size_t i) { return float((7 * (rank % 61) + 3 * int(i % 61)) % 61 + 1); }

// The sum over n ranks of value(r, i), by i mod 61.
std::vector<float> sums_by_residue(int n) {
  std::vector<float> sums(61);
  for (size_t k = 0; k < sums.size(); ++k) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += value(r, k);
    sums[k] = float(s);
  }
  return sums;
}

template <typename Expected>
std::optional<std::string> compare(std::span<const float> got, size_t want_size, Expected expected) {
  if (got.size() != want_size)
    return "the result has " + std::to_string(got.size()) + " elements, expected " + std::to_string(want_size);
  size_t wrong = 0, first = 0;
  float first_got = 0, first_want = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = expected(i);
    if (got[i] == want) continue;
    if (wrong++ == 0) first = i, first_got = got[i], first_want = want;
  }
  if (wrong == 0) return std::nullopt;
  std::ostringstream os;
  os << wrong << " of " << got.size() << " elements wrong; element " << first << " is " << first_got << ", expected "
     << first_want;
  return os.str();
}

const char* factor_text(CommOp op) {
  switch (op) {
    case CommOp::kAllreduce: return "2(n-1)/n";
    case CommOp::kReduceScatter:
    case CommOp::kAllgather:
    case CommOp::kAlltoall: return "(n-1)/n";
    case CommOp::kBroadcast:
    case CommOp::kSendRecv: return "1";
  }
  return "?";
}

bool in_place(CommOp op) { return op == CommOp::kAllreduce || op == CommOp::kBroadcast; }

// The slowest rank's median of o.iters timed calls of run() after o.warmup untimed ones. Every
// call starts after a barrier; prepare(last) runs before it, outside the timing (refilling an
// in-place buffer, clearing the output before the last call, whose result is checked).
template <typename Prepare, typename Run>
double median_seconds(Communicator& world, const CommBenchOptions& o, Prepare prepare, Run run) {
  std::vector<double> times;
  const int total = o.warmup + o.iters;
  for (int it = 0; it < total; ++it) {
    prepare(it == total - 1);
    world.barrier();
    const Timer timer;
    run();
    const double s = timer.seconds();
    if (it >= o.warmup) times.push_back(s);
  }
  double slowest = median(std::move(times));
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  world.allreduce(&slowest, 1, DType::kFloat64, max)->wait();
  return slowest;
}

// Every rank learns whether any rank's result of `what` was wrong: the lowest such rank's
// message, naming the operation, the size and the rank.
std::optional<std::string> agree_on_result(Communicator& world, const std::string& what,
                                           const std::optional<std::string>& wrong) {
  const std::string mine = wrong ? "bench comm: " + what + " gave a wrong result on rank " +
                                       std::to_string(world.rank()) + ": " + *wrong
                                 : std::string();
  return first_error(world, mine);
}

std::vector<size_t> sizes_of(const CommBenchOptions& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes; s *= size_t(o.factor)) {
    sizes.push_back(s);
    if (s > o.max_bytes / size_t(o.factor)) break;  // the next would pass max_bytes (or overflow)
  }
  return sizes;
}

// Where a collective's buffers live: host vectors (fill and check), mirrored in GPU memory when
// the bench runs on a device.
struct OpBuffers {
  std::vector<float>& input;
  std::vector<float>& output;
  Backend* device = nullptr;
  Tensor device_input, device_output;
  OpBuffers(std::vector<float>& in, std::vector<float>& out, Backend* d) : input(in), output(out), device(d) {
    if (!device) return;
    device_input = device->allocate(DType::kFloat32, input.size());
    device_output = device->allocate(DType::kFloat32, output.size());
  }
  float* in() { return device ? device_input.as<float>() : input.data(); }
  float* out() { return device ? device_output.as<float>() : output.data(); }
  void upload_input() {
    if (device) device->copy(device_input.view(), host_view(input.data(), input.size()));
  }
  void upload_output() {
    if (device) device->copy(device_output.view(), host_view(output.data(), output.size()));
  }
  void download() {
    if (!device) return;
    device->copy(host_view(input.data(), input.size()), device_input.view());
    device->copy(host_view(output.data(), output.size()), device_output.view());
  }
};

void bench_op(CommOp op, const CommBenchOptions& o, Communicator& world, nlohmann::json& report, Backend* device) {
  const int n = world.size(), me = world.rank();
  const double factor = busbw_factor(op, n);
  log::info(std::string(comm_op_name(op)) + ": busbw = algbw x " + factor_text(op) + " = " + formatted("%.3f", factor));
  log::info("        bytes      elements     time (us)   algbw (GB/s)   busbw (GB/s)   check");
  for (size_t bytes : sizes_of(o)) {
    const size_t elements = comm_elements(op, bytes, n);
    const size_t block = elements / size_t(n);
    std::vector<float> input(op == CommOp::kAllgather ? block : elements);
    std::vector<float> output(in_place(op) ? 0 : op == CommOp::kReduceScatter ? block : elements);
    const std::vector<size_t> counts(size_t(n), block);
    fill_comm_input(op, input, elements, me, n);
    OpBuffers buf(input, output, device);
    buf.upload_input();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    const double s = median_seconds(
        world, o,
        [&](bool last) {
          if (in_place(op)) {
            fill_comm_input(op, input, elements, me, n);
            buf.upload_input();
          } else if (last) {
            std::fill(output.begin(), output.end(), -1.0f);
            buf.upload_output();
          }
          if (device) device->stream().synchronize();  // the copies are not part of the timing
        },
        [&] {
          float* in = buf.in();
          float* out = buf.out();
          switch (op) {
            case CommOp::kAllreduce: world.allreduce(in, elements, DType::kFloat32)->wait(); break;
            case CommOp::kReduceScatter: world.reduce_scatter(in, out, counts, DType::kFloat32)->wait(); break;
            case CommOp::kAllgather: world.allgather(in, out, counts, DType::kFloat32)->wait(); break;
            case CommOp::kBroadcast: world.broadcast(in, elements, DType::kFloat32, 0)->wait(); break;
            case CommOp::kAlltoall: world.alltoall(in, out, block, DType::kFloat32)->wait(); break;
            case CommOp::kSendRecv:
              world.sendrecv(in, elements, next, kSendRecvTag, out, elements, prev, kSendRecvTag, DType::kFloat32)->wait();
              break;
          }
          if (device) device->stream().synchronize();  // NCCL's wait orders the stream; the data lands here
        });
    buf.download();
    const size_t real_bytes = elements * sizeof(float);
    const std::string what = std::string(comm_op_name(op)) + " of " + std::to_string(real_bytes) + " bytes";
    const auto wrong = agree_on_result(
        world, what, find_wrong_comm_result(op, in_place(op) ? input : output, elements, me, n));
    const double algbw = double(real_bytes) / s / 1e9;
    char line[200];
    std::snprintf(line, sizeof line, "%13zu %13zu %13.1f %14.3f %14.3f   %s", real_bytes, elements, s * 1e6, algbw,
                  algbw * factor, wrong ? "WRONG" : "ok");
    log::info(line);
    report["ops"].push_back({{"op", comm_op_name(op)},
                             {"bytes", real_bytes},
                             {"elements", elements},
                             {"time_s", s},
                             {"algbw_gbps", algbw},
                             {"busbw_gbps", algbw * factor},
                             {"check", wrong ? "WRONG" : "ok"}});
    if (wrong) throw AgreedError(*wrong, me == 0);
  }
  log::info("");
}

// One-way times between ranks 0 and 1 (half the median round trip), on rank 0; empty elsewhere.
std::vector<double> ping_pong(const std::vector<size_t>& sizes, const CommBenchOptions& o, Communicator& world) {
  std::vector<double> one_way;
  const int me = world.rank();
  for (size_t bytes : sizes) {
    std::vector<float> buf(std::max<size_t>(bytes / sizeof(float), 1), float(me));
    std::vector<double> times;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      world.barrier();  // as the collectives are timed: each exchange starts from a barrier
      if (me == 0) {
        const Timer timer;
        world.send(buf.data(), buf.size(), DType::kFloat32, 1, kPingPongTag)->wait();
        world.recv(buf.data(), buf.size(), DType::kFloat32, 1, kPingPongTag)->wait();
        if (it >= o.warmup) times.push_back(timer.seconds() / 2);
      } else if (me == 1) {
        world.recv(buf.data(), buf.size(), DType::kFloat32, 0, kPingPongTag)->wait();
        world.send(buf.data(), buf.size(), DType::kFloat32, 0, kPingPongTag)->wait();
      }
    }
    if (me == 0) one_way.push_back(median(times));
  }
  world.barrier();
  return one_way;
}

void bench_algorithms(const CommBenchOptions& o, Communicator& world, nlohmann::json& report) {
  const int n = world.size(), me = world.rank();
  const std::vector<size_t> sizes = sizes_of(o);
  std::optional<AlphaBeta> link;
  if (n < 2) {
    log::info("link model: needs two ranks for a ping-pong; predictions are left out");
  } else {
    const std::vector<double> one_way = ping_pong(sizes, o, world);
    if (me == 0) {
      log::info("link model: ping-pong between ranks 0 and 1, one way = half the median round trip");
      std::vector<double> xs;
      for (size_t b : sizes) xs.push_back(double(std::max<size_t>(b / 4, 1) * 4));
      if (sizes.size() >= 2) link = fit_alpha_beta(xs, one_way);
      log::info("        bytes   one-way (us)       fit (us)");
      for (size_t i = 0; i < sizes.size(); ++i) {
        char line[120];
        std::snprintf(line, sizeof line, "%13.0f %14.2f %14s", xs[i], one_way[i] * 1e6,
                      link ? formatted("%.2f", link->seconds(xs[i]) * 1e6).c_str() : "-");
        log::info(line);
        report["pingpong"].push_back({{"bytes", xs[i]}, {"one_way_s", one_way[i]}});
      }
      if (link) {
        log::info("fit (least squares on relative error): alpha = " + formatted("%.2f", link->alpha * 1e6) +
                  " us, 1/beta = " +
                  (link->beta > 0 ? formatted("%.3f", 1e-9 / link->beta) + " GB/s"
                                  : std::string("inf GB/s (no time grows with size: try a larger --max-bytes)")));
        report["fit"] = {{"alpha_s", link->alpha}, {"beta_s_per_byte", link->beta}};
      } else {
        log::info("fit: needs two sizes (--min-bytes < --max-bytes); predictions are left out");
      }
    }
  }
  log::info("\nall-reduce three ways over " + count_of(n, "rank") +
            ", float32 sum, P = bytes, N = ranks, alpha and beta from the fit:");
  log::info("  library: the MPI library's all-reduce, predicted as the ring");
  log::info("  ring: reduce-scatter then all-gather over send/recv, T = 2(N-1) alpha + 2(N-1)/N P beta");
  log::info("  parameter server: to rank 0, summed, sent back, T = 2(N-1) (alpha + P beta)");
  log::info("busbw = algbw x 2(n-1)/n for all three; pred = predicted time, meas/pred = measured / predicted");
  log::info("        bytes   algorithm           time (us)      pred (us)   meas/pred   busbw (GB/s)   check");
  const double factor = busbw_factor(CommOp::kAllreduce, n);
  for (size_t bytes : sizes) {
    const size_t elements = std::max<size_t>(bytes / sizeof(float), 1);
    const size_t real_bytes = elements * sizeof(float);
    std::vector<float> data(elements);
    struct Way {
      const char* name;
      void (*run)(Communicator&, float*, size_t);
      double (*predict)(const AlphaBeta&, double, int);
    };
    const Way ways[] = {
        {"library", [](Communicator& c, float* d, size_t k) { c.allreduce(d, k, DType::kFloat32)->wait(); },
         predicted_ring_allreduce},
        {"ring", [](Communicator& c, float* d, size_t k) { ring_allreduce(c, d, k); }, predicted_ring_allreduce},
        {"parameter server", [](Communicator& c, float* d, size_t k) { parameter_server_allreduce(c, d, k, 0); },
         predicted_parameter_server_allreduce},
    };
    for (const Way& way : ways) {
      const double s = median_seconds(
          world, o, [&](bool) { fill_comm_input(CommOp::kAllreduce, data, elements, me, n); },
          [&] { way.run(world, data.data(), elements); });
      const std::string what = std::string(way.name) + " all-reduce of " + std::to_string(real_bytes) + " bytes";
      const auto wrong = agree_on_result(world, what,
                                         find_wrong_comm_result(CommOp::kAllreduce, data, elements, me, n));
      const double algbw = double(real_bytes) / s / 1e9;
      const double predicted = link ? way.predict(*link, double(real_bytes), n) : 0.0;  // 0: none
      char line[200];
      std::snprintf(line, sizeof line, "%13zu   %-16s %12.1f %14s %11s %14.3f   %s", real_bytes, way.name, s * 1e6,
                    link ? formatted("%.1f", predicted * 1e6).c_str() : "-",
                    predicted > 0 ? formatted("%.2f", s / predicted).c_str() : "-", algbw * factor,
                    wrong ? "WRONG" : "ok");
      log::info(line);
      nlohmann::json row = {{"bytes", real_bytes},    {"algorithm", way.name},       {"time_s", s},
                            {"algbw_gbps", algbw},    {"busbw_gbps", algbw * factor}, {"check", wrong ? "WRONG" : "ok"}};
      row["predicted_s"] = link ? nlohmann::json(predicted) : nlohmann::json(nullptr);
      report["allreduce_algorithms"].push_back(row);
      if (wrong) throw AgreedError(*wrong, me == 0);
    }
  }
}

}  // namespace

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::kAllreduce: return "allreduce";
    case CommOp::kReduceScatter: return "reduce_scatter";
    case CommOp::kAllgather: return "allgather";
    case CommOp::kBroadcast: return "broadcast";
    case CommOp::kAlltoall: return "alltoall";
    case CommOp::kSendRecv: return "sendrecv";
  }
  return "?";
}

double busbw_factor(CommOp op, int n) {
  switch (op) {
    case CommOp::kAllreduce: return 2.0 * (n - 1) / n;
    case CommOp::kReduceScatter:
    case CommOp::kAllgather:
    case CommOp::kAlltoall: return double(n - 1) / n;
    case CommOp::kBroadcast:
    case CommOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

size_t comm_elements(CommOp op, size_t bytes, int n) {
  const size_t elements = std::max<size_t>(bytes / sizeof(float), 1);
  if (op == CommOp::kReduceScatter || op == CommOp::kAllgather || op == CommOp::kAlltoall)
    return std::max<size_t>(elements / size_t(n), 1) * size_t(n);
  return elements;
}

void fill_comm_input(CommOp op, std::span<float> input, size_t elements, int rank, int n) {
  const size_t block = elements / size_t(n);
  for (size_t i = 0; i < input.size(); ++i) {
    switch (op) {
      case CommOp::kAllgather: input[i] = value(rank, size_t(rank) * block + i); break;
      case CommOp::kBroadcast: input[i] = rank == 0 ? value(0, i) : -1.0f; break;
      default: input[i] = value(rank, i);  // all-to-all: block q, meant for rank q, is value(rank, q*block + j)
    }
  }
}

std::optional<std::string> find_wrong_comm_result(CommOp op, std::span<const float> result, size_t elements, int rank,
                                                  int n) {
  const size_t block = elements / size_t(n);
  if (block == 0 && op != CommOp::kAllreduce && op != CommOp::kBroadcast && op != CommOp::kSendRecv)
    return std::to_string(elements) + " elements are fewer than one per rank of " + std::to_string(n);
  switch (op) {
    case CommOp::kAllreduce: {
      const std::vector<float> sums = sums_by_residue(n);
      return compare(result, elements, [&](size_t i) { return sums[i % 61]; });
    }
    case CommOp::kReduceScatter: {
      const std::vector<float> sums = sums_by_residue(n);
      return compare(result, block, [&](size_t j) { return sums[(size_t(rank) * block + j) % 61]; });
    }
    case CommOp::kAllgather: return compare(result, elements, [&](size_t i) { return value(int(i / block), i); });
    case CommOp::kBroadcast: return compare(result, elements, [&](size_t i) { return value(0, i); });
    case CommOp::kAlltoall:
      return compare(result, elements,
                     [&](size_t i) { return value(int(i / block), size_t(rank) * block + i % block); });
    case CommOp::kSendRecv: return compare(result, elements, [&](size_t i) { return value((rank + n - 1) % n, i); });
  }
  return "unknown operation";
}

AlphaBeta fit_alpha_beta(std::span<const double> bytes, std::span<const double> seconds) {
  FEAST_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2,
              "fit_alpha_beta: needs as many times as sizes, at least two (got " << bytes.size() << " sizes, "
                                                                                 << seconds.size() << " times)");
  // Minimise sum w (t - alpha - beta x)^2 with w = 1/t^2: the 2x2 normal equations.
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double t = std::max(seconds[i], 1e-12), w = 1.0 / (t * t), x = bytes[i];
    sw += w, sx += w * x, sxx += w * x * x, st += w * t, sxt += w * x * t;
  }
  const double det = sw * sxx - sx * sx;
  FEAST_CHECK(det > 0, "fit_alpha_beta: needs two distinct sizes");
  AlphaBeta fit;
  fit.beta = (sw * sxt - sx * st) / det;
  fit.alpha = (st - fit.beta * sx) / sw;
  if (fit.alpha < 0) fit = {0.0, sxt / sxx};  // latency below what the sizes resolve: through zero
  if (fit.beta < 0) fit = {st / sw, 0.0};     // no bandwidth term visible: a constant
  return fit;
}

double predicted_ring_allreduce(const AlphaBeta& link, double bytes, int n) {
  return 2.0 * (n - 1) * link.alpha + 2.0 * (n - 1) / n * bytes * link.beta;
}

double predicted_parameter_server_allreduce(const AlphaBeta& link, double bytes, int n) {
  return 2.0 * (n - 1) * (link.alpha + bytes * link.beta);
}

void run_comm_bench(const CommBenchOptions& o, Communicator& world, Backend* device) {
  FEAST_CHECK(o.min_bytes >= 1 && o.min_bytes <= o.max_bytes && o.factor >= 2 && o.iters >= 1 && o.warmup >= 0,
              "bench comm: bad options");
  const int n = world.size();
  const std::vector<size_t> sizes = sizes_of(o);
  log::info("bench comm: " + count_of(n, "rank") + ", float32, " + std::to_string(sizes.size()) + " sizes from " +
            std::to_string(sizes.front()) + " to " + std::to_string(sizes.back()) + " bytes (x" +
            std::to_string(o.factor) + "); time = the slowest rank's median of " + std::to_string(o.iters) +
            " after " + std::to_string(o.warmup) + " warm-up; results checked after the timing\n");
  // An unwritable --json is found before the bench runs, not after.
  std::string error;
  if (!o.json_path.empty() && world.rank() == 0 && !std::ofstream(o.json_path, std::ios::app))
    error = "bench comm: cannot write --json " + o.json_path + "; give a path in a writable directory";
  agree_on_error(world, error);
  nlohmann::json report = {{"ranks", n}, {"dtype", "float32"}, {"iters", o.iters}, {"warmup", o.warmup},
                            {"device", o.device}, {"backend", device ? o.backend : std::string("mpi")}};
  for (CommOp op : o.ops) bench_op(op, o, world, report, device);
  if (o.algorithms) bench_algorithms(o, world, report);
  if (o.json_path.empty()) return;
  if (world.rank() == 0) {
    std::ofstream out(o.json_path);
    out << report.dump(1) << "\n";
    out.close();
    if (!out) error = "bench comm: cannot write --json " + o.json_path;
  }
  agree_on_error(world, error);
}

int run_comm_bench_job(const CommBenchOptions& o, std::unique_ptr<Communicator> world) {
  // Waits as training's would: spinning when every rank has a core, backing off otherwise.
  const std::vector<std::string> hosts = gather_host_names(*world);
  set_wait_policy(choose_wait_policy(ranks_sharing_my_cpus(*world, hosts), 1));
  log::info(std::string("bench comm: communication waits ") +
            (wait_policy() == WaitPolicy::kSpin ? "spin (a core per rank)" : "back off (ranks share cores)") +
            "; FEAST_COMM_WAIT=spin|back-off overrides");
  if (o.device == "cpu") {
    run_comm_bench(o, *world);
    return 0;
  }
  // A GPU per rank, by its place among the ranks of its host.
  const std::unique_ptr<Backend> device = make_backend("cuda", "fp32", local_rank(hosts, world->rank()));
  GpuTransportRequest request;
  request.backend = o.backend;
  request.stream = device->stream().native_handle();
  const std::unique_ptr<Communicator> comm = connect_gpu_world(std::move(world), request);
  log::info("bench comm: buffers on " + device->name() + ", through " +
            (o.backend == "nccl" ? "NCCL" : "MPI staged through pinned host memory"));
  run_comm_bench(o, *comm, device.get());
  return 0;
}

}  // namespace feast
