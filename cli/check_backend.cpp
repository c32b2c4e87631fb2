// `trainer check-backend`: every op of backend/backend.h runs on the tested backend and on a
// CpuBackend from identical inputs, and every output is compared, accumulated gradients included
// (both sides start them from the same nonzero values, and every overwritten output starts from
// random values too, so an element a kernel forgets to write shows). The shapes are the ones that
// break kernels: widths that are not multiples of 8, one row, long rows, grouped-query heads of
// several sizes, a vocabulary range that leaves tokens out, padded logit columns, ignored targets.
// In bfloat16 every compute-dtype input is rounded to bfloat16 first and the reference gets the
// rounded values in float32, so a row measures the tested computation's error alone. For the
// same reason each op gets fresh inputs: a backward reads the reference forward's statistics, not
// the tested one's. Attention's state and workspace are backend-private, so attention's backward
// reads its own forward's state, and they are never compared.
#include "cli/check_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/rope.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: trainer check-backend [--device cuda|cpu] [--dtype fp32|bf16|both] [--seed N] [--verbose]\n"
    "Runs every op of the compute backend, forward and backward, on odd shapes on the device and on the\n"
    "CPU reference from identical random inputs, and compares every output: the largest |test - ref|\n"
    "relative to the largest |ref| of the tensor (tolerance fp32 1e-4, bf16 2e-2) and the NMSE. Prints\n"
    "one row per output and a summary; exits 0 when all pass, 1 on any mismatch, and 2 when --device\n"
    "cuda finds no CUDA device (nothing was checked).\n"
    "  --device cuda|cpu       the backend to test (default cuda; cpu checks the harness: every error 0)\n"
    "  --dtype fp32|bf16|both  its compute dtype (default both; the CPU backend computes in fp32 only)\n"
    "  --seed N                the random inputs (default 1)\n"
    "  --verbose               also print each output's worst element\n"
    "  --inject-error OP       perturb OP's first output on the tested side (the harness's own test)";

// The ops with results to compare: every op of Backend but the stream, events and memory peak.
// A run that leaves one of them uncompared fails.
const std::vector<std::string> kOps = {
    "embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward", "rmsnorm_forward",
    "rmsnorm_backward", "matmul_forward", "matmul_gelu_forward", "matmul_backward", "matmul_backward_input",
    "matmul_backward_weight_rows", "attention_forward", "attention_backward", "rope_forward", "rope_backward",
    "gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward", "add", "cross_entropy_row_max",
    "cross_entropy_partials", "cross_entropy_finish", "sum", "adamw_step", "sum_of_squares", "sums_of_squares",
    "cast", "copy", "zero"};

// The largest |test - ref| allowed, relative to the largest |ref| of the tensor.
double tolerance_for(DType computed_in) { return computed_in == DType::kBFloat16 ? 2e-2 : 1e-4; }
const char* dtype_label(DType dtype) { return dtype == DType::kBFloat16 ? "bf16" : "fp32"; }

struct CheckOptions {
  std::string device = "cuda";
  std::vector<std::string> dtypes = {"fp32", "bf16"};
  uint64_t seed = 1;
  bool verbose = false;
  std::string inject_error;  // an op of kOps, or empty
};

// One compared output (or an op that threw before its outputs could be compared).
struct Row {
  std::string op, output, shape, dtype;
  double max_rel_err = 0, nmse = 0, tolerance = 0;
  bool ok = true;
  size_t worst = 0;  // the element of the largest error
  double test_value = 0, ref_value = 0;
  std::string error;
};

// The table, printed as rows arrive so a run that crashes still shows how far it got.
class Report {
 public:
  explicit Report(bool verbose) : verbose_(verbose) {}

  void print_header() const {
    char line[256];
    std::snprintf(line, sizeof line, "%-42s %-46s %-5s %11s %11s %8s  %s", "op output", "shape", "dtype",
                  "max rel err", "NMSE", "tol", "result");
    log::info(line);
  }

  void add(Row row) {
    char line[512];
    const std::string what = row.op + " " + row.output;
    if (!row.error.empty()) {
      std::snprintf(line, sizeof line, "%-42s %-46s %-5s %s  FAIL", what.c_str(), row.shape.c_str(), row.dtype.c_str(),
                    row.error.c_str());
    } else {
      std::snprintf(line, sizeof line, "%-42s %-46s %-5s %11.3e %11.3e %8.0e  %s", what.c_str(), row.shape.c_str(),
                    row.dtype.c_str(), row.max_rel_err, row.nmse, row.tolerance, row.ok ? "ok" : "FAIL");
    }
    log::info(line);
    if (row.error.empty() && row.max_rel_err > 0 && (verbose_ || !row.ok)) {
      std::snprintf(line, sizeof line, "    worst: element %zu is %.9g, reference %.9g", row.worst, row.test_value,
                    row.ref_value);
      log::info(line);
    }
    rows_.push_back(std::move(row));
  }

