// flock(2) and fcntl record locks on a volume whose locks every client
// sees (store/membership/file_locks.h; docs/scale-out.md, "Locks across
// clients"). Served only there: elsewhere init() leaves locks to the
// kernel, which keeps them on this machine as for a local file system.
#include <fcntl.h>
#include <sys/file.h>

#include "fs/fs_error.h"
#include "fs/lock_waiters.h"
#include "fs/ops_common.h"

namespace densefs::fs {

namespace {

// The kernel's range (l_len 0: to the end of the file) as first and last byte.
store::lock_request posix_request(fuse_ino_t ino, const fuse_file_info* fi, const struct flock& l) {
  if (l.l_start < 0 || l.l_len < 0) throw fs_error(EINVAL);
  store::lock_request r;
  r.ino = ino;
  r.kind = store::lock_kind::posix;
  r.owner = fi->lock_owner;
  r.start = static_cast<std::uint64_t>(l.l_start);
  r.end = l.l_len == 0 ? store::k_lock_to_end
                       : std::min<std::uint64_t>(store::k_lock_to_end,
                                                 r.start + static_cast<std::uint64_t>(l.l_len) - 1);
  if (l.l_type == F_RDLCK) {
    r.type = store::lock_type::read;
  } else if (l.l_type == F_WRLCK) {
    r.type = store::lock_type::write;
  } else if (l.l_type != F_UNLCK) {
    throw fs_error(EINVAL);
  }
  r.pid = static_cast<std::uint32_t>(l.l_pid);
  return r;
}

}  // namespace

void filesystem::getlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  run_op(req, "getlk", [&] {
    const store::lock_request r = posix_request(ino, fi, *lock);
    const std::optional<store::lock_record> in_the_way = store_->membership().locks().test(r);
    struct flock answer {};
    answer.l_whence = SEEK_SET;
    if (!in_the_way) {
      answer.l_type = F_UNLCK;
      answer.l_start = lock->l_start;
      answer.l_len = lock->l_len;
    } else {
      answer.l_type = in_the_way->type == store::lock_type::write ? F_WRLCK : F_RDLCK;
      answer.l_start = static_cast<off_t>(in_the_way->start);
      answer.l_len = in_the_way->end == store::k_lock_to_end
                         ? 0
                         : static_cast<off_t>(in_the_way->end - in_the_way->start + 1);
      answer.l_pid = static_cast<pid_t>(in_the_way->pid);
    }
    fuse_reply_lock(req, &answer);
  });
}

void filesystem::set_lock(fuse_req_t req, const store::lock_request& r, bool wait) {
  run_op(req, r.kind == store::lock_kind::flock ? "flock" : "setlk", [&] {
    store::file_locks& locks = store_->membership().locks();
    const bool posix = r.kind == store::lock_kind::posix;
    // Sets the lock, or names the owner of this client in the way (0: none,
    // or another client's: no cycle through it can be seen here). The
    // first try and each of a waiter's.
    const auto try_set = [&locks, r, posix](std::uint64_t& blocked_by) {
      std::optional<store::lock_record> in_the_way;
      const bool granted = locks.set(r, &in_the_way);
      blocked_by = posix && in_the_way ? in_the_way->owner : 0;
      return granted;
    };
    std::uint64_t blocked_by = 0;
    if (try_set(blocked_by)) {
      // An unlock, a downgrade or a split may let a waiter of this client
      // in (a wake with none waiting costs nothing).
      if (lock_waiters_->waiting() > 0) lock_waiters_->retry_now();
      fuse_reply_err(req, 0);
    } else if (!wait) {
      fuse_reply_err(req, EAGAIN);  // EWOULDBLOCK for flock: the same number
    } else {
      if (blocked_by != 0 && lock_waiters_->would_deadlock(r.owner, blocked_by))
        throw fs_error(EDEADLK);
      lock_waiters_->wait(req, posix ? r.owner : 0, blocked_by, try_set);
    }
  });
}

void filesystem::setlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock,
                       bool sleep) {
  store::lock_request r;
  try {
    r = posix_request(ino, fi, *lock);
  } catch (const fs_error& e) {
    fuse_reply_err(req, e.error_number());
    return;
  }
  set_lock(req, r, sleep);
}

void filesystem::flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  store::lock_request r;
  r.ino = ino;
  r.kind = store::lock_kind::flock;
  r.owner = fi->lock_owner;
  switch (op & ~LOCK_NB) {
    case LOCK_SH:
      r.type = store::lock_type::read;
      break;
    case LOCK_EX:
      r.type = store::lock_type::write;
      break;
    case LOCK_UN:
      break;
    default:
      fuse_reply_err(req, EINVAL);
      return;
  }
  if (const fuse_ctx* ctx = fuse_req_ctx(req)) r.pid = static_cast<std::uint32_t>(ctx->pid);
  set_lock(req, r, (op & LOCK_NB) == 0);
}

void filesystem::release_locks(fuse_ino_t ino, const fuse_file_info& fi, bool last_of_handle,
                               bool last_here) {
  if (!serves_locks_) return;
  store::file_locks& locks = store_->membership().locks();
  bool released = false;
  try {
    // FLUSH (every close(2)): the closing process's POSIX locks go, as
    // on a local file system. RELEASE after flock: the open file's flock,
    // and any OFD lock it took (whose owner is the same open file).
    if (!last_of_handle) {
      released = locks.release(ino, store::lock_kind::posix, fi.lock_owner);
    } else if (fi.flock_release) {
      released = locks.release(ino, store::lock_kind::flock, fi.lock_owner);
      released = locks.release(ino, store::lock_kind::posix, fi.lock_owner) || released;
    }
    // OFD locks (F_OFD_SETLK): their owner is the open file, whose close
    // the kernel does not name unless it also used flock. At the file's
    // last close here, whatever this client still holds on it goes: late
    // for an OFD lock while another open file of it stays open here.
    if (last_here) released = locks.release_all(ino, store::lock_kind::posix) || released;
  } catch (const store::store_error& e) {
    // Not the close's error: the rows go with this session at the latest.
    log_error("inode " + std::to_string(ino) + ": letting its locks go at close: " + e.what());
  }
  if (released) lock_waiters_->retry_now();
}

}  // namespace densefs::fs
