// Notices a mount that stopped answering (issue 38: the FUSE-over-io_uring
// ring that stalled in libfuse 3.18.3 hung every program touching the
// mount, silently). Every `period` a probe thread asks the mount for its
// statfs, pinned in turn to each CPU: FUSE over io_uring queues a request
// on the ring of the CPU that sends it, so each ring is asked in turn
// (with /dev/fuse any idle worker answers). A probe not answered within
// `bound` means that requests on that path wait forever, or that the
// daemon is too busy to answer one statfs in that time: it is logged once,
// counted, and shown in the stats (`densefs stats MNT --json`,
// "transport_stalls" and "transport_stalled"). Its own probes are not
// counted among the mount's requests (fs/mount.cpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

namespace densefs::fs {

class stall_watchdog {
 public:
  stall_watchdog() = default;
  ~stall_watchdog();  // stop()
  stall_watchdog(const stall_watchdog&) = delete;
  stall_watchdog& operator=(const stall_watchdog&) = delete;

  // After the mount is live. Does nothing when period is zero.
  void start(const std::filesystem::path& mountpoint, std::chrono::milliseconds period,
             std::chrono::milliseconds bound);
  // After the session ended (a probe blocked on a stalled ring returns when
  // the connection goes; one still blocked is left to finish on its own).
  void stop();

  // Probes that went unanswered past the bound, since the mount.
  std::uint64_t stalls() const { return state_->stalls.load(std::memory_order_relaxed); }
  // Whether a probe is unanswered past the bound now.
  bool stalled() const { return state_->stalled.load(std::memory_order_relaxed); }
  // Whether a request came from the probe (FUSE names the sending thread).
  bool is_probe(pid_t thread) const {
    return thread != 0 && thread == state_->thread.load(std::memory_order_relaxed);
  }

 private:
  // Shared with the probe thread, which may outlive the watchdog.
  struct state {
    std::mutex mutex;
    std::condition_variable wake;
    bool stopping = false;
    bool asked = false;  // a probe is wanted
    unsigned cpu = 0;    // on this CPU
    // When the probe in flight was sent; zero when none is.
    std::chrono::steady_clock::time_point sent{};
    std::atomic<pid_t> thread{0};  // the probe thread's id
    std::atomic<std::uint64_t> stalls{0};
    std::atomic<bool> stalled{false};
  };
  static void probe_loop(std::shared_ptr<state> s, std::filesystem::path mountpoint);
  void watch_loop(std::chrono::milliseconds period, std::chrono::milliseconds bound);

  std::shared_ptr<state> state_ = std::make_shared<state>();
  std::thread watcher_;
  std::thread prober_;
};

}  // namespace densefs::fs
