#include "backend/cuda/attention_cudnn.h"

// The frontend's JSON serialisation of graphs is not used: leave its copy of nlohmann-json out.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "backend/cuda/cudnn_check.h"

namespace feast::cuda {
namespace {

namespace fe = cudnn_frontend;
using Graph = std::shared_ptr<fe::graph::Graph>;
using Key = std::tuple<int, int, int, int, int>;  // B, T, NH, NKV, hs

// Tensor ids of the graphs' inputs and outputs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

Key key_of(const AttentionShape& a) { return {a.B, a.T, a.n_head, a.n_kv_head, a.head_dim}; }

// `count` heads of a row-major (B, T, width) buffer as cuDNN's (B, heads, T, hs); where in the
// row they start is the pointer given at execution.
fe::graph::Tensor_attributes heads(const char* name, int64_t uid, const AttentionShape& a, int count, int width) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({a.B, count, a.T, a.head_dim})
      .set_stride({int64_t(a.T) * width, a.head_dim, width, 1});
}

// A bf16 graph (fp32 inside) with the q, k and v heads of the qkv buffer as its first tensors.
struct QkvGraph {
  Graph g;
  std::shared_ptr<fe::graph::Tensor_attributes> Q, K, V;
};
QkvGraph qkv_graph(const AttentionShape& a) {
  const int W = a.qkv_width();
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return {g, g->tensor(heads("Q", kQ, a, a.n_head, W)), g->tensor(heads("K", kK, a, a.n_kv_head, W)),
          g->tensor(heads("V", kV, a, a.n_kv_head, W))};
}

std::string describe(const AttentionShape& a) {
  return "B=" + std::to_string(a.B) + " T=" + std::to_string(a.T) + " NH=" + std::to_string(a.n_head) +
         " NKV=" + std::to_string(a.n_kv_head) + " hs=" + std::to_string(a.head_dim);
}

// Builds a graph's plans; an error_object that is not good becomes the returned message.
std::string build(fe::graph::Graph& g, cudnnHandle_t handle) {
  fe::error_object e = g.validate();
  if (e.is_good()) e = g.build_operation_graph(handle);
  if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = g.check_support(handle);
  if (e.is_good()) e = g.build_plans(handle);
  return e.is_good() ? "" : e.err_msg;
}

void check(const fe::error_object& e, const char* what, const AttentionShape& a) {
  if (!e.is_good()) throw Error(std::string("cuDNN attention ") + what + " (" + describe(a) + "): " + e.err_msg);
}

}  // namespace

struct CudnnAttention::Impl {
  static constexpr int64_t kMaxWorkspaceBytes = int64_t{2} << 30;
  cudnnHandle_t handle = nullptr;
  bool strict = false;  // a shape cuDNN declines is an error, not a fallback
  std::map<Key, Graph> forward, backward;
  std::set<Key> no_forward, no_backward;  // shapes cuDNN declined

  Graph forward_graph(const AttentionShape& a) {
    const int C = a.out_width();
    auto [g, Q, K, V] = qkv_graph(a);
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(1.0f / std::sqrt(float(a.head_dim)));
    auto [O, stats] = g->sdpa(Q, K, V, options);
    O->set_output(true).set_uid(kO).set_dim({a.B, a.n_head, a.T, a.head_dim}).set_stride(
        {int64_t(a.T) * C, a.head_dim, C, 1});
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({a.B, a.n_head, a.T, 1})
        .set_stride({int64_t(a.n_head) * a.T, a.T, 1, 1});
    return g;
  }

