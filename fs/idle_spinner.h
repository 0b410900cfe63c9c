// Keeps cores awake for a moment after each FUSE request, so that the next
// request of a burst is not delayed by a core waking from idle.
//
// A single process reading or walking a tree through FUSE waits for one
// round trip per open, stat or read; each one wakes a daemon thread, then
// the process again. On an otherwise idle machine every wake-up lands on a
// halted core, and on a VM that costs tens of microseconds (measured on the
// 2-core development VM, docs/read-path.md "Idle cores"): a warm read of
// 5,000 small files took 0.34 s by one process, 0.12 s with two busy loops
// at nice 19 beside it, ext4 0.07 s. The spinner threads are those busy
// loops, run only while requests come (for `window` after the last one) and
// at SCHED_IDLE, so they take no time any other thread wants; between
// bursts they sleep.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace densefs::fs {

class idle_spinner {
 public:
  // No threads until start(): note_request does nothing.
  idle_spinner() = default;
  ~idle_spinner();
  idle_spinner(const idle_spinner&) = delete;
  idle_spinner& operator=(const idle_spinner&) = delete;

  // Starts `threads` spinners (a daemon's, after it forked), once.
  void start(unsigned threads, std::chrono::microseconds window);

  // A request arrived: spin on until `window` after it. Wakes the sleeping
  // spinners, a futex wake for the first request of a burst only.
  void note_request() noexcept {
    if (!started_.load(std::memory_order_relaxed)) return;
    last_request_ns_.store(now_ns());
    if (sleeping_.load()) {
      sleeping_.store(false);
      sleeping_.notify_all();
    }
  }

  // Time the spinners spun, for the stats.
  std::uint64_t spun_ns() const { return spun_ns_.load(std::memory_order_relaxed); }

 private:
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void run();

  std::int64_t window_ns_ = 0;
  std::atomic<bool> started_{false};
  std::atomic<std::int64_t> last_request_ns_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> spun_ns_{0};
  std::vector<std::thread> threads_;
};

}  // namespace densefs::fs
