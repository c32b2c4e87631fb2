// Stop signals arriving while the CPU computes only set the flag. The test sends SIGUSR1 and
// SIGTERM thousands of times while OpenMP threads run float32 products (oneDNN's JIT sgemm where
// the build has it, whose kernels point rsp into the heap while they run: a signal handler's
// frame there corrupted the heap and glibc aborted; train/stop_signals.h). With the signals
// routed to their own thread the products finish, repeat bit for bit, and the flag is set.
#include "train/stop_signals.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cpu/blas.h"

namespace feast {
namespace {

// As main does, before any other thread of this test binary starts.
const bool kRouted = (route_stop_signals(), true);

TEST(StopSignals, SignalsDuringProductsOnlySetTheFlag) {
  ASSERT_TRUE(kRouted);
  const StopSignals signals;
  const int M = 256, N = 3072, K = 768;
  std::vector<float> a(size_t(M) * K), b(size_t(N) * K), first(size_t(M) * N), c(size_t(M) * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 17) * 0.01f - 0.08f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 13) * 0.02f - 0.12f;
  cpu::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, first.data(), N);

  std::atomic<bool> done{false};
  std::atomic<int> sent{0};
  std::thread sender([&] {
    while (!done.load()) {
      kill(getpid(), sent.load() % 2 ? SIGUSR1 : SIGTERM);
      sent.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  int products = 0;
  bool same = true;
  while (std::chrono::steady_clock::now() < until) {
    cpu::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    same = same && std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0;
    ++products;
  }
  done.store(true);
  sender.join();
  EXPECT_TRUE(same) << "a product changed while signals arrived";
  EXPECT_TRUE(signals.terminated());
  EXPECT_FALSE(signals.interrupted());
  EXPECT_GT(sent.load(), 100);
  EXPECT_GT(products, 3);
  std::printf("%d products on %d threads while %d signals arrived\n", products, omp_get_max_threads(), sent.load());
}

}  // namespace
}  // namespace feast
