// Lock requests that wait (F_SETLKW, flock without LOCK_NB) on a volume
// whose locks every client sees (store/membership/file_locks.h,
// docs/scale-out.md "Locks across clients").
//
// A waiting request must not hold a FUSE thread: the loop has 16, and a
// program that takes a lock and waits for a second one elsewhere would
// soon stop the mount. So the request's operation hands it over here and
// returns; one thread tries every waiter again when this client lets a
// lock go (retry_now) and every poll interval otherwise (another client's
// unlock, a holder whose session died), and sends each request's one
// reply: 0 once granted, EINTR once the caller got a signal, the error of
// a failed try.
//
// A signal reaches a waiting request two ways: the kernel's INTERRUPT
// (libfuse calls back, fuse_req_interrupt_func), and for requests that
// came over io_uring, which libfuse 3.18 never matches with an INTERRUPT,
// a pending signal of the calling thread read from /proc at each try. So
// kill -9 of a waiting process ends it at once instead of leaving it
// unkillable in the kernel until the lock comes.
//
// Threading: wait() and retry_now() from any thread; no lock is held
// across a try (a database round trip) or a reply.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>

namespace densefs::fs {

class lock_waiters {
 public:
  // One try of a request: true when granted, else sets `blocked_by` to
  // the owner of this client whose POSIX lock is in the way (0: another
  // client's, or a flock). Throws store_error or fs_error; the request is
  // then answered with its errno.
  using attempt = std::function<bool(std::uint64_t& blocked_by)>;

  // DENSEFS_LOCK_POLL_MS (10..60000; tests) or 100 ms.
  static std::chrono::milliseconds poll_interval();

  lock_waiters();
  ~lock_waiters();  // stop()
  lock_waiters(const lock_waiters&) = delete;
  lock_waiters& operator=(const lock_waiters&) = delete;

  // Takes `req` over (its first try failed) and answers it later. `owner`:
  // the POSIX lock owner that waits (0: a flock), blocked by `blocked_by`.
  void wait(fuse_req_t req, std::uint64_t owner, std::uint64_t blocked_by, attempt try_again);
  // Whether `owner` waiting for a POSIX lock that `blocked_by` holds would
  // close a cycle of this client's waiting owners (fs/locks.c's
  // posix_locks_deadlock: F_SETLKW then fails with EDEADLK). Followed ten
  // steps deep, as the kernel does.
  bool would_deadlock(std::uint64_t owner, std::uint64_t blocked_by) const;
  // A lock of this client was let go: try the waiters now.
  void retry_now();
  // Answers every waiter EINTR and joins the thread (at unmount: the
  // kernel restarts the callers' calls, which then fail on the dead mount).
  // Requests that came over io_uring are answered too: their ring entries
  // stay mapped while unanswered (third_party/libfuse, patch 0003).
  void stop();
  // Requests waiting now (densefs stats).
  std::size_t waiting() const;

 private:
  struct waiter {
    lock_waiters* home;
    fuse_req_t req;
    std::uint64_t lock_owner = 0;  // POSIX; 0: a flock
    std::atomic<std::uint64_t> blocked_by{0};
    attempt try_again;
    std::atomic<bool> interrupted{false};
  };
  static void on_interrupt(fuse_req_t req, void* data);
  // Whether the request's calling thread has a signal pending that it does
  // not block, or is gone.
  static bool caller_signalled(fuse_req_t req);
  void run();
  // Answers `w` with `error` (0: granted) and forgets it.
  void finish(const std::shared_ptr<waiter>& w, int error);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool wake_now_ = false;
  bool stopping_ = false;
  std::list<std::shared_ptr<waiter>> waiters_;
  std::thread thread_;
};

}  // namespace densefs::fs
