#include "fs/worker_pool.h"

#include <exception>
#include <string>

#include "store/log.h"

namespace densefs::fs {

worker_pool::worker_pool(unsigned threads) {
  if (threads == 0) threads = 1;
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

worker_pool::~worker_pool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void worker_pool::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void worker_pool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      // Jobs report their own errors to the file they belong to; this is a
      // last line of defence so one bad job cannot take the daemon down.
      log_error(std::string("worker job failed: ") + e.what());
    }
  }
}

}  // namespace densefs::fs
