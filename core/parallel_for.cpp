#include "core/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace feast {

void parallel_for(size_t n, int threads, const std::function<void(size_t)>& work, const std::function<void()>& tick) {
  const size_t wanted = threads > 0 ? size_t(threads) : std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min(n, wanted);
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex m;
  std::condition_variable done;
  size_t running = workers;
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        work(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
    const std::lock_guard<std::mutex> lock(m);
    --running;
    done.notify_one();
  };
  std::vector<std::thread> pool;
  for (size_t t = 0; t < workers; ++t) pool.emplace_back(run);
  {
    std::unique_lock<std::mutex> lock(m);
    while (!done.wait_for(lock, std::chrono::milliseconds(200), [&] { return running == 0; })) {
      if (!tick) continue;
      lock.unlock();
      tick();
      lock.lock();
    }
  }
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace feast
