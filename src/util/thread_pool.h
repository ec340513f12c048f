// A fixed pool of workers for data-parallel loops. One pool per engine context (no globals).
// parallel_for splits [0, n) into contiguous chunks, one per thread, so the split depends only
// on n and the thread count: a row's result never depends on which other rows share the batch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace salvo {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, begin, end) on every thread over its share of [0, n); the caller
  // runs share 0. Returns when all shares are done. Not reentrant.
  void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

  // Calls fn(thread_index) once on every thread.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace salvo