  const std::vector<Row>& rows() const { return rows_; }

 private:
  bool verbose_;
  std::vector<Row> rows_;
};

enum class Side { kTest, kRef };

// One tensor on both backends holding the same values: the tested side in the op's dtype, the
// reference in float32 (token ids in int32 on both).
struct Twin {
  Tensor test, ref;
  TensorView operator[](Side side) const { return side == Side::kTest ? test.view() : ref.view(); }
};

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// Every op of one backend in one compute dtype against the CPU reference.
class BackendComparison {
 public:
  BackendComparison(Backend& tested, const CheckOptions& options, Report& report)
      : tested_(tested), compute_(tested.compute_dtype()), options_(options), report_(report) {}

  void run() {
    guarded([&] { embedding(3, 5, 7, 4, 13, 20, true); });  // rows [4, 13) of 20: tokens outside
    guarded([&] { embedding(1, 1, 4099, 0, 50, 50, false); });
    guarded([&] { embedding(2, 67, 259, 100, 300, 400, true); });

    for (const auto& rows_channels : {std::pair{9, 67}, std::pair{1, 4099}, std::pair{13, 4099}})
      guarded([&] { norms(rows_channels.first, rows_channels.second); });

    guarded([&] { matmul(13, 21, 35, true, true, true); });
    guarded([&] { matmul(1, 67, 129, false, false, false); });
    guarded([&] { matmul(67, 771, 131, true, false, true); });
    guarded([&] { matmul(33, 259, 2053, false, true, false); });
    // GPT-2's MLP input with its GELU: widths a multiple of 8 (the fused epilogue on the GPU, in
    // bf16) and not (the separate kernels).
    guarded([&] { matmul_gelu(67, 136, 264, true); });
    guarded([&] { matmul_gelu(67, 131, 264, true); });
    guarded([&] { matmul_gelu(5, 64, 1024, false); });
    guarded([&] { matmul_gelu(13, 21, 35, true); });

    for (int hs : {8, 48, 64, 80}) {
      for (int T : {1, 17, 67})
        for (const auto& heads : {std::pair{6, 2}, std::pair{4, 4}})  // grouped-query, and NH = NKV
          guarded([&] { attention(2, T, heads.first, heads.second, hs); });
      guarded([&] { rope(2, 17, 6, 2, hs); });
      guarded([&] { rope(1, 67, 4, 4, hs); });
    }

    for (size_t n : {size_t(1), size_t(370), size_t(40993)}) {
      guarded([&] { gelu(n); });
      guarded([&] { add(n, n == 370); });
    }
    for (const auto& rows_width : {std::pair{5, 37}, std::pair{1, 4099}, std::pair{17, 1031}})
      guarded([&] { swiglu(rows_width.first, rows_width.second); });

    // A rank holding columns [64, 96) of 90 real ones, 6 padded; every target kind.
    guarded([&] { cross_entropy(6, 32, 64, 90, {70, 3, 89, 64, -1, 12}, true, 0.125f); });
    // Columns [5003, 10006) of 9000: 1006 padded; training (keep_exp, dloss) and evaluation.
    const std::vector<int32_t> targets = {5003, 8999, -1, 12, 7000, -1, 5100};
    guarded([&] { cross_entropy(7, 5003, 5003, 9000, targets, true, 0.37f); });
    guarded([&] { cross_entropy(7, 5003, 5003, 9000, targets, false, 0.0f); });
    guarded([&] { cross_entropy(1, 5003, 0, 5000, {4999}, true, 0.0f); });

    guarded([&] { adamw(1001, 0.1f, 0.5f); });
    guarded([&] { adamw(40993, 0.0f, 0.25f); });
    for (size_t n : {size_t(1), size_t(1001), size_t(1000003)}) guarded([&] { reductions(n); });
    guarded([&] { casts(1001); });
    guarded([&] { memory(4099); });
  }

 private:
  Backend& backend(Side side) {
    if (side == Side::kTest) return tested_;
    return reference_;
  }

  // Runs op(backend, side) on the tested backend, then on the reference.
  template <typename Op>
  void on_both(Op op) {
    op(tested_, Side::kTest);
    op(reference_, Side::kRef);
  }

  // A group of ops on one shape; an exception (an operand check, a device error) fails the op that
  // threw and ends the group, and the run goes on with the next.
  void guarded(const std::function<void()>& group) {
    try {
      group();
    } catch (const std::exception& e) {
      Row row;
      row.op = op_;
      row.shape = shape_;
      row.dtype = dtype_label(compute_);
      row.ok = false;
      row.error = "threw: " + first_line(e.what());
      report_.add(std::move(row));
    }
  }

  void begin(const std::string& op, const std::string& shape) {
    op_ = op;
    shape_ = shape;
  }

