// The background re-encoder: threads at idle CPU priority that walk the
// store's persisted queue of chunks stored with a fast codec (new JPEGs,
// stored with zstd at write time) and hand each one to a callback that
// re-encodes it (Lepton) and swaps its payload. The queue lives in the
// store, so work survives unmount and crashes; this class only schedules.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "store/store.h"

namespace densefs::fs {

// Lowers the calling thread to idle CPU priority (SCHED_IDLE, else nice
// 19): for optional background work (re-encoding, garbage collection).
void lower_own_priority();
// Nice 19 and the lowest best-effort disk priority (ioprio_set class BE,
// level 7; schedulers without priorities, mq-deadline and none, ignore
// it) for the calling thread: for background work that takes the store's
// locks (a scrub holds the pack index lock while it reads), where
// SCHED_IDLE or the idle I/O class could leave it holding a lock behind
// busy threads while a writer waits for that lock.
void nice_own_thread();

class recompressor {
 public:
  using job = std::function<void(const store::recompress_item&)>;

  // Starts `threads` threads (at least 1). `work` must handle its own
  // errors; an item it leaves queued is retried on the next pass.
  // (Replaced payloads are collected by fs/garbage_collector.h.)
  recompressor(const store::store& store, unsigned threads, job work);
  ~recompressor();  // finishes the items in progress, then joins
  recompressor(const recompressor&) = delete;
  recompressor& operator=(const recompressor&) = delete;

  // New items were queued: wake idle threads. Never blocks: it is called
  // on the write path, and a re-encoder thread (idle priority) that holds
  // this class's mutex may not run again while the machine is busy.
  void notify();
  // Data was committed: re-encoding waits until writes have been quiet for
  // k_quiet_period (reads do not hold it back). Lock-free (called on every
  // commit).
  void note_activity();
  static constexpr std::chrono::milliseconds k_quiet_period{500};

 private:
  void run();
  // The next queued item nobody is working on, or nothing when a full pass
  // over the queue found none.
  std::optional<store::recompress_item> next_locked();

  const store::store& store_;
  job work_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<bool> notified_{false};
  // steady_clock nanoseconds of the last note_activity().
  std::atomic<std::int64_t> last_activity_ns_{0};
  // Waits (mutex_ held by `lock`) until no activity for k_quiet_period.
  void wait_for_quiet(std::unique_lock<std::mutex>& lock);
  std::vector<store::recompress_item> batch_;  // read ahead from the queue
  std::optional<store::chunk_hash> cursor_;    // last hash read from the queue
  std::set<store::chunk_hash> in_progress_;
  std::vector<std::thread> threads_;
};

}  // namespace densefs::fs
