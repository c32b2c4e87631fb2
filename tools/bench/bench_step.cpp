#include "tools/bench/bench_step.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/topology/cpu_threads.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "backend/backend.h"
#include "backend/cpu/blas_library.h"
#include "model/decoder_stage.h"
#include "model/flop_count.h"
#include "optim/adamw.h"
#include "train/metrics/device_peak.h"

namespace feast {

namespace {

// One model on one device with its gradients and optimizer, for timing full training steps.
class StepRig {
 public:
  StepRig(const StepBenchOptions& o) : mc_(o.model) {
    int max_b = 1, max_t = 1;
    for (const BatchShape& s : o.shapes) {
      max_b = std::max(max_b, s.B);
      max_t = std::max(max_t, s.T);
    }
    if (max_t > mc_.max_seq_len)
      throw ConfigError("bench: --shapes asks for " + std::to_string(max_t) + " tokens per sequence, above the model's " +
                        std::to_string(mc_.max_seq_len));
    try {
      backend_ = make_backend(o.device, o.dtype);
    } catch (const ConfigError& e) {  // worded for the config's keys, which --device and --dtype stand for here
      throw ConfigError("bench --device " + o.device + " --dtype " + o.dtype + ": " + e.what());
    }
    model_ = std::make_unique<DecoderStage>(mc_, StageSpec::whole(mc_), StageShape{max_b, max_t, 1}, *backend_, nullptr,
                                            nullptr, o.lora);
    initialize_parameters(*model_, 1337);
    n_total_ = model_->parameters().numel;
    grads_ = backend_->allocate(DType::kFloat32, n_total_);
    sink_ = std::make_unique<FlatGradientSink>(grads_.view());
    model_->set_gradient_sink(sink_.get());
    AdamWConfig oc;
    oc.weight_decay = 0.0;  // as the PyTorch reference bench
    oc.beta2 = 0.999;
    opt_ = std::make_unique<AdamW>(*backend_, model_->table(), model_->parameters(), 0, n_total_, oc);
  }

  Backend& backend() { return *backend_; }
  size_t parameters() const { return n_total_; }
  // The model's bytes (trainable and frozen), its gradients' and its optimizer state's.
  double state_bytes() const {
    return double(model_->parameters().bytes() + model_->frozen_bytes() + grads_.bytes() + opt_->state_bytes());
  }

  // Seconds of each timed step (after `warmup` untimed ones) at shape s; false in `ok` when a
  // loss is not finite or the rig's first is not near ln(vocab).
  std::vector<double> time_steps(const BatchShape& s, int warmup, int steps, bool& ok) {
    const size_t n = size_t(s.B) * s.T;
    std::vector<int32_t> x(n), y(n);
    std::vector<double> times;
    for (int it = 0; it < warmup + steps; ++it) {
      // Fresh random tokens each step of the rig (not of this call: a model shown one batch again
      // and again would learn it), outside the timer.
      for (size_t i = 0; i < n; ++i) {
        x[i] = int32_t(uniform_index(7, uint64_t(t_), 2 * i, uint64_t(mc_.vocab_size)));
        y[i] = int32_t(uniform_index(7, uint64_t(t_), 2 * i + 1, uint64_t(mc_.vocab_size)));
      }
      const bool first = t_ == 0;
      Timer timer;
      backend_->zero(grads_.view());
      const float loss = model_->forward(0, x.data(), y.data(), nullptr, s.B, s.T, 1.0f / float(n), MicroBatchPlace{});
      model_->backward(0, s.B, s.T);
      const double norm = std::sqrt(counted_sum_of_squares(*backend_, model_->table(), grads_.view(), 0, n_total_));
      opt_->step(grads_.view(), ++t_, 3e-4, norm);
      backend_->stream().synchronize();  // a GPU's update is queued, not done
      const double sec = timer.seconds();
      if (it >= warmup) times.push_back(sec);
      if (!std::isfinite(loss) || (first && std::abs(loss - std::log(double(mc_.vocab_size))) > 0.5)) {
        std::fprintf(stderr, "bench: shape %dx%d step %d: loss %f is wrong (expected about ln(V) = %.3f at start)\n",
                     s.B, s.T, it, double(loss), std::log(double(mc_.vocab_size)));
        ok = false;
      }
    }
    return times;
  }

