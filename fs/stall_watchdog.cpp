#include "fs/stall_watchdog.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <string>

#include "store/log.h"

namespace densefs::fs {

stall_watchdog::~stall_watchdog() {
  stop();
}

void stall_watchdog::start(const std::filesystem::path& mountpoint,
                           std::chrono::milliseconds period, std::chrono::milliseconds bound) {
  if (period.count() <= 0 || watcher_.joinable()) return;
  prober_ = std::thread(probe_loop, state_, mountpoint);
  watcher_ = std::thread([this, period, bound] { watch_loop(period, bound); });
}

void stall_watchdog::stop() {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopping) return;
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (!prober_.joinable()) return;
  bool in_flight;
  {
    std::lock_guard lock(state_->mutex);
    in_flight = state_->sent != std::chrono::steady_clock::time_point{};
  }
  if (in_flight) {
    prober_.detach();  // it holds the state; it ends when its statfs returns
  } else {
    prober_.join();
  }
}

void stall_watchdog::probe_loop(std::shared_ptr<state> s, std::filesystem::path mountpoint) {
  s->thread.store(::gettid(), std::memory_order_relaxed);
  std::unique_lock lock(s->mutex);
  for (;;) {
    s->wake.wait(lock, [&] { return s->stopping || s->asked; });
    if (s->stopping) return;
    s->asked = false;
    const unsigned cpu = s->cpu;
    s->sent = std::chrono::steady_clock::now();
    lock.unlock();
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ::sched_setaffinity(0, sizeof set, &set);  // refused (cpuset): where it last ran
    struct statvfs sv {};
    ::statvfs(mountpoint.c_str(), &sv);  // the answer does not matter, only that it comes
    lock.lock();
    s->sent = {};
    // Not once stopping: a probe left to finish may return while the
    // process is exiting, when logging is no longer safe.
    if (s->stopping) return;
    if (s->stalled.exchange(false, std::memory_order_relaxed))
      log_info("the mount answers again (a statfs sent from CPU " + std::to_string(cpu) +
               " was answered)");
  }
}

void stall_watchdog::watch_loop(std::chrono::milliseconds period, std::chrono::milliseconds bound) {
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  unsigned next_cpu = 0;
  std::unique_lock lock(state_->mutex);
  while (!state_->wake.wait_for(lock, period, [&] { return state_->stopping; })) {
    const auto now = std::chrono::steady_clock::now();
    if (state_->sent == std::chrono::steady_clock::time_point{}) {
      state_->cpu = next_cpu++ % cpus;
      state_->asked = true;
      state_->wake.notify_all();
      continue;
    }
    const auto waited = now - state_->sent;
    if (waited >= bound && !state_->stalled.load(std::memory_order_relaxed)) {
      state_->stalled.store(true, std::memory_order_relaxed);
      state_->stalls.fetch_add(1, std::memory_order_relaxed);
      log_error("the mount has not answered a statfs sent from CPU " + std::to_string(state_->cpu) +
                " for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) +
                " s: requests on that path wait (a stalled FUSE transport, or a daemon too busy to "
                "answer); programs using the mount may hang. `densefs stats MNT --json` shows "
                "transport_stalled; unmount with `umount -l MNT` and mount again with "
                "-o transport=device if it stays");
    }
  }
}

}  // namespace densefs::fs