  Graph backward_graph(const AttentionShape& a) {
    const int W = a.qkv_width(), C = a.out_width();
    auto [g, Q, K, V] = qkv_graph(a);
    auto O = g->tensor(heads("O", kO, a, a.n_head, C));
    auto dO = g->tensor(heads("dO", kdO, a, a.n_head, C));
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(kStats)
                               .set_data_type(fe::DataType_t::FLOAT)
                               .set_dim({a.B, a.n_head, a.T, 1})
                               .set_stride({int64_t(a.n_head) * a.T, a.T, 1, 1}));
    // Deterministic: the trainer's runs repeat bit for bit.
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(true)
                       .set_deterministic_algorithm(true)
                       .set_attn_scale(1.0f / std::sqrt(float(a.head_dim)));
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, options);
    dQ->set_output(true).set_uid(kdQ).set_dim({a.B, a.n_head, a.T, a.head_dim}).set_stride(
        {int64_t(a.T) * W, a.head_dim, W, 1});
    dK->set_output(true).set_uid(kdK).set_dim({a.B, a.n_kv_head, a.T, a.head_dim}).set_stride(
        {int64_t(a.T) * W, a.head_dim, W, 1});
    dV->set_output(true).set_uid(kdV).set_dim({a.B, a.n_kv_head, a.T, a.head_dim}).set_stride(
        {int64_t(a.T) * W, a.head_dim, W, 1});
    return g;
  }

  // The cached graph for `a`, built on first use; null when cuDNN declines the shape (said once).
  Graph lookup(bool is_forward, const AttentionShape& a) {
    std::map<Key, Graph>& cache = is_forward ? forward : backward;
    std::set<Key>& declined = is_forward ? no_forward : no_backward;
    const Key k = key_of(a);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    if (declined.count(k)) return nullptr;
    Graph g;
    std::string why;
    try {
      g = is_forward ? forward_graph(a) : backward_graph(a);
      why = build(*g, handle);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) {
      // The deterministic backward keeps (B, NH, T, T) bf16 partials on Hopper: decline shapes
      // whose workspace would crowd out the model rather than fail to allocate mid-run.
      int64_t bytes = 0;
      if (g->get_workspace_size(bytes).is_good() && bytes > kMaxWorkspaceBytes)
        why = "its workspace would be " + std::to_string(bytes >> 20) + " MiB, above feast's " +
              std::to_string(kMaxWorkspaceBytes >> 20) + " MiB limit";
    }
    if (!why.empty()) {
      // T = 1: cuDNN's backward never takes a single query row; our kernels do.
      if (strict && !(a.T == 1 && !is_forward))
        throw Error(std::string("FEAST_CUDA_ATTENTION=cudnn: cuDNN declined the attention ") +
                    (is_forward ? "forward" : "backward") + " at " + describe(a) + ": " + why);
      declined.insert(k);
      log::info(std::string("attention ") + (is_forward ? "forward" : "backward") + " at " + describe(a) +
                ": cuDNN declined (" + why + "); using feast's own kernels");
      return nullptr;
    }
    cache.emplace(k, g);
    return g;
  }

  void execute(const CudaContext& ctx, fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, const char* what,
               const AttentionShape& a) {
    FEAST_CUDNN_CHECK(cudnnSetStream(handle, ctx.stream));
    int64_t bytes = 0;
    check(g.get_workspace_size(bytes), what, a);
    void* workspace = bytes > 0 ? ctx.scratch->get(size_t(bytes)) : nullptr;
    check(g.execute(handle, pack, workspace), what, a);
  }
};

CudnnAttention::CudnnAttention(bool strict) : impl_(std::make_unique<Impl>()) {
  impl_->strict = strict;
  // cuDNN's fused attention needs cuDNN 9; the library found at run time may be older than the
  // headers this was built with.
  if (cudnnGetVersion() < 90000)
    throw Error("cuDNN " + std::to_string(cudnnGetVersion()) + " is older than 9.0, which fused attention needs");
  FEAST_CUDNN_CHECK(cudnnCreate(&impl_->handle));
}

CudnnAttention::~CudnnAttention() {
  if (!impl_ || !impl_->handle) return;
  impl_->forward.clear();  // the plans go before the handle they were built on
  impl_->backward.clear();
  cudnnDestroy(impl_->handle);
}

namespace {
// Document masks (a.positions) take our own kernels: the graphs here are plain causal.
bool eligible(DType dt, const AttentionShape& a) {
  return !a.positions && dt == DType::kBFloat16 && a.head_dim % 8 == 0 && a.head_dim <= 256 && a.B > 0 && a.T > 0;
}
}  // namespace

bool CudnnAttention::forward_applies(DType dt, const AttentionShape& a) {
  return eligible(dt, a) && impl_->lookup(true, a) != nullptr;
}

bool CudnnAttention::backward_applies(DType dt, const AttentionShape& a) {
  return eligible(dt, a) && impl_->lookup(false, a) != nullptr;
}

void CudnnAttention::forward(const CudaContext& ctx, void* out, float* lse, const void* qkv, const AttentionShape& a) {
  const Graph g = impl_->lookup(true, a);
  FEAST_CHECK(g, "cuDNN attention forward called for a shape it declined: " << describe(a));
  auto* base = static_cast<char*>(const_cast<void*>(qkv));
  const size_t bf16 = 2;
  std::unordered_map<int64_t, void*> pack = {{kQ, base},
                                             {kK, base + size_t(a.n_head) * a.head_dim * bf16},
                                             {kV, base + size_t(a.n_head + a.n_kv_head) * a.head_dim * bf16},
                                             {kO, out},
                                             {kStats, lse}};
  impl_->execute(ctx, *g, pack, "forward", a);
}

void CudnnAttention::backward(const CudaContext& ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, const AttentionShape& a) {
  const Graph g = impl_->lookup(false, a);
  FEAST_CHECK(g, "cuDNN attention backward called for a shape it declined: " << describe(a));
  auto* base = static_cast<char*>(const_cast<void*>(qkv));
  auto* dbase = static_cast<char*>(dqkv);
  const size_t bf16 = 2, k_at = size_t(a.n_head) * a.head_dim * bf16, v_at = size_t(a.n_head + a.n_kv_head) * a.head_dim * bf16;
  std::unordered_map<int64_t, void*> pack = {{kQ, base},
                                             {kK, base + k_at},
                                             {kV, base + v_at},
                                             {kO, const_cast<void*>(out)},
                                             {kdO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kdQ, dbase},
                                             {kdK, dbase + k_at},
                                             {kdV, dbase + v_at}};
  impl_->execute(ctx, *g, pack, "backward", a);
}

}  // namespace feast::cuda