  // ---- inputs ------------------------------------------------------------------------------------
  std::vector<float> random(size_t n, double scale = 1, double offset = 0) {
    const uint64_t stream = next_stream_++;
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(offset + scale * normal_at(options_.seed, stream, i));
    return v;
  }

  // values on both sides: the tested one in `dtype` (rounded to it first, so the reference sees
  // exactly what the tested side holds), uploaded as float32 and cast on the device.
  Twin upload(std::vector<float> values, DType dtype) {
    if (dtype == DType::kBFloat16)
      for (float& x : values) x = bf16_to_float(float_to_bf16(x));
    const TensorView host = host_view(values.data(), values.size());
    Twin t{tested_.allocate(dtype, values.size()), reference_.allocate(DType::kFloat32, values.size())};
    reference_.copy(t.ref.view(), host);
    if (dtype == DType::kFloat32) {
      tested_.copy(t.test.view(), host);
    } else {
      Tensor staging = tested_.allocate(DType::kFloat32, values.size());
      tested_.copy(staging.view(), host);
      tested_.cast(t.test.view(), staging.view());
    }
    return t;
  }
  // Parameters and activations: the compute dtype.
  Twin activations(size_t n, double scale = 1, double offset = 0) { return upload(random(n, scale, offset), compute_); }
  // Gradients of parameters, statistics, optimizer state: float32.
  Twin floats(size_t n, double scale = 1, double offset = 0) {
    return upload(random(n, scale, offset), DType::kFloat32);
  }
  Twin ints(const std::vector<int32_t>& ids) {
    Twin t{tested_.allocate(DType::kInt32, ids.size()), reference_.allocate(DType::kInt32, ids.size())};
    tested_.copy(t.test.view(), host_view(ids.data(), ids.size()));
    reference_.copy(t.ref.view(), host_view(ids.data(), ids.size()));
    return t;
  }
  // The reference side's values of x as a fresh twin: the next op's identical input.
  Twin reference_copy(const Twin& x) {
    const std::vector<double> values = download(Side::kRef, x.ref);
    return upload(std::vector<float>(values.begin(), values.end()), x.test.dtype());
  }

  // ---- outputs -----------------------------------------------------------------------------------
  // A float32 or bfloat16 tensor of `side` on the host (bfloat16 cast to float32 on its device).
  std::vector<double> download(Side side, const Tensor& t) {
    Backend& be = backend(side);
    std::vector<float> host(t.numel());
    if (t.dtype() == DType::kFloat32) {
      be.copy(host_view(host.data(), host.size()), t.view());
    } else {
      Tensor staging = be.allocate(DType::kFloat32, t.numel());
      be.cast(staging.view(), t.view());
      be.copy(host_view(host.data(), host.size()), staging.view());
    }
    return {host.begin(), host.end()};
  }

  // Held to the compute dtype's tolerance, or to float32's for an op that computes in float32
  // whatever the compute dtype (the optimizer, the reductions) or that is exact (casts, copies).
  void compare(const std::string& output, const Twin& x) { compare(output, x, compute_); }
  void compare(const std::string& output, const Twin& x, DType held_to) {
    compare_values(output, download(Side::kTest, x.test), download(Side::kRef, x.ref), held_to);
  }

  void compare_values(const std::string& output, std::vector<double> test, const std::vector<double>& ref,
                      DType held_to) {
    FEAST_CHECK(test.size() == ref.size(), "check-backend: " << op_ << " " << output << ": " << test.size()
                                                             << " elements against " << ref.size());
    double max_ref = 0, ref_squares = 0;
    for (double r : ref) {
      if (!std::isfinite(r)) continue;
      max_ref = std::max(max_ref, std::abs(r));
      ref_squares += r * r;
    }
    if (op_ == options_.inject_error && !injected_ && !test.empty()) {
      test[test.size() / 2] += std::max(max_ref, 1.0);
      injected_ = true;
    }
    double worst = 0, error_squares = 0;
    size_t at = 0;
    for (size_t i = 0; i < test.size(); ++i) {
      double d = test[i] == ref[i] ? 0.0 : std::abs(test[i] - ref[i]);
      if (!std::isfinite(d)) d = std::numeric_limits<double>::infinity();  // a NaN never passes
      if (d > worst) {
        worst = d;
        at = i;
      }
      error_squares += d * d;
    }
    const double tiny = std::numeric_limits<double>::min();
    Row row;
    row.op = op_;
    row.output = output;
    row.shape = shape_;
    row.dtype = dtype_label(compute_);
    row.tolerance = tolerance_for(held_to);
    row.max_rel_err = worst == 0 ? 0 : worst / std::max(max_ref, tiny);
    row.nmse = error_squares == 0 ? 0 : error_squares / std::max(ref_squares, tiny);
    row.ok = row.max_rel_err <= row.tolerance;
    row.worst = at;
    row.test_value = test.empty() ? 0 : test[at];
    row.ref_value = ref.empty() ? 0 : ref[at];
    report_.add(std::move(row));
  }

