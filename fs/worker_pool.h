// The thread pool that runs CPU work (hashing, compression, commits of
// encoded chunks) off the FUSE threads. Started after daemonizing: threads
// do not survive fork().
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace densefs::fs {

class worker_pool {
 public:
  explicit worker_pool(unsigned threads);
  ~worker_pool();  // runs what is queued, then joins
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;

  void submit(std::function<void()> job);
  unsigned size() const { return static_cast<unsigned>(threads_.size()); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace densefs::fs
