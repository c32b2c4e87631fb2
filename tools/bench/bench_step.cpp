#include "tools/bench/bench_step.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/device_info.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "backend/backend.h"
#include "model/decoder_stage.h"
#include "model/flop_count.h"
#include "optim/adamw.h"
#include "train/metrics/device_peak.h"

namespace feast {

int run_step_bench(const StepBenchOptions& o) {
  const ModelConfig& mc = o.model;
  const std::vector<BatchShape>& shapes = o.shapes;
  const int warmup = o.warmup, steps = o.steps;
  const std::string& device = o.device;
  const std::string& dtype = o.dtype;
  int max_b = 1, max_t = 1;
  for (const BatchShape& s : shapes) {
    max_b = std::max(max_b, s.B);
    max_t = std::max(max_t, s.T);
  }
  if (max_t > mc.max_seq_len)
    throw ConfigError("bench: --shapes asks for " + std::to_string(max_t) + " tokens per sequence, above the model's " +
                      std::to_string(mc.max_seq_len));
  std::unique_ptr<Backend> backend;
  try {
    backend = make_backend(device, dtype);
  } catch (const ConfigError& e) {  // worded for the config's keys, which --device and --dtype stand for here
    throw ConfigError("bench --device " + device + " --dtype " + dtype + ": " + e.what());
  }
  DecoderStage model(mc, StageSpec::whole(mc), StageShape{max_b, max_t, 1}, *backend, nullptr);
  initialize_parameters(model, 1337);
  const size_t n_total = model.parameters().numel;
  Tensor grads = backend->allocate(DType::kFloat32, n_total);
  FlatGradientSink sink(grads.view());
  model.set_gradient_sink(&sink);
  const double n_params = matmul_parameters(mc);
  AdamWConfig oc;
  oc.weight_decay = 0.0;  // as the PyTorch reference bench
  oc.beta2 = 0.999;
  AdamW opt(*backend, model.table(), model.parameters(), 0, n_total, oc);

  std::printf("feast bench: %s, %d layers, %d heads (%d key/value), %d channels, MLP %d, vocab %d (padded %d): "
              "%.1fM parameters, %.1fM in matrix products\n",
              mc.arch.c_str(), mc.n_layer, mc.n_head, mc.kv_heads(), mc.n_embd, mc.mlp_width(), mc.vocab_size,
              mc.padded_vocab(), double(n_total) / 1e6, n_params / 1e6);
  double ceiling = 0, datasheet_gflops = 0;
  if (device == "cpu") {
    ceiling = measure_sgemm_gflops();
    std::printf("device: cpu, %d OpenMP threads; sgemm ceiling %.1f GFLOP/s (best 1536^3 sgemm)\n",
                omp_get_max_threads(), ceiling);
  } else {
    ceiling = measure_backend_gemm_gflops(*backend, 8192);
    const std::string gpu = cuda_device_name();
    const auto sheet = known_gpu_peak_tflops(gpu);
    std::printf("device: %s (%s), %s; GEMM ceiling %.1f TFLOP/s (best 8192^3 product in %s)%s\n",
                backend->name().c_str(), gpu.c_str(), dtype_name(backend->compute_dtype()), ceiling / 1e3,
                dtype_name(backend->compute_dtype()),
                sheet ? (", datasheet " + std::to_string(int(sheet->first)) + " TFLOP/s dense bf16").c_str() : "");
    if (sheet) datasheet_gflops = sheet->first * 1e3;
  }
  std::printf("%-8s %6s %10s %10s %10s %11s %10s %7s %9s %9s\n", "shape", "steps", "ms/step", "min ms",
              "max ms", "tokens/s", "GFLOP/s", "MFU", "MFU(sheet)", "peak MiB");

  bool ok = true;
  for (const BatchShape& s : shapes) {
    const size_t n = size_t(s.B) * s.T;
    std::vector<int32_t> x(n), y(n);
    std::vector<double> times;
    int64_t t = 0;
    for (int it = 0; it < warmup + steps; ++it) {
      for (size_t i = 0; i < n; ++i) {  // fresh random tokens each step, outside the timer
        x[i] = int32_t(uniform_index(7, uint64_t(it), 2 * i, uint64_t(mc.vocab_size)));
        y[i] = int32_t(uniform_index(7, uint64_t(it), 2 * i + 1, uint64_t(mc.vocab_size)));
      }
      Timer timer;
      backend->zero(grads.view());
      const float loss = model.forward(0, x.data(), y.data(), s.B, s.T, 1.0f / float(n));
      model.backward(0, s.B, s.T);
      const double norm = std::sqrt(counted_sum_of_squares(*backend, model.table(), grads.view(), 0, n_total));
      opt.step(grads.view(), ++t, 3e-4, norm);
      backend->stream().synchronize();  // a GPU's update is queued, not done
      const double sec = timer.seconds();
      if (it >= warmup) times.push_back(sec);
      if (!std::isfinite(loss) || (it == 0 && std::abs(loss - std::log(double(mc.vocab_size))) > 0.5)) {
        std::fprintf(stderr, "bench: shape %dx%d step %d: loss %f is wrong (expected about ln(V) = %.3f at start)\n",
                     s.B, s.T, it, double(loss), std::log(double(mc.vocab_size)));
        ok = false;
      }
    }
    const double med = median(times);
    const double tok_s = double(n) / med;
    const double gflops = training_flops_per_token(mc, s.T) * double(n) / med / 1e9;
    char name[32];
    std::snprintf(name, sizeof name, "%dx%d", s.B, s.T);
    char sheet_mfu[16] = "-";
    if (datasheet_gflops > 0) std::snprintf(sheet_mfu, sizeof sheet_mfu, "%.1f%%", 100.0 * gflops / datasheet_gflops);
    std::printf("%-8s %6d %10.1f %10.1f %10.1f %11.1f %10.1f %6.1f%% %9s %9.0f\n", name, steps, med * 1e3,
                *std::min_element(times.begin(), times.end()) * 1e3,
                *std::max_element(times.begin(), times.end()) * 1e3, tok_s, gflops, 100.0 * gflops / ceiling,
                sheet_mfu, double(backend->peak_memory_bytes()) / (1024.0 * 1024.0));
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace feast
