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
#include "cli/cli_args.h"
#include "train/metrics/device_peak.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: trainer bench [--arch gpt2|llama] [--shapes BxT[,BxT...]] [--warmup N] [--steps N]\n"
    "                     [--layers L] [--heads H] [--kv-heads H] [--embd C] [--intermediate I]\n"
    "                     [--vocab V] [--device cpu|cuda] [--dtype auto|fp32|bf16]\n"
    "Times training steps (zero grads + forward + backward + AdamW) on one device at each shape\n"
    "(default 4x64,8x256) after warm-up; prints the median ms/step, tokens/s and MFU ((6*N + 6*L*T*C)\n"
    "per token, N the parameters in matrix products, as llm.c counts) against the measured GEMM\n"
    "ceiling (sgemm on the CPU; on a GPU a 8192^3 product in the compute dtype, and the datasheet\n"
    "peak beside it), and on a GPU the peak device memory. The model is\n"
    "GPT-2 124M (12 layers, 12 heads, 768 channels, vocab 50257) or, with --arch llama, a Llama\n"
    "of the same depth and width (4 key/value heads, SwiGLU width 2048, vocab 32000, untied\n"
    "head). Exits non-zero if a loss is not finite or the first loss is not near ln(vocab).\n";

struct Shape {
  int B, T;
};

std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> shapes;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    const size_t x = item.find('x');
    int B = 0, T = 0;
    try {
      if (x != std::string::npos) {
        B = std::stoi(item.substr(0, x));
        T = std::stoi(item.substr(x + 1));
      }
    } catch (const std::exception&) {
    }
    if (B <= 0 || T <= 0) throw ConfigError("--shapes: '" + item + "' is not BxT (for example 4x64)\n" + kUsage);
    shapes.push_back({B, T});
    pos = comma + 1;
  }
  return shapes;
}

int parse_int(const std::string& flag, const std::string& value) { return parse_positive_int(flag, value, kUsage); }

}  // namespace

int bench_command(const std::vector<std::string>& args) {
  std::vector<Shape> shapes = {{4, 64}, {8, 256}};
  int warmup = 2, steps = 7;
  std::string device = "cpu", dtype = "auto";
  ModelConfig mc = ModelConfig::gpt2_124m();
  // --arch first: it sets the defaults the other flags override.
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--arch") continue;
    if (args[i + 1] == "llama") {
      mc.arch = "llama";
      mc.n_kv_head = 4;
      mc.intermediate_size = 2048;
      mc.vocab_size = 32000;
    } else if (args[i + 1] != "gpt2") {
      throw ConfigError("bench: --arch '" + args[i + 1] + "': expected gpt2 or llama\n" + kUsage);
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const std::string& v = option_value(args, i,
                                        {"--arch", "--shapes", "--warmup", "--steps", "--layers", "--heads", "--kv-heads",
                                         "--embd", "--intermediate", "--vocab", "--device", "--dtype"},
                                        "bench", kUsage);
    if (a == "--arch") continue;
    else if (a == "--shapes") shapes = parse_shapes(v);
    else if (a == "--warmup") warmup = parse_int(a, v);
    else if (a == "--steps") steps = parse_int(a, v);
    else if (a == "--layers") mc.n_layer = parse_int(a, v);
    else if (a == "--heads") mc.n_head = parse_int(a, v);
    else if (a == "--kv-heads") mc.n_kv_head = parse_int(a, v);
    else if (a == "--embd") mc.n_embd = parse_int(a, v);
    else if (a == "--intermediate") mc.intermediate_size = parse_int(a, v);
    else if (a == "--vocab") mc.vocab_size = parse_int(a, v);
    else if (a == "--device") device = v;
    else if (a == "--dtype") dtype = v;
  }
  if (mc.n_embd % mc.n_head != 0)
    throw ConfigError("bench: --embd " + std::to_string(mc.n_embd) + " must be divisible by --heads " +
                      std::to_string(mc.n_head));
  if (mc.n_head % mc.kv_heads() != 0)
    throw ConfigError("bench: --kv-heads " + std::to_string(mc.kv_heads()) + " must divide --heads " +
                      std::to_string(mc.n_head));
  int max_b = 1, max_t = 1;
  for (const Shape& s : shapes) {
    max_b = std::max(max_b, s.B);
    max_t = std::max(max_t, s.T);
  }
  if (max_t > mc.max_seq_len)
    throw ConfigError("bench: --shapes asks for " + std::to_string(max_t) + " tokens per sequence, above the model's " +
                      std::to_string(mc.max_seq_len));

  if (device != "cpu" && device != "cuda") throw ConfigError("bench: --device '" + device + "': expected cpu or cuda\n" + kUsage);
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
  for (const Shape& s : shapes) {
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
