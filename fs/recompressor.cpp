#include "fs/recompressor.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "store/log.h"

namespace densefs::fs {
namespace {

// Queue entries read per store scan.
constexpr std::size_t k_batch = 64;
// A pass that found nothing to do sleeps until notified or this long (items
// left queued after an error are retried then).
constexpr auto k_idle_poll = std::chrono::seconds(60);

}  // namespace

// Re-encoding is optional work: it must only use CPU nobody else wants.
// SCHED_IDLE runs the thread only when a core would otherwise idle; nice 19
// is the fallback where SCHED_IDLE is refused.
void lower_own_priority() {
  sched_param param{};
  if (::sched_setscheduler(0, SCHED_IDLE, &param) != 0)
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
}

void nice_own_thread() {
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
  // <linux/ioprio.h>: class in the top bits, then the level; who 0 = the
  // calling thread.
  constexpr int k_ioprio_who_process = 1;
  constexpr int k_ioprio_class_best_effort = 2;
  constexpr int k_ioprio_class_shift = 13;
  constexpr int k_lowest_level = 7;
  ::syscall(SYS_ioprio_set, k_ioprio_who_process, 0,
            k_ioprio_class_best_effort << k_ioprio_class_shift | k_lowest_level);
}

recompressor::recompressor(const store::store& store, unsigned threads, job work)
    : store_(store), work_(std::move(work)) {
  if (threads == 0) threads = 1;
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

recompressor::~recompressor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void recompressor::notify() {
  notified_ = true;
  // Measured: with thousands of chunks queued by -o ingest=fast, writers
  // that waited here for a preempted idle-priority thread made an rsync 3x
  // slower on a loaded machine. So the mutex is only tried: when a
  // re-encoder holds it, it re-reads the queue (and notified_) before it
  // sleeps, except in the instant between its check and its wait, where
  // this wake-up is lost and the thread's 60 s poll finds the item.
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (lock.owns_lock()) {
    lock.unlock();
    cv_.notify_one();
  }
}

namespace {
std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void recompressor::note_activity() {
  last_activity_ns_.store(steady_now_ns(), std::memory_order_relaxed);
}

void recompressor::wait_for_quiet(std::unique_lock<std::mutex>& lock) {
  // SCHED_IDLE alone is not "idle": on 2 cores a single-threaded rsync
  // leaves a core free between requests, and a re-encoder on it competes
  // for the store's locks, its memtable and the chunk cache.
  const std::int64_t quiet_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(k_quiet_period).count();
  while (!stopping_) {
    const std::int64_t since = steady_now_ns() - last_activity_ns_.load(std::memory_order_relaxed);
    if (since >= quiet_ns) return;
    cv_.wait_for(lock, std::chrono::nanoseconds(quiet_ns - since), [&] { return stopping_; });
  }
}

std::optional<store::recompress_item> recompressor::next_locked() {
  for (int refill = 0; refill < 2; ++refill) {
    while (!batch_.empty()) {
      store::recompress_item item = batch_.back();
      batch_.pop_back();
      if (!in_progress_.count(item.hash)) return item;
    }
    try {
      batch_ = store_.pending_recompress(k_batch, cursor_);
    } catch (const std::exception& e) {
      log_error(std::string("background re-encoding: cannot read the queue: ") + e.what());
      batch_.clear();
      return std::nullopt;
    }
    if (batch_.empty()) {
      cursor_.reset();  // end of the queue: the next pass starts over
      return std::nullopt;
    }
    cursor_ = batch_.back().hash;
    std::reverse(batch_.begin(), batch_.end());  // hand out in hash order
  }
  return std::nullopt;
}

void recompressor::run() {
  lower_own_priority();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wait_for_quiet(lock);
    if (stopping_) break;
    // Beside other writers of the volume, only the lease's holder works
    // (the heartbeat takes it when it is free, filesystem::start).
    std::optional<store::recompress_item> item;
    if (store_.membership().holds_lease(store::volume_membership::k_lease_re_encoder))
      item = next_locked();
    if (!item) {
      cv_.wait_for(lock, k_idle_poll, [&] { return stopping_ || notified_.load(); });
      notified_ = false;
      continue;
    }
    in_progress_.insert(item->hash);
    lock.unlock();
    try {
      work_(*item);
    } catch (const std::exception& e) {
      log_error("background re-encoding of chunk " + item->hash.hex() + " failed: " + e.what());
    }
    lock.lock();
    in_progress_.erase(item->hash);
  }
}

}  // namespace densefs::fs