  // ---- the ops -----------------------------------------------------------------------------------
  // Tokens drawn from [0, token_range), with the local range's edges and the ids just outside it.
  void embedding(int B, int T, int C, int vocab_begin, int vocab_end, int token_range, bool positions) {
    const size_t N = size_t(B) * size_t(T), Vl = size_t(vocab_end - vocab_begin);
    std::vector<int32_t> tok(N);
    const uint64_t stream = next_stream_++;
    for (size_t i = 0; i < N; ++i) tok[i] = int32_t(uniform_index(options_.seed, stream, i, uint64_t(token_range)));
    tok[0] = vocab_begin;
    if (N > 1) tok[N - 1] = vocab_end - 1;
    if (N > 2) tok[1] = vocab_end;
    if (N > 3 && vocab_begin > 0) tok[2] = vocab_begin - 1;
    const std::string shape = "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                              " vocab [" + std::to_string(vocab_begin) + "," + std::to_string(vocab_end) + ") of " +
                              std::to_string(token_range) + (positions ? " +wpe" : "");
    begin("embedding_forward", shape);
    const Twin tokens = ints(tok), wte = activations(Vl * size_t(C));
    const Twin wpe = positions ? activations(size_t(T) * size_t(C)) : Twin{};
    const Twin out = activations(N * size_t(C));
    on_both([&](Backend& be, Side s) {
      be.embedding_forward(out[s], tokens[s], wte[s], wpe[s], B, T, C, vocab_begin, vocab_end);
    });
    compare("out", out);

    begin("embedding_backward", shape);
    const Twin dout = activations(N * size_t(C)), dwte = floats(Vl * size_t(C));
    const Twin dwpe = positions ? floats(size_t(T) * size_t(C)) : Twin{};
    on_both([&](Backend& be, Side s) {
      be.embedding_backward(dwte[s], dwpe[s], dout[s], tokens[s], B, T, C, vocab_begin, vocab_end);
    });
    compare("dwte", dwte);
    if (positions) compare("dwpe", dwpe);
  }

  void norms(int N, int C) {
    const std::string shape = "N=" + std::to_string(N) + " C=" + std::to_string(C);
    const size_t NC = size_t(N) * size_t(C);
    begin("layernorm_forward", shape);
    const Twin x = activations(NC, 2.0, 0.5), w = activations(size_t(C), 0.5, 1.0), b = activations(size_t(C), 0.5);
    const Twin dout = activations(NC);
    const Twin out = activations(NC), mean = floats(size_t(N)), rstd = floats(size_t(N));
    on_both([&](Backend& be, Side s) { be.layernorm_forward(out[s], mean[s], rstd[s], x[s], w[s], b[s], N, C, 1e-5f); });
    compare("out", out);
    compare("mean", mean);
    compare("rstd", rstd);

    begin("layernorm_backward", shape);
    const Twin saved_mean = reference_copy(mean), saved_rstd = reference_copy(rstd);
    const Twin dinp = activations(NC), dweight = floats(size_t(C)), dbias = floats(size_t(C));
    on_both([&](Backend& be, Side s) {
      be.layernorm_backward(dinp[s], dweight[s], dbias[s], dout[s], x[s], w[s], saved_mean[s], saved_rstd[s], N, C);
    });
    compare("dinp", dinp);
    compare("dweight", dweight);
    compare("dbias", dbias);

    begin("rmsnorm_forward", shape);
    const Twin rms_out = activations(NC), rms_rstd = floats(size_t(N));
    on_both([&](Backend& be, Side s) { be.rmsnorm_forward(rms_out[s], rms_rstd[s], x[s], w[s], N, C, 1e-6f); });
    compare("out", rms_out);
    compare("rstd", rms_rstd);

    begin("rmsnorm_backward", shape);
    const Twin rms_saved = reference_copy(rms_rstd), rms_dinp = activations(NC), rms_dweight = floats(size_t(C));
    on_both([&](Backend& be, Side s) {
      be.rmsnorm_backward(rms_dinp[s], rms_dweight[s], dout[s], x[s], w[s], rms_saved[s], N, C);
    });
    compare("dinp", rms_dinp);
    compare("dweight", rms_dweight);
  }

