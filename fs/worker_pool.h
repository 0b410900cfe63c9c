// The thread pool that runs CPU work (hashing, compression, commits of
// encoded chunks) off the FUSE threads. Started after daemonizing: threads
// do not survive fork().
#pragma once

#include <sched.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace densefs::fs {

class worker_pool {
 public:
  // `cpus`: the threads run on those CPUs alone (fs/ring_helpers.h).
  explicit worker_pool(unsigned threads, const cpu_set_t* cpus = nullptr);
  ~worker_pool();  // runs what is queued, then joins
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;

  // `owner` tags the job for run_one_queued (a file's slot encodings carry
  // their file); untagged jobs are only ever run by the pool.
  void submit(std::function<void()> job, const void* owner = nullptr);
  // Someone waits for `owner`'s work: runs the last-queued job of `owner`
  // that no worker has started, on the calling thread, rather than waiting
  // for a worker to wake and reach it. One job, so that a file with many
  // queued slots still has them encoded in parallel by the workers. Returns
  // whether there was one. The caller must hold no lock the job takes.
  bool run_one_queued(const void* owner);
  unsigned size() const { return static_cast<unsigned>(threads_.size()); }

 private:
  struct job_entry {
    std::function<void()> run;
    const void* owner = nullptr;
  };
  void run();
  void stop_and_join();
  static void run_guarded(const std::function<void()>& job);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<job_entry> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace densefs::fs
