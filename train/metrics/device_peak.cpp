#include "train/metrics/device_peak.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <omp.h>

#include "comm/topology/cpu_threads.h"
#include "core/cpu_peak.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "backend/cpu/blas.h"

namespace feast {

double measure_sgemm_gflops(int n, int repeats) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    Timer t;
    cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = t.seconds();
    if (rep > 0 || repeats == 1) best = std::max(best, 2.0 * n * n * double(n) / s / 1e9);
  }
  FEAST_CHECK(std::abs(double(c[0]) - 0.125 * n) < 1e-2 * n, "sgemm returned a wrong result");
  return best;
}

std::optional<std::pair<double, std::string>> known_gpu_peak_tflops(const std::string& device_name) {
  // Dense bf16 with fp32 accumulation, from the vendors' datasheets (sparsity excluded). More
  // specific names first: "H100 PCIe" before "H100".
  static const std::vector<std::pair<std::string, double>> table = {
      {"GH200", 989.0},    {"H200 NVL", 835.0},  {"H200", 989.0},     {"H100 PCIe", 756.0},
      {"H100 NVL", 835.0}, {"H100", 989.0},      {"A100", 312.0},      {"A800", 312.0},     {"L40S", 362.0},
      {"L40", 181.0},      {"A10", 125.0},       {"L4", 121.0},       {"RTX 4090", 165.0},
      {"RTX 3090", 71.0},  {"V100", 125.0},      {"B200", 2250.0},    {"MI300X", 1307.0},
  };
  for (const auto& [name, tflops] : table)
    if (device_name.find(name) != std::string::npos) return std::make_pair(tflops, name);
  return std::nullopt;
}

double measure_backend_gemm_gflops(Backend& backend, int n, int repeats) {
  const size_t nn = size_t(n) * size_t(n);
  std::vector<float> host(nn);
  for (size_t i = 0; i < nn; ++i) host[i] = float(uniform_index(11, 0, i, 2001)) / 1000.0f - 1.0f;
  Tensor f32 = backend.allocate(DType::kFloat32, nn);
  backend.copy(f32.view(), host_view(host.data(), host.size()));
  Tensor a = backend.allocate(backend.compute_dtype(), nn), w = backend.allocate(backend.compute_dtype(), nn),
         out = backend.allocate(backend.compute_dtype(), nn);
  backend.cast(a.view(), f32.view());
  backend.cast(w.view(), f32.view());
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {  // the first is warm-up (handles, kernel selection)
    backend.stream().synchronize();
    const Timer t;
    backend.matmul_forward(out.view(), a.view(), w.view(), TensorView{}, n, n, n);
    backend.stream().synchronize();
    if (r > 0) best = std::max(best, 2.0 * double(n) * double(n) * double(n) / t.seconds());
  }
  return best / 1e9;
}

std::optional<std::pair<double, std::string>> cpu_fma_peak_tflops(double cores) {
  const std::optional<CpuCorePeak> core = cpu_core_peak();
  if (!core) return std::nullopt;
  char text[256];
  std::snprintf(text, sizeof text, "FMA peak: %.3g core%s x %.2f GHz (%s) x %d fp32 FLOP/cycle (%s)", cores,
                cores == 1 ? "" : "s", core->ghz, core->clock_from.c_str(), core->flops_per_cycle,
                core->vector_unit.c_str());
  return std::make_pair(cores * core->gflops() / 1e3, std::string(text));
}

DevicePeak device_peak(Communicator& world, const std::string& device, double configured_tflops, int sharing_ranks) {
  if (configured_tflops > 0) return {configured_tflops, "configured peak", "logging.peak_tflops"};
  if (device != "cpu") {
    const std::string name = cuda_device_name();
    if (const auto known = known_gpu_peak_tflops(name)) return {known->first, "datasheet peak", "datasheet: " + known->second};
    // An unknown GPU trains as well as a known one; only MFU is missing (reported as 0).
    return {0.0, "", "no peak known for \"" + name + "\": set logging.peak_tflops for MFU"};
  }
  // Every rank measures at once, on the threads training uses. A round is one 512^3 product on
  // every rank, started together, and its rate is the work of all of them over the time the last
  // one took: ranks that share cores (more ranks than cores, as in CI) count those cores once,
  // however the scheduler interleaves them. The best of a few rounds is kept, so one rank
  // descheduled once does not lower it. 512^3 (0.27 GFLOP) reaches OpenBLAS's rate within a few
  // percent of 1536^3 and costs milliseconds, which every start can spend. It is only a floor
  // under the FMA peak: a busy machine measures low, and MFU against it could pass 100%.
  constexpr int n = 512, rounds = 4;
  measure_sgemm_gflops(n, 1);  // warm-up: threads started, pages touched
  double best = 0;
  for (int round = 0; round < rounds; ++round) {
    world.barrier();
    const Timer t;
    measure_sgemm_gflops(n, 1);
    double slowest = t.seconds();
    world.allreduce(&slowest, 1, DType::kFloat64, {ReduceOp::kMax})->wait();
    best = std::max(best, 2.0 * n * double(n) * n / slowest);
  }
  const double measured = best / 1e12;
  // A rank's threads use at most its share of the host's physical cores.
  const double cores = std::min(double(omp_get_max_threads()), double(available_cores()) / std::max(1, sharing_ranks));
  const auto fma = cpu_fma_peak_tflops(cores);
  char text[160];
  if (!fma) {
    std::snprintf(text, sizeof text,
                  "measured sgemm: no FMA peak known for this CPU; a busy start reads low, so set "
                  "logging.peak_tflops to compare runs");
    return {measured, "measured sgemm", text};
  }
  if (fma->first >= measured) return {fma->first, "FMA peak", fma->second};
  // The clock read was lower than the one the cores ran at (a virtual machine reports its
  // nominal clock, and turbo runs above it): the measurement is the better bound.
  std::snprintf(text, sizeof text, "measured sgemm, above the %.3g TFLOP/s of the reported clock (", fma->first);
  return {measured, "measured sgemm", text + fma->second + ")"};
}

}  // namespace feast