  void matmul(int N, int C, int OC, bool with_bias, bool with_dinp, bool with_dbias) {
    const std::string shape = "N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
    begin("matmul_forward", shape + (with_bias ? " bias" : ""));
    const Twin x = activations(n * c), w = activations(oc * c), dout = activations(n * oc);
    const Twin bias = with_bias ? activations(oc) : Twin{};
    const Twin out = activations(n * oc);
    on_both([&](Backend& be, Side s) { be.matmul_forward(out[s], x[s], w[s], bias[s], N, C, OC); });
    compare("out", out);

    begin("matmul_backward", shape + (with_dinp ? " dinp" : "") + (with_dbias ? " dbias" : ""));
    const Twin dinp = with_dinp ? activations(n * c) : Twin{}, dweight = floats(oc * c);
    const Twin dbias = with_dbias ? floats(oc) : Twin{};
    on_both([&](Backend& be, Side s) { be.matmul_backward(dinp[s], dweight[s], dbias[s], dout[s], x[s], w[s], N, C, OC); });
    if (with_dinp) compare("dinp", dinp);
    compare("dweight", dweight);
    if (with_dbias) compare("dbias", dbias);

    begin("matmul_backward_input", shape);
    const Twin dinp_only = activations(n * c);
    on_both([&](Backend& be, Side s) { be.matmul_backward_input(dinp_only[s], dout[s], w[s], N, C, OC); });
    compare("dinp", dinp_only);

    const int row_begin = OC / 3, row_end = std::min(OC, 2 * OC / 3 + 1);  // a middle chunk of rows
    begin("matmul_backward_weight_rows",
          shape + " rows [" + std::to_string(row_begin) + "," + std::to_string(row_end) + ")");
    const Twin rows = floats(size_t(row_end - row_begin) * c);
    on_both([&](Backend& be, Side s) {
      be.matmul_backward_weight_rows(rows[s], dout[s], x[s], N, C, OC, row_begin, row_end);
    });
    compare("dweight_rows", rows);
  }

