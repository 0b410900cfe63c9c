#include "fs/worker_pool.h"

#include <pthread.h>

#include <cstring>
#include <exception>
#include <iterator>
#include <string>

#include "store/log.h"

namespace densefs::fs {

worker_pool::worker_pool(unsigned threads, const cpu_set_t* cpus) {
  if (threads == 0) threads = 1;
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    try {
      threads_.emplace_back([this] { run(); });
    } catch (...) {
      stop_and_join();  // a joinable std::thread must not be destroyed
      throw;
    }
    if (cpus == nullptr) continue;
    // Unbound is slower, not wrong.
    if (const int error =
            pthread_setaffinity_np(threads_.back().native_handle(), sizeof *cpus, cpus);
        error != 0 && i == 0)
      log_warning(std::string("binding helper threads to their ring's CPUs: ") +
                  std::strerror(error));
  }
}

worker_pool::~worker_pool() {
  stop_and_join();
}

void worker_pool::stop_and_join() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void worker_pool::submit(std::function<void()> job, const void* owner) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(job), owner});
  }
  cv_.notify_one();
}

bool worker_pool::run_one_queued(const void* owner) {
  if (owner == nullptr) return false;
  std::function<void()> job;
  {
    std::lock_guard lock(mutex_);
    for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
      if (it->owner != owner) continue;
      job = std::move(it->run);
      jobs_.erase(std::next(it).base());
      break;
    }
  }
  if (!job) return false;
  run_guarded(job);
  return true;
}

void worker_pool::run_guarded(const std::function<void()>& job) {
  try {
    job();
  } catch (const std::exception& e) {
    // Jobs report their own errors to the file they belong to; this is a
    // last line of defence so one bad job cannot take the daemon down.
    log_error(std::string("worker job failed: ") + e.what());
  }
}

void worker_pool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front().run);
      jobs_.pop_front();
    }
    run_guarded(job);
  }
}

}  // namespace densefs::fs
