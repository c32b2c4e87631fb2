// blas_compare: the float32 matrix products of a GPT-2 124M training step (every linear layer's
// forward, input gradient and weight gradient, as backend/cpu/matmul.cpp calls them; attention's
// small per-head products left out) through OpenBLAS, BLIS and oneDNN, in one sitting, each
// library opened at run time (nothing links them), with a check that each repeats its results bit
// for bit. docs/benchmarks.md ("The CPU's BLAS") holds its table; Debian 12's packages:
//   apt-get install libopenblas-openmp-dev libblis-openmp-dev libdnnl-dev
//   g++ -O2 -std=c++20 -fopenmp bench/blas_compare.cpp -ldl -o /tmp/blas_compare
//   OPENBLAS_CORETYPE=COOPERLAKE /tmp/blas_compare [rounds]
// (OPENBLAS_CORETYPE: the kernels feast chooses by the CPU's features, backend/cpu/blas_library.h.)
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using DnnlSgemm = int (*)(char, char, long, long, long, float, const float*, long, const float*, long, float, float*,
                          long);

struct Library {
  const char* name;
  const char* path;
  CblasSgemm cblas = nullptr;
  DnnlSgemm dnnl = nullptr;
  // C (M, N) = op(A) op(B) + beta C, row-major.
  void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
            float* C, int ldc) const {
    if (cblas)
      cblas(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    else
      dnnl(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  }
};

struct Linear {
  int in, out, count;  // per model: GPT-2 124M has 12 of each block linear, 1 head
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  std::vector<Library> libs = {
      {"OpenBLAS 0.3.21", "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"},
      {"BLIS 0.9.0", "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4"},
      {"oneDNN 2.6.3", "/usr/lib/x86_64-linux-gnu/libdnnl.so.2"},
  };
  for (Library& l : libs) {
    void* h = dlopen(l.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "%s: %s\n", l.name, dlerror());
      return 1;
    }
    l.cblas = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
    if (!l.cblas) l.dnnl = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
    if (!l.cblas && !l.dnnl) {
      std::fprintf(stderr, "%s: no sgemm\n", l.name);
      return 1;
    }
  }
  const int C = 768, V = 50304;
  const std::vector<Linear> model = {{C, 3 * C, 12}, {C, C, 12}, {C, 4 * C, 12}, {4 * C, C, 12}, {C, V, 1}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::printf("%d OpenMP threads; ms per training step's linear products (forward, input and weight gradients), "
              "median of %d interleaved rounds; 'repeats' = the same bits twice\n",
              omp_get_max_threads(), rounds);
  std::printf("%-16s %8s %10s %10s %10s %10s %8s\n", "library", "tokens", "forward", "input grad", "weight grad",
              "total", "repeats");
  for (const int M : {4 * 64, 8 * 256}) {
    // Interleaved: each round times every library once, so a slow minute of a shared machine
    // falls on all of them alike.
    std::vector<std::vector<double>> fwd(libs.size()), dgrad(libs.size()), wgrad(libs.size()), total(libs.size());
    std::vector<bool> same(libs.size(), true);
    for (int r = 0; r < rounds; ++r) {
      for (size_t li = 0; li < libs.size(); ++li) {
        const Library& l = libs[li];
        double f = 0, d = 0, g = 0;
        for (const Linear& lin : model) {
          std::vector<float> x(size_t(M) * lin.in), w(size_t(lin.out) * lin.in), y(size_t(M) * lin.out),
              dy(size_t(M) * lin.out), dx(size_t(M) * lin.in), dw(size_t(lin.out) * lin.in, 0.0f);
          for (float& v : x) v = u(rng);
          for (float& v : w) v = u(rng) * 0.02f;
          for (float& v : dy) v = u(rng);
          for (int i = 0; i < lin.count; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            l.gemm(false, true, M, lin.out, lin.in, x.data(), lin.in, w.data(), lin.in, 0.0f, y.data(), lin.out);
            auto t1 = std::chrono::steady_clock::now();
            l.gemm(false, false, M, lin.in, lin.out, dy.data(), lin.out, w.data(), lin.in, 0.0f, dx.data(), lin.in);
            auto t2 = std::chrono::steady_clock::now();
            l.gemm(true, false, lin.out, lin.in, M, dy.data(), lin.out, x.data(), lin.in, 1.0f, dw.data(), lin.in);
            auto t3 = std::chrono::steady_clock::now();
            f += std::chrono::duration<double>(t1 - t0).count();
            d += std::chrono::duration<double>(t2 - t1).count();
            g += std::chrono::duration<double>(t3 - t2).count();
          }
          if (r == 0 && lin.count == 12 && lin.out == 4 * C) {  // repeatability on one shape
            std::vector<float> y2(y.size()), dx2(dx.size());
            l.gemm(false, true, M, lin.out, lin.in, x.data(), lin.in, w.data(), lin.in, 0.0f, y2.data(), lin.out);
            l.gemm(false, false, M, lin.in, lin.out, dy.data(), lin.out, w.data(), lin.in, 0.0f, dx2.data(), lin.in);
            same[li] = same[li] && std::memcmp(y.data(), y2.data(), y.size() * 4) == 0 &&
                       std::memcmp(dx.data(), dx2.data(), dx.size() * 4) == 0;
          }
        }
        fwd[li].push_back(f);
        dgrad[li].push_back(d);
        wgrad[li].push_back(g);
        total[li].push_back(f + d + g);
      }
    }
    const auto median_ms = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2] * 1e3;
    };
    for (size_t li = 0; li < libs.size(); ++li)
      std::printf("%-16s %8d %10.1f %10.1f %10.1f %10.1f %8s\n", libs[li].name, M, median_ms(fwd[li]),
                  median_ms(dgrad[li]), median_ms(wgrad[li]), median_ms(total[li]), same[li] ? "yes" : "NO");
    std::fflush(stdout);
  }
  return 0;
}