  void matmul_gelu(int N, int C, int OC, bool with_bias) {
    const size_t n = size_t(N), c = size_t(C), oc = size_t(OC);
    begin("matmul_gelu_forward",
          "N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) + (with_bias ? " bias" : ""));
    const Twin x = activations(n * c), w = activations(oc * c);
    const Twin bias = with_bias ? activations(oc) : Twin{};
    const Twin pre = activations(n * oc), act = activations(n * oc);
    on_both([&](Backend& be, Side s) { be.matmul_gelu_forward(pre[s], act[s], x[s], w[s], bias[s], N, C, OC); });
    compare("pre", pre);
    compare("act", act);
  }

  static std::string heads_shape(const AttentionShape& a) {
    return "B=" + std::to_string(a.B) + " T=" + std::to_string(a.T) + " NH=" + std::to_string(a.n_head) +
           " NKV=" + std::to_string(a.n_kv_head) + " hs=" + std::to_string(a.head_dim);
  }

  void attention(int B, int T, int NH, int NKV, int hs) {
    const AttentionShape a{B, T, NH, NKV, hs};
    const std::string shape = heads_shape(a);
    const size_t qkv_numel = a.rows() * size_t(a.qkv_width()), out_numel = a.rows() * size_t(a.out_width());
    begin("attention_forward", shape);
    const Twin qkv = activations(qkv_numel, 1.5);
    // Backend-private, sized by each backend for itself; never compared.
    const Twin state{tested_.allocate(DType::kFloat32, tested_.attention_state_size(a)),
                     reference_.allocate(DType::kFloat32, reference_.attention_state_size(a))};
    const Twin workspace{tested_.allocate(compute_, tested_.attention_workspace_size(a)),
                         reference_.allocate(DType::kFloat32, reference_.attention_workspace_size(a))};
    const Twin out = activations(out_numel);
    on_both([&](Backend& be, Side s) { be.attention_forward(out[s], state[s], qkv[s], a); });
    compare("out", out);

    begin("attention_backward", shape);
    const Twin dout = activations(out_numel), dqkv = activations(qkv_numel);
    on_both([&](Backend& be, Side s) { be.attention_backward(dqkv[s], dout[s], qkv[s], out[s], state[s], workspace[s], a); });
    compare("dqkv", dqkv);
  }

  void rope(int B, int T, int NH, int NKV, int hs) {
    const AttentionShape a{B, T, NH, NKV, hs};
    const std::string shape = heads_shape(a);
    begin("rope_forward", shape);
    ModelConfig mc;
    mc.n_head = 1;
    mc.n_embd = hs;
    mc.max_seq_len = T + 3;  // a table longer than the sequence, as in training
    mc.rope_theta = 10000;
    std::vector<float> cos, sin;
    rope_tables(mc, cos, sin);
    const Twin tcos = upload(cos, DType::kFloat32), tsin = upload(sin, DType::kFloat32);
    const size_t qkv_numel = a.rows() * size_t(a.qkv_width());
    const Twin qkv = activations(qkv_numel, 1.5);
    on_both([&](Backend& be, Side s) { be.rope_forward(qkv[s], tcos[s], tsin[s], a); });
    compare("qkv", qkv);

    begin("rope_backward", shape);
    const Twin dqkv = activations(qkv_numel);
    on_both([&](Backend& be, Side s) { be.rope_backward(dqkv[s], tcos[s], tsin[s], a); });
    compare("dqkv", dqkv);
  }

  void gelu(size_t n) {
    const std::string shape = "n=" + std::to_string(n);
    begin("gelu_forward", shape);
    const Twin x = activations(n, 3.0);
    const Twin out = activations(n);
    on_both([&](Backend& be, Side s) { be.gelu_forward(out[s], x[s], n); });
    compare("out", out);

    begin("gelu_backward", shape);
    const Twin dout = activations(n), dinp = activations(n);
    on_both([&](Backend& be, Side s) { be.gelu_backward(dinp[s], x[s], dout[s], n); });
    compare("dinp", dinp);

    begin("gelu_backward", shape + " in place (dinp = dout)");
    const Twin d = activations(n);
    on_both([&](Backend& be, Side s) { be.gelu_backward(d[s], x[s], d[s], n); });
    compare("dinp", d);
  }

  void swiglu(int N, int I) {
    const std::string shape = "N=" + std::to_string(N) + " I=" + std::to_string(I);
    const size_t half = size_t(N) * size_t(I);
    begin("swiglu_forward", shape);
    const Twin x = activations(2 * half, 3.0);
    const Twin out = activations(half);
    on_both([&](Backend& be, Side s) { be.swiglu_forward(out[s], x[s], N, I); });
    compare("out", out);

    begin("swiglu_backward", shape);
    const Twin dout = activations(half), dinp = activations(2 * half);
    on_both([&](Backend& be, Side s) { be.swiglu_backward(dinp[s], x[s], dout[s], N, I); });
    compare("dinp", dinp);
  }

  // The residual connection; with `in_place` out is b, as the model calls it.
  void add(size_t n, bool in_place) {
    begin("add", "n=" + std::to_string(n) + (in_place ? " in place (out = b)" : ""));
    const Twin a = activations(n), b = activations(n);
    const Twin separate = in_place ? Twin{} : activations(n);
    const Twin& out = in_place ? b : separate;
    on_both([&](Backend& be, Side s) { be.add(out[s], a[s], b[s], n); });
    compare("out", out);
  }

  void cross_entropy(int N, int Vl, int vocab_begin, int V, const std::vector<int32_t>& target_ids, bool keep_exp,
                     float dloss) {
    const std::string shape = "N=" + std::to_string(N) + " Vl=" + std::to_string(Vl) + " vb=" +
                              std::to_string(vocab_begin) + " V=" + std::to_string(V);
    const size_t n = size_t(N);
    begin("cross_entropy_row_max", shape);
    const Twin logits = activations(n * size_t(Vl), 3.0), targets = ints(target_ids);
    const Twin row_max = floats(n);
    on_both([&](Backend& be, Side s) { be.cross_entropy_row_max(row_max[s], logits[s], N, Vl, vocab_begin, V); });
    compare("row_max", row_max);

    // Every other row's maximum raised, as another rank's larger maximum would after the reduction.
    const std::vector<double> local_max = download(Side::kRef, row_max.ref);
    std::vector<float> global_max(local_max.begin(), local_max.end());
    for (size_t i = 1; i < n; i += 2) global_max[i] += 2.0f;
    const Twin gmax = upload(global_max, DType::kFloat32);

    const std::string partials_shape = shape + (keep_exp ? " keep_exp" : "");
    begin("cross_entropy_partials", partials_shape);
    const Twin sum_exp = floats(n), target_logit = floats(n);
    on_both([&](Backend& be, Side s) {
      be.cross_entropy_partials(sum_exp[s], target_logit[s], logits[s], gmax[s], targets[s], N, Vl, vocab_begin, V,
                                keep_exp);
    });
    compare("sum_exp", sum_exp);
    compare("target_logit", target_logit);
    compare(keep_exp ? "exp(logits)" : "logits", logits);

    begin("cross_entropy_finish", partials_shape + " dloss=" + format_number(dloss));
    const Twin phase3_logits = reference_copy(logits), phase3_sum_exp = reference_copy(sum_exp),
               phase3_target_logit = reference_copy(target_logit), losses = floats(n);
    on_both([&](Backend& be, Side s) {
      be.cross_entropy_finish(phase3_logits[s], losses[s], gmax[s], phase3_sum_exp[s], phase3_target_logit[s],
                              targets[s], N, Vl, vocab_begin, V, dloss);
    });
    compare("losses", losses);
    compare(dloss != 0 ? "dlogits" : "logits", phase3_logits);
  }

  void adamw(size_t n, float weight_decay, float grad_scale) {
    begin("adamw_step", "n=" + std::to_string(n) + " wd=" + format_number(weight_decay) +
                            " grad_scale=" + format_number(grad_scale));
    const std::vector<float> initial = random(n);
    std::vector<float> second_moment = random(n, 0.01);
    for (float& v : second_moment) v = std::abs(v);
    const Twin params = upload(initial, DType::kFloat32), m = floats(n, 0.1), g = floats(n);
    const Twin v = upload(second_moment, DType::kFloat32);
    // Step 3 of beta1 0.9, beta2 0.95: bias corrections 1 - 0.9^3 and sqrt(1 - 0.95^3).
    const AdamWStep step{1e-2f, 0.9f, 0.95f, 1e-8f, weight_decay, 0.271f, std::sqrt(0.142625f)};
    on_both([&](Backend& be, Side s) { be.adamw_step(params[s], m[s], v[s], g[s], step, grad_scale); });
    std::vector<double> test = download(Side::kTest, params.test), ref = download(Side::kRef, params.ref);
    compare_values("params", test, ref, DType::kFloat32);
    // The step itself, which is small next to the parameters it changes.
    for (size_t i = 0; i < n; ++i) {
      test[i] -= initial[i];
      ref[i] -= initial[i];
    }
    compare_values("params - before", test, ref, DType::kFloat32);
    compare("exp_avg", m, DType::kFloat32);
    compare("exp_avg_sq", v, DType::kFloat32);
  }

  void reductions(size_t n) {
    const std::string shape = "n=" + std::to_string(n);
    begin("sum", shape);
    const Twin x = floats(n, 1.0, 0.5);
    compare_values("value", {tested_.sum(x.test.view())}, {reference_.sum(x.ref.view())}, DType::kFloat32);
    begin("sum_of_squares", shape);
    compare_values("value", {tested_.sum_of_squares(x.test.view())}, {reference_.sum_of_squares(x.ref.view())},
                   DType::kFloat32);
    // Several parts at once, one of them empty (the gradient norm's per-tensor squares).
    begin("sums_of_squares", shape);
    const size_t a = n / 3, b = n / 3 + 1;
    const auto parts = [&](const Tensor& t) {
      return std::vector<TensorView>{t.view().first(a), t.view().slice(a, 0), t.view().slice(a, b),
                                     t.view().slice(a + b, n - a - b)};
    };
    const std::vector<double> got = tested_.sums_of_squares(parts(x.test));
    const std::vector<double> want = reference_.sums_of_squares(parts(x.ref));
    compare_values("values", got, want, DType::kFloat32);
  }

  // Both directions, each read without the other: bfloat16 goes to and from the host as bits.
  void casts(size_t n) {
    std::vector<float> values = random(n, 3.0);
    // Ties to even and the edges of the range (65504 rounds up to 65536; 1e-20 stays normal).
    const float edges[] = {1.00390625f, 1.01171875f, -3.14159265f, 65504.0f, 1e-20f, 0.0f};
    std::copy(std::begin(edges), std::end(edges), values.begin());
    const auto bits_view = [](std::vector<uint16_t>& bits) {
      return TensorView{bits.data(), DType::kBFloat16, kCpu, bits.size()};
    };

    begin("cast", "n=" + std::to_string(n) + " fp32 -> bf16");
    const Twin f = upload(values, DType::kFloat32);
    const Twin h{tested_.allocate(DType::kBFloat16, n), reference_.allocate(DType::kBFloat16, n)};
    on_both([&](Backend& be, Side s) { be.cast(h[s], f[s]); });
    std::vector<double> got[2];
    for (Side s : {Side::kTest, Side::kRef}) {
      std::vector<uint16_t> bits(n);
      backend(s).copy(bits_view(bits), h[s]);
      for (uint16_t b : bits) got[int(s)].push_back(bf16_to_float(b));
    }
    compare_values("out", got[int(Side::kTest)], got[int(Side::kRef)], DType::kFloat32);

    begin("cast", "n=" + std::to_string(n) + " bf16 -> fp32");
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) bits[i] = float_to_bf16(values[i]);
    const Twin hb{tested_.allocate(DType::kBFloat16, n), reference_.allocate(DType::kBFloat16, n)};
    tested_.copy(hb.test.view(), bits_view(bits));
    reference_.copy(hb.ref.view(), bits_view(bits));
    const Twin out = floats(n);
    on_both([&](Backend& be, Side s) { be.cast(out[s], hb[s]); });
    compare("out", out, DType::kFloat32);
  }

