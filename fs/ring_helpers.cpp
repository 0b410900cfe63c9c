#include "fs/ring_helpers.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "store/log.h"

namespace densefs::fs {

namespace {
// The pool of the ring thread running this, and which ring_helpers made it
// (by number, not address: a daemon has one, a test may make several in
// turn at one address).
struct thread_pool_slot {
  std::uint64_t owner = 0;
  worker_pool* pool = nullptr;
};
thread_local thread_pool_slot t_pool;
std::atomic<std::uint64_t> g_next_id{1};
}  // namespace

ring_helpers::ring_helpers(unsigned threads_per_ring)
    : id_(g_next_id.fetch_add(1)), threads_per_ring_(threads_per_ring) {}

worker_pool* ring_helpers::pool_of_this_thread() {
  if (t_pool.owner == id_) return t_pool.pool;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const bool bound = pthread_getaffinity_np(pthread_self(), sizeof cpus, &cpus) == 0;
  auto pool = std::make_unique<worker_pool>(threads_per_ring_, bound ? &cpus : nullptr);
  std::lock_guard lock(mutex_);
  pools_.push_back(std::move(pool));
  t_pool = {id_, pools_.back().get()};
  return t_pool.pool;
}

void ring_helpers::submit(std::function<void()> job) {
  worker_pool* pool = nullptr;
  try {
    pool = pool_of_this_thread();
  } catch (const std::exception& e) {
    // A task limit, say (a service's TasksMax): slower to answer during a
    // partition, never lost. Tried again at the next hand-off.
    log_error(std::string("starting a ring's helper threads: ") + e.what() +
              "; the change is handled on the ring's thread");
    job();
    return;
  }
  pool->submit(std::move(job));
}

}  // namespace densefs::fs