 private:
  ModelConfig mc_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DecoderStage> model_;
  size_t n_total_ = 0;
  Tensor grads_;
  std::unique_ptr<FlatGradientSink> sink_;
  std::unique_ptr<AdamW> opt_;
  int64_t t_ = 0;
};

}  // namespace

StepTiming measure_step_seconds(const StepBenchOptions& o, double budget_s) {
  FEAST_CHECK(o.shapes.size() == 1, "measure_step_seconds: one shape");
  StepRig rig(o);
  bool ok = true;
  // The warm-up and one timed step, then one step at a time while the budget lasts.
  std::vector<double> times = rig.time_steps(o.shapes.front(), o.warmup, 1, ok);
  double spent = times.front();
  while (ok && int(times.size()) < o.steps && spent < budget_s) {
    times.push_back(rig.time_steps(o.shapes.front(), 0, 1, ok).front());
    spent += times.back();
  }
  if (!ok) throw Error("bench: the model's loss was wrong while timing its steps");
  return {median(times), int(times.size())};
}

int run_step_bench(const StepBenchOptions& o) {
  const ModelConfig& mc = o.model;
  const std::string& device = o.device;
  StepRig rig(o);
  const double n_params = matmul_parameters(mc);
  std::printf("feast bench: %s, %d layers, %d heads (%d key/value), %d channels, MLP %d, vocab %d (padded %d): "
              "%.1fM parameters, %.1fM in matrix products\n",
              mc.arch.c_str(), mc.n_layer, mc.n_head, mc.kv_heads(), mc.n_embd, mc.mlp_width(), mc.vocab_size,
              mc.padded_vocab(), double(decoder_param_table(mc).total_numel()) / 1e6, n_params / 1e6);
  double ceiling = 0, datasheet_gflops = 0;
  Backend* backend = &rig.backend();
  if (device == "cpu") {
    // The best of 15 timed products (a third of a second): with 3, one busy moment of a shared
    // machine set the ceiling low and the MFU column passed 100%.
    ceiling = measure_sgemm_gflops(1536, 16);
    // MFU(sheet) on the CPU: against the FMA peak of the cores the threads may use.
    const auto fma = cpu_fma_peak_tflops(std::min(double(omp_get_max_threads()), double(available_cores())));
    if (fma) datasheet_gflops = fma->first * 1e3;
    std::printf("device: cpu, %d OpenMP threads, %s; sgemm ceiling %.1f GFLOP/s (best of 15 1536^3 sgemm); %s\n",
                omp_get_max_threads(), cpu::describe_blas().c_str(), ceiling,
                fma ? fma->second.c_str() : "no FMA peak known for this CPU");
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
  if (o.lora.enabled()) {
    const char* base = o.lora.base == BaseFormat::kNf4 ? (o.lora.double_quant ? "nf4, double-quantized scales" : "nf4")
                       : o.lora.base == BaseFormat::kBf16 ? "bf16"
                                                          : "the compute dtype";
    std::printf("lora: rank %d on every product, %.2fM trainable; the base frozen in %s\n", o.lora.rank,
                double(rig.parameters()) / 1e6, base);
  }
  std::printf("model, gradients and optimizer state: %.1f MiB\n", rig.state_bytes() / (1024.0 * 1024.0));
  std::printf("%-8s %6s %10s %10s %10s %11s %10s %7s %9s %9s\n", "shape", "steps", "ms/step", "min ms",
              "max ms", "tokens/s", "GFLOP/s", "MFU", "MFU(sheet)", "peak MiB");

  bool ok = true;
  for (const BatchShape& s : o.shapes) {
    const size_t n = size_t(s.B) * s.T;
    const std::vector<double> times = rig.time_steps(s, o.warmup, o.steps, ok);
    const double med = median(times);
    const double tok_s = double(n) / med;
    const double gflops = training_flops_per_token(mc, s.T, o.lora) * double(n) / med / 1e9;
    char name[32];
    std::snprintf(name, sizeof name, "%dx%d", s.B, s.T);
    char sheet_mfu[16] = "-";
    if (datasheet_gflops > 0) std::snprintf(sheet_mfu, sizeof sheet_mfu, "%.1f%%", 100.0 * gflops / datasheet_gflops);
    std::printf("%-8s %6d %10.1f %10.1f %10.1f %11.1f %10.1f %6.1f%% %9s %9.0f\n", name, o.steps, med * 1e3,
                *std::min_element(times.begin(), times.end()) * 1e3,
                *std::max_element(times.begin(), times.end()) * 1e3, tok_s, gflops, 100.0 * gflops / ceiling,
                sheet_mfu, double(backend->peak_memory_bytes()) / (1024.0 * 1024.0));
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace feast