  // A copy on the device and zero, in the compute dtype.
  void memory(size_t n) {
    begin("copy", "n=" + std::to_string(n) + " device to device");
    const Twin src = activations(n), dst = activations(n);
    on_both([&](Backend& be, Side s) { be.copy(dst[s], src[s]); });
    compare("dst", dst, DType::kFloat32);

    begin("zero", "n=" + std::to_string(n));
    const Twin x = activations(n);
    on_both([&](Backend& be, Side s) { be.zero(x[s]); });
    compare("x", x, DType::kFloat32);
  }

  Backend& tested_;
  CpuBackend reference_;
  const DType compute_;
  const CheckOptions& options_;
  Report& report_;
  uint64_t next_stream_ = 1;   // each random tensor draws its own stream
  std::string op_, shape_;     // the op being checked, for its rows
  bool injected_ = false;      // --inject-error has perturbed its output
};

CheckOptions parse_options(const std::vector<std::string>& args) {
  CheckOptions o;
  std::string dtype = "both";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
      inline_value = true;
    }
    const auto take = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= args.size()) throw ConfigError("check-backend: " + flag + " needs a value\n" + kUsage);
      return args[++i];
    };
    if (flag == "--device") {
      o.device = take();
      if (o.device != "cuda" && o.device != "cpu")
        throw ConfigError("check-backend: --device: expected cuda or cpu, got '" + o.device + "'");
    } else if (flag == "--dtype") {
      dtype = take();
      if (dtype != "fp32" && dtype != "bf16" && dtype != "both")
        throw ConfigError("check-backend: --dtype: expected fp32, bf16 or both, got '" + dtype + "'");
    } else if (flag == "--seed") {
      const std::string text = take();
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19)
        throw ConfigError("check-backend: --seed: expected a non-negative integer, got '" + text + "'");
      o.seed = std::stoull(text);
    } else if (flag == "--verbose" && !inline_value) {
      o.verbose = true;
    } else if (flag == "--inject-error") {
      o.inject_error = take();
      if (std::find(kOps.begin(), kOps.end(), o.inject_error) == kOps.end())
        throw ConfigError("check-backend: --inject-error: no op named '" + o.inject_error + "'");
    } else {
      throw ConfigError("check-backend: unknown option '" + args[i] + "'\n" + kUsage);
    }
  }
  if (o.device == "cpu") {
    if (dtype == "bf16")
      throw ConfigError("check-backend: --dtype bf16 needs --device cuda: the CPU backend computes in fp32 only");
    o.dtypes = {"fp32"};
  } else if (dtype != "both") {
    o.dtypes = {dtype};
  }
  return o;
}

}  // namespace

