#include "fs/lock_waiters.h"

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fs/fs_error.h"
#include "store/error.h"
#include "store/log.h"

namespace densefs::fs {

std::chrono::milliseconds lock_waiters::poll_interval() {
  if (const char* v = std::getenv("DENSEFS_LOCK_POLL_MS")) {
    char* end = nullptr;
    const long ms = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && ms >= 10 && ms <= 60000) return std::chrono::milliseconds(ms);
  }
  return std::chrono::milliseconds(100);
}

lock_waiters::lock_waiters() : thread_([this] { run(); }) {}

lock_waiters::~lock_waiters() {
  stop();
}

void lock_waiters::on_interrupt(fuse_req_t, void* data) {
  // Called by libfuse with the request's lock held: only mark and wake;
  // the reply comes from the waiters' thread.
  auto* w = static_cast<waiter*>(data);
  w->interrupted.store(true);
  w->home->retry_now();
}

void lock_waiters::wait(fuse_req_t req, std::uint64_t owner, std::uint64_t blocked_by,
                        attempt try_again) {
  auto w = std::make_shared<waiter>();
  w->home = this;
  w->req = req;
  w->lock_owner = owner;
  w->blocked_by.store(blocked_by);
  w->try_again = std::move(try_again);
  // Before the thread can see it (and answer it, which frees `req`). Not
  // under mutex_: libfuse calls on_interrupt inside this call when the
  // INTERRUPT came already, and on_interrupt takes mutex_.
  fuse_req_interrupt_func(req, on_interrupt, w.get());
  bool added = false;
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      waiters_.push_back(w);
      added = true;
    }
  }
  if (!added) {
    fuse_req_interrupt_func(req, nullptr, nullptr);
    fuse_reply_err(req, EINTR);
    return;
  }
  retry_now();  // a lock may have gone since the first try
}

bool lock_waiters::would_deadlock(std::uint64_t owner, std::uint64_t blocked_by) const {
  std::lock_guard lock(mutex_);
  std::uint64_t holder = blocked_by;
  for (int step = 0; step < 10 && holder != 0; ++step) {
    if (holder == owner) return true;
    std::uint64_t next = 0;
    for (const std::shared_ptr<waiter>& w : waiters_)
      if (w->lock_owner == holder && w->blocked_by.load() != 0) next = w->blocked_by.load();
    holder = next;
  }
  return false;
}

void lock_waiters::retry_now() {
  {
    std::lock_guard lock(mutex_);
    wake_now_ = true;
  }
  wake_.notify_all();
}

std::size_t lock_waiters::waiting() const {
  std::lock_guard lock(mutex_);
  return waiters_.size();
}

bool lock_waiters::caller_signalled(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx == nullptr || ctx->pid <= 0) return false;
  std::ifstream status("/proc/" + std::to_string(ctx->pid) + "/status");
  if (!status) return true;  // the thread is gone
  std::uint64_t pending = 0, blocked = 0;
  std::string line;
  const auto mask = [](const std::string& l) {
    return std::strtoull(l.c_str() + l.find(':') + 1, nullptr, 16);
  };
  while (std::getline(status, line)) {
    if (line.starts_with("SigPnd:") || line.starts_with("ShdPnd:")) pending |= mask(line);
    if (line.starts_with("SigBlk:")) blocked = mask(line);
  }
  // SIGKILL and SIGSTOP cannot be blocked.
  blocked &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
  return (pending & ~blocked) != 0;
}

void lock_waiters::finish(const std::shared_ptr<waiter>& w, int error) {
  {
    std::lock_guard lock(mutex_);
    waiters_.remove(w);
  }
  // No interrupt callback may run with `w` once this returns (libfuse runs
  // them under the request's lock, which this takes).
  fuse_req_interrupt_func(w->req, nullptr, nullptr);
  fuse_reply_err(w->req, error);
}

void lock_waiters::run() {
  const std::chrono::milliseconds poll = poll_interval();
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, poll, [&] { return wake_now_ || stopping_; });
    wake_now_ = false;
    if (stopping_) break;
    const std::vector<std::shared_ptr<waiter>> now(waiters_.begin(), waiters_.end());
    lock.unlock();
    for (const std::shared_ptr<waiter>& w : now) {
      if (w->interrupted.load() || caller_signalled(w->req)) {
        finish(w, EINTR);
        continue;
      }
      try {
        std::uint64_t blocked_by = 0;
        if (w->try_again(blocked_by)) {
          finish(w, 0);
        } else {
          w->blocked_by.store(blocked_by);
        }
      } catch (const fs_error& e) {
        finish(w, e.error_number());
      } catch (const store::store_error& e) {
        log_error(std::string("a waiting lock request: ") + e.what());
        finish(w, e.error_number());
      } catch (const std::exception& e) {
        log_error(std::string("a waiting lock request: ") + e.what());
        finish(w, EIO);
      }
    }
    lock.lock();
  }
  const std::vector<std::shared_ptr<waiter>> left(waiters_.begin(), waiters_.end());
  lock.unlock();
  for (const std::shared_ptr<waiter>& w : left) finish(w, EINTR);
}

void lock_waiters::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace densefs::fs