int check_backend_command(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    log::info(kUsage);
    return 0;
  }
  const CheckOptions options = parse_options(args);
  if (options.device == "cuda" && (!cuda_backend_built() || cuda_device_count() == 0)) {
    std::fprintf(stderr, "check-backend: did not run: no CUDA device is available (%s)\n",
                 cuda_backend_built() ? "the driver reports no GPU; check nvidia-smi and CUDA_VISIBLE_DEVICES"
                                      : "this trainer was built without the CUDA backend");
    return 2;
  }

  std::string dtypes;
  for (const std::string& d : options.dtypes) dtypes += (dtypes.empty() ? "" : " and ") + d;
  log::info("check-backend: " + options.device + " in " + dtypes + " against the CPU reference, seed " +
            std::to_string(options.seed));
  log::info("tolerance on max |test - ref| / max |ref| per output: fp32 1e-04, bf16 2e-02 (adamw_step, sum, "
            "sum_of_squares, sums_of_squares, cast, copy and zero compute in float32 or are exact: held to "
            "fp32's in every run)");
  Report report(options.verbose);
  report.print_header();
  std::string tested_name;
  for (const std::string& dtype : options.dtypes) {
    const std::unique_ptr<Backend> tested = make_backend(options.device, dtype);
    tested_name = tested->name();
    BackendComparison(*tested, options, report).run();
    // Every op compared at least once in this dtype (an op that threw has its row already).
    const std::string label = dtype_label(tested->compute_dtype());
    for (const std::string& op : kOps) {
      const bool seen = std::any_of(report.rows().begin(), report.rows().end(),
                                    [&](const Row& r) { return r.op == op && r.dtype == label; });
      if (seen) continue;
      Row row;
      row.op = op;
      row.dtype = label;
      row.ok = false;
      row.error = "never compared";
      report.add(std::move(row));
    }
  }

  std::vector<std::string> failed;
  for (const Row& r : report.rows())
    if (!r.ok) failed.push_back(r.op + (r.output.empty() ? "" : " " + r.output) + " (" + r.dtype + ")");
  const std::string counted = std::to_string(report.rows().size()) + " comparisons of " +
                              std::to_string(kOps.size()) + " ops on " + tested_name + " (" + dtypes + ")";
  if (failed.empty()) {
    log::info("check-backend: all " + counted + " within tolerance");
    return 0;
  }
  std::string list;
  for (size_t i = 0; i < failed.size() && i < 10; ++i) list += (i ? ", " : "") + failed[i];
  if (failed.size() > 10) list += ", ...";
  log::info("check-backend: FAIL: " + std::to_string(failed.size()) + " of " + counted + " out of tolerance: " + list);
  return 1;
}

}  // namespace feast
