// The FUSE session: the C callback table, capability negotiation, and
// mount(), which does every fallible step before daemonizing so that errors
// reach the user's terminal as one line.
#include "fs/mount.h"
#include "codec/policy.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fs/control_server.h"
#include "fs/filesystem.h"
#include "fs/metrics_server.h"
#include "store/log.h"

namespace densefs::fs {
namespace {

std::atomic<std::uint64_t> g_libfuse_errors{0};

// libfuse's own messages (its rings, its session) go to densefs's log: a
// background mount's stderr is /dev/null.
void route_libfuse_log(enum fuse_log_level level, const char* format, va_list args) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, format, args);
  std::string line = std::string("libfuse: ") + buffer;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (level <= FUSE_LOG_ERR) {
    g_libfuse_errors.fetch_add(1, std::memory_order_relaxed);
    log_error(line);
  } else if (level == FUSE_LOG_WARNING) {
    log_warning(line);
  } else if (level <= FUSE_LOG_INFO) {
    log_info(line);
  } else {
    log_debug(line);
  }
}

// The stall watchdog (fs/stall_watchdog.h): a probe every 10 s, a stall
// after 60 s without an answer (a busy daemon answers a statfs in far
// less). DENSEFS_STALL_PROBE_MS changes the period for tests; 0 turns the
// probes off.
constexpr std::chrono::milliseconds k_stall_bound{60000};
std::chrono::milliseconds stall_probe_period() {
  if (const char* env = std::getenv("DENSEFS_STALL_PROBE_MS"); env && *env)
    return std::chrono::milliseconds(std::strtoll(env, nullptr, 10));
  return std::chrono::milliseconds(10000);
}

filesystem* fs_of(fuse_req_t req) {
  return static_cast<filesystem*>(fuse_req_userdata(req));
}
// Counts one request and the daemon's time on it, until the handler
// returns. Keeps the file system, not the request: a reply frees `req`.
class counted_request {
 public:
  counted_request(filesystem* fs, fuse_request kind,
                  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now())
      : fs_(fs), kind_(kind), start_(start) {}
  counted_request(fuse_req_t req, fuse_request kind) : counted_request(fs_of(req), kind) {
    fs_->spinner().note_request();
  }
  ~counted_request() {
    const auto spent = std::chrono::steady_clock::now() - start_;
    if (!answered_later_)
      fs_->requests().add(kind_,
                          static_cast<std::uint64_t>(
                              std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count()));
    // The request's own references to nodes are gone by now.
    fs_->park_idle_nodes();
  }
  counted_request(const counted_request&) = delete;
  counted_request& operator=(const counted_request&) = delete;
  // The handler left the reply to another thread, which counts the
  // request when it answers (its time is then the whole wait).
  void answered_later() { answered_later_ = true; }

 private:
  filesystem* fs_;
  fuse_request kind_;
  std::chrono::steady_clock::time_point start_;
  bool answered_later_ = false;
};

// Runs the handler of a request that may wait for the network (a commit,
// an upload) here, or, when this thread is an io_uring ring's, on the ring
// helpers (filesystem::hands_off): the ring's thread serves every request
// from its core, and a stat or a cached read from that core would wait
// behind the round trip. `handle` owns copies of what libfuse passed on its
// stack (a fuse_file_info, a struct stat, a struct flock); names and
// payloads stay in the ring entry until the reply.
// `answered_here` runs first on a ring's thread, and only there: it answers
// the request itself where nothing would wait (filesystem::setattr_here
// and the like) and says whether it did; else the request is handed off.
template <class Handler, class Here>
void serve_changing(fuse_req_t req, fuse_request kind, Handler handle, Here answered_here) {
  filesystem* fs = fs_of(req);
  fs->spinner().note_request();
  if (!fs->hands_off(req)) {
    const counted_request counted(fs, kind);
    handle();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  if (answered_here()) {
    const counted_request counted(fs, kind, start);
    return;
  }
  fs->run_off_ring([fs, kind, start, handle = std::move(handle)]() mutable {
    const counted_request counted(fs, kind, start);
    handle();
  });
}
template <class Handler>
void serve_changing(fuse_req_t req, fuse_request kind, Handler handle) {
  serve_changing(req, kind, std::move(handle), [] { return false; });
}

// `.snapshots` and what is in it are the snapshot tree's (fs/snapshot_tree.h):
// its requests go there, and every change in it is refused.
snapshot_tree* tree_of(fuse_req_t req, fuse_ino_t ino) {
  return snapshot_tree::owns(ino) ? fs_of(req)->snapshots() : nullptr;
}
bool refused_in_snapshots(fuse_req_t req, fuse_ino_t ino) {
  if (!snapshot_tree::owns(ino)) return false;
  fuse_reply_err(req, EROFS);
  return true;
}
// Nothing new takes the name `.snapshots` in the root: the directory would
// then be out of reach.
bool refused_name(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (!snapshot_tree::names_dir(parent, name) || !fs_of(req)->snapshots()) return false;
  fuse_reply_err(req, EEXIST);
  return true;
}
// Requests that change nothing answer as done.
bool done_in_snapshots(fuse_req_t req, fuse_ino_t ino) {
  if (!snapshot_tree::owns(ino)) return false;
  fuse_reply_err(req, 0);
  return true;
}

void op_init(void* userdata, fuse_conn_info* conn) {
  static_cast<filesystem*>(userdata)->init(conn);
}
void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const counted_request counted(req, fuse_request::lookup);
  // The ".." of `.snapshots` (file handles, filesystem::init) is the root's.
  if (parent == snapshot_tree::k_dir_ino && std::strcmp(name, "..") == 0)
    return fs_of(req)->lookup(req, FUSE_ROOT_ID, ".");
  if (auto* tree = tree_of(req, parent)) return tree->lookup(req, parent, name);
  fs_of(req)->lookup(req, parent, name);
}
void op_forget(fuse_req_t req, fuse_ino_t ino, std::uint64_t nlookup) {
  const counted_request counted(req, fuse_request::forget);
  // The snapshot tree keeps nothing for the kernel's lookups.
  if (!snapshot_tree::owns(ino)) fs_of(req)->forget(ino, nlookup);
  fuse_reply_none(req);
}
void op_forget_multi(fuse_req_t req, std::size_t count, fuse_forget_data* forgets) {
  const counted_request counted(req, fuse_request::batch_forget);
  for (std::size_t i = 0; i < count; ++i)
    if (!snapshot_tree::owns(forgets[i].ino))
      fs_of(req)->forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}
void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const counted_request counted(req, fuse_request::getattr);
  if (auto* tree = tree_of(req, ino)) return tree->getattr(req, ino);
  fs_of(req)->getattr(req, ino);
}
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  std::optional<fuse_file_info> file;
  if (fi) file = *fi;
  serve_changing(
      req, fuse_request::setattr,
      [=, attr = *attr]() mutable {
        if (refused_in_snapshots(req, ino)) return;
        fs_of(req)->setattr(req, ino, &attr, to_set, file ? &*file : nullptr);
      },
      [=] {
        return !snapshot_tree::owns(ino) && fs_of(req)->setattr_here(req, ino, attr, to_set);
      });
}
void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  const counted_request counted(req, fuse_request::readlink);
  if (auto* tree = tree_of(req, ino)) return tree->readlink(req, ino);
  fs_of(req)->readlink(req, ino);
}
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  serve_changing(req, fuse_request::mknod, [=] {
    if (refused_in_snapshots(req, parent) || refused_name(req, parent, name)) return;
    fs_of(req)->mknod(req, parent, name, mode, rdev);
  });
}
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  serve_changing(req, fuse_request::mkdir, [=] {
    if (refused_in_snapshots(req, parent) || refused_name(req, parent, name)) return;
    fs_of(req)->mkdir(req, parent, name, mode);
  });
}
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve_changing(req, fuse_request::unlink, [=] {
    if (refused_in_snapshots(req, parent)) return;
    fs_of(req)->unlink(req, parent, name);
  });
}
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  serve_changing(req, fuse_request::rmdir, [=] {
    if (refused_in_snapshots(req, parent)) return;
    fs_of(req)->rmdir(req, parent, name);
  });
}
void op_symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  serve_changing(req, fuse_request::symlink, [=] {
    if (refused_in_snapshots(req, parent) || refused_name(req, parent, name)) return;
    fs_of(req)->symlink(req, target, parent, name);
  });
}
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
               const char* newname, unsigned int flags) {
  serve_changing(req, fuse_request::rename, [=] {
    if (refused_in_snapshots(req, parent) || refused_in_snapshots(req, newparent) ||
        refused_name(req, newparent, newname))
      return;
    fs_of(req)->rename(req, parent, name, newparent, newname, flags);
  });
}
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  serve_changing(req, fuse_request::link, [=] {
    if (refused_in_snapshots(req, ino) || refused_in_snapshots(req, newparent) ||
        refused_name(req, newparent, newname))
      return;
    fs_of(req)->link(req, ino, newparent, newname);
  });
}
void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const counted_request counted(req, fuse_request::open);
  if (auto* tree = tree_of(req, ino)) return tree->open(req, ino, fi);
  fs_of(req)->open(req, ino, fi);
}
void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
               fuse_file_info* fi) {
  serve_changing(req, fuse_request::create, [=, fi = *fi]() mutable {
    if (refused_in_snapshots(req, parent) || refused_name(req, parent, name)) return;
    fs_of(req)->create(req, parent, name, mode, &fi);
  });
}
void op_read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi) {
  counted_request counted(req, fuse_request::read);
  if (auto* tree = tree_of(req, ino)) return tree->read(req, ino, size, off);
  if (fs_of(req)->read(req, ino, size, off, fi)) counted.answered_later();
}
void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, std::size_t size, off_t off,
              fuse_file_info* fi) {
  serve_changing(req, fuse_request::write, [=, fi = *fi]() mutable {
    if (refused_in_snapshots(req, ino)) return;
    fs_of(req)->write(req, ino, buf, size, off, &fi);
  });
}
void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  serve_changing(
      req, fuse_request::flush,
      [=, fi = *fi]() mutable {
        if (done_in_snapshots(req, ino)) return;
        fs_of(req)->flush(req, ino, &fi);
      },
      [=] { return !snapshot_tree::owns(ino) && fs_of(req)->flush_here(req, ino, *fi); });
}
void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  serve_changing(
      req, fuse_request::release,
      [=, fi = *fi]() mutable {
        if (done_in_snapshots(req, ino)) return;
        fs_of(req)->release(req, ino, &fi);
      },
      [=] { return !snapshot_tree::owns(ino) && fs_of(req)->release_here(req, ino, *fi); });
}
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  counted_request counted(req, fuse_request::fsync);
  if (done_in_snapshots(req, ino)) return;
  counted.answered_later();
  fs_of(req)->fsync(req, ino, datasync, fi);
}
void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const counted_request counted(req, fuse_request::opendir);
  if (auto* tree = tree_of(req, ino)) return tree->opendir(req, ino, fi);
  fs_of(req)->opendir(req, ino, fi);
}
void op_readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi) {
  const counted_request counted(req, fuse_request::readdir);
  if (auto* tree = tree_of(req, ino)) return tree->readdir(req, ino, size, off, false);
  fs_of(req)->readdir(req, ino, size, off, fi, false);
}
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                    fuse_file_info* fi) {
  const counted_request counted(req, fuse_request::readdirplus);
  if (auto* tree = tree_of(req, ino)) return tree->readdir(req, ino, size, off, true);
  fs_of(req)->readdir(req, ino, size, off, fi, true);
}
void op_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const counted_request counted(req, fuse_request::releasedir);
  if (done_in_snapshots(req, ino)) return;
  fs_of(req)->releasedir(req, ino, fi);
}
void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  counted_request counted(req, fuse_request::fsyncdir);
  if (done_in_snapshots(req, ino)) return;
  counted.answered_later();
  fs_of(req)->fsyncdir(req, ino, datasync, fi);
}
void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  // The stall watchdog's probes are not the users' requests.
  if (fs_of(req)->watchdog().is_probe(fuse_req_ctx(req)->pid)) {
    fs_of(req)->statfs(req, ino);
    return;
  }
  const counted_request counted(req, fuse_request::statfs);
  fs_of(req)->statfs(req, ino);
}
void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                 std::size_t size, int flags) {
  serve_changing(req, fuse_request::setxattr, [=] {
    if (refused_in_snapshots(req, ino)) return;
    fs_of(req)->setxattr(req, ino, name, value, size, flags);
  });
}
void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size) {
  const counted_request counted(req, fuse_request::getxattr);
  if (auto* tree = tree_of(req, ino)) return tree->getxattr(req, ino, name, size);
  fs_of(req)->getxattr(req, ino, name, size);
}
void op_listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size) {
  const counted_request counted(req, fuse_request::listxattr);
  if (auto* tree = tree_of(req, ino)) return tree->listxattr(req, ino, size);
  fs_of(req)->listxattr(req, ino, size);
}
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  serve_changing(req, fuse_request::removexattr, [=] {
    if (refused_in_snapshots(req, ino)) return;
    fs_of(req)->removexattr(req, ino, name);
  });
}
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                  fuse_file_info* fi) {
  serve_changing(req, fuse_request::fallocate, [=, fi = *fi]() mutable {
    if (refused_in_snapshots(req, ino)) return;
    fs_of(req)->fallocate(req, ino, mode, offset, length, &fi);
  });
}
void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, fuse_file_info* fi_in,
                        fuse_ino_t ino_out, off_t off_out, fuse_file_info* fi_out, std::size_t len,
                        int flags) {
  serve_changing(req, fuse_request::copy_file_range,
                 [=, fi_in = *fi_in, fi_out = *fi_out]() mutable {
                   if (refused_in_snapshots(req, ino_out)) return;
                   // From a snapshot: the kernel copies through reads and
                   // writes instead.
                   if (snapshot_tree::owns(ino_in)) {
                     fuse_reply_err(req, EXDEV);
                     return;
                   }
                   fs_of(req)->copy_file_range(req, ino_in, off_in, &fi_in, ino_out, off_out,
                                               &fi_out, len, flags);
                 });
}

void op_getlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  serve_changing(req, fuse_request::getlk, [=, fi = *fi, lock = *lock]() mutable {
    fs_of(req)->getlk(req, ino, &fi, &lock);
  });
}
void op_setlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  serve_changing(req, fuse_request::setlk, [=, fi = *fi, lock = *lock]() mutable {
    fs_of(req)->setlk(req, ino, &fi, &lock, sleep != 0);
  });
}
void op_flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  serve_changing(req, fuse_request::flock,
                 [=, fi = *fi]() mutable { fs_of(req)->flock(req, ino, &fi, op); });
}

// The lock operations are always in the table; init() tells the kernel
// whether to send them (filesystem::serves_locks_).
fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.setattr = op_setattr;
  ops.readlink = op_readlink;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.symlink = op_symlink;
  ops.rename = op_rename;
  ops.link = op_link;
  ops.open = op_open;
  ops.create = op_create;
  ops.read = op_read;
  ops.write = op_write;
  ops.flush = op_flush;
  ops.release = op_release;
  ops.fsync = op_fsync;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_releasedir;
  ops.fsyncdir = op_fsyncdir;
  ops.statfs = op_statfs;
  ops.setxattr = op_setxattr;
  ops.getxattr = op_getxattr;
  ops.listxattr = op_listxattr;
  ops.removexattr = op_removexattr;
  ops.fallocate = op_fallocate;
  ops.copy_file_range = op_copy_file_range;
  ops.getlk = op_getlk;
  ops.setlk = op_setlk;
  ops.flock = op_flock;
  return ops;
}

// fuse_opt splits on commas; a comma inside a value is escaped.
std::string escape_option(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Daemonizes like fuse_daemonize(), except that the parent waits until the
// child has opened the store and reports the child's verdict as its exit
// status, so a failure after the fork still reaches the terminal.
class daemonizer {
 public:
  void fork_now() {
    if (::pipe2(pipe_, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid > 0) {
      ::close(pipe_[1]);
      char status = 1;
      if (::read(pipe_[0], &status, 1) != 1) status = 1;
      ::_exit(status);
    }
    ::close(pipe_[0]);
    ::setsid();
    (void)!::chdir("/");
    forked_ = true;
  }

  // Tells the waiting parent how it went and detaches from the terminal.
  void report(bool ok) {
    if (!forked_) return;
    const char status = ok ? 0 : 1;
    (void)!::write(pipe_[1], &status, 1);
    ::close(pipe_[1]);
    if (ok) {
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, STDIN_FILENO);
        ::dup2(null, STDOUT_FILENO);
        ::dup2(null, STDERR_FILENO);
        if (null > STDERR_FILENO) ::close(null);
      }
      log_to_syslog(true);
    }
  }

 private:
  int pipe_[2] = {-1, -1};
  bool forked_ = false;
};

struct session_guard {
  fuse_session* se = nullptr;
  bool mounted = false;
  bool handlers = false;
  ~session_guard() {
    if (!se) return;
    if (handlers) fuse_remove_signal_handlers(se);
    if (mounted) fuse_session_unmount(se);
    fuse_session_destroy(se);
  }
};

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits(field.substr(i + 1, 3));
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(digits, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

// The densefs mounts in this mount namespace: mount point and source (the
// store's path as its daemon spelled it), both unescaped. nullopt when
// mountinfo cannot be read.
struct densefs_mount_entry {
  std::string mountpoint;
  std::string source;
};
std::optional<std::vector<densefs_mount_entry>> densefs_mounts() {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return std::nullopt;
  std::vector<densefs_mount_entry> found;
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root MOUNTPOINT options... - TYPE SOURCE super
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type, source;
    tail >> type >> source;
    if (type == "fuse.densefs")
      found.push_back({unescape_mountinfo(point), unescape_mountinfo(source)});
  }
  return found;
}

// Where the holder's daemon still serves the store: its own mount point
// (canonical, as it recorded it), else another mount of the same store (a
// second mount point bound to the first, which stays after the first is
// unmounted). Empty when it serves none. Unreadable mountinfo counts as
// mounted on the holder's mount point: the caller then refuses, as before
// this check existed.
std::string where_store_is_mounted(const std::string& holder_mountpoint,
                                   const std::filesystem::path& store_dir) {
  const auto mounts = densefs_mounts();
  if (!mounts) return holder_mountpoint;
  for (const auto& m : *mounts)
    if (m.mountpoint == holder_mountpoint) return m.mountpoint;
  // A bind left behind by a daemon that was killed answers ENOTCONN.
  for (const auto& m : *mounts) {
    struct statfs info {};
    if (m.source == store_dir.string() && ::statfs(m.mountpoint.c_str(), &info) == 0)
      return m.mountpoint;
  }
  return {};
}

// The store is mounted and its daemon is not exiting: a second mount point
// is bound to `mountpoint` (mount_second_mount_point).
class store_already_mounted : public store::store_error {
 public:
  store_already_mounted(const std::string& message, std::string mountpoint)
      : store::store_error(EBUSY, message), mountpoint_(std::move(mountpoint)) {}
  const std::string& mountpoint() const { return mountpoint_; }

 private:
  std::string mountpoint_;
};

// How long a new mount waits for the previous daemon of its store, which
// after an unmount still writes back staged data and closes the store
// while holding the lock (`umount MNT && densefs mount STORE MNT`).
constexpr auto k_previous_daemon_wait = std::chrono::seconds(60);
// A mounted store is refused after this long: a daemon just told to stop
// has not marked its record yet.
constexpr auto k_mounted_grace = std::chrono::seconds(1);
// A holder that is not a mount (or whose record is being written) gets
// this long: `densefs umount` takes the lock for a moment to see that the
// daemon is gone.
constexpr auto k_other_holder_wait = std::chrono::seconds(2);

// Takes the store lock, waiting for a daemon that is exiting; fails at once
// when the store is mounted (its daemon's mount point is still mounted).
int lock_store(const std::filesystem::path& store_dir) {
  const auto start = std::chrono::steady_clock::now();
  bool said = false;
  // When the holder's record was first seen empty or unreadable in a row.
  // Counted from then, not from `start`: an exiting daemon rewrites its
  // record (emptied, then written), and a mount that had already waited for
  // it must not take that moment for an unknown holder. max() while the
  // holder is known.
  constexpr auto k_known = std::chrono::steady_clock::time_point::max();
  auto unknown_since = k_known;
  for (;;) {
    try {
      return store::store::lock(store_dir);
    } catch (const store::store_error& e) {
      if (e.error_number() != EBUSY) throw;
    }
    const auto holder = store::store::read_lock_holder(store_dir);
    const auto now = std::chrono::steady_clock::now();
    const auto waited = now - start;
    const std::string who = holder ? "pid " + std::to_string(holder->pid) : "another process";
    const bool unknown_holder = !holder || holder->mountpoint.empty();
    unknown_since = unknown_holder ? std::min(unknown_since, now) : k_known;
    if (unknown_holder) {
      if (now - unknown_since >= k_other_holder_wait)
        throw store::store_error(EBUSY, "store " + store_dir.string() + " is in use by " + who +
                                            " (densefs fsck, gc or another tool?)");
    } else if (const std::string mounted_on =
                   holder->exiting ? std::string()
                                   : where_store_is_mounted(holder->mountpoint, store_dir);
               !mounted_on.empty()) {
      // A daemon told to stop (SIGTERM) marks its record a moment later.
      if (waited >= k_mounted_grace)
        throw store_already_mounted("store " + store_dir.string() + " is already mounted on " +
                                        mounted_on + " (densefs daemon " + who + ")",
                                    mounted_on);
    } else {
      // Unmounted (or its session ended): the daemon is writing back.
      if (!said) {
        log_info("waiting for the previous densefs daemon (" + who + ") to finish writing " +
                 store_dir.string());
        said = true;
      }
      if (waited >= k_previous_daemon_wait)
        throw store::store_error(
            EBUSY, "store " + store_dir.string() + " is still held by the previous daemon (" + who +
                       ") after " + std::to_string(k_previous_daemon_wait.count()) +
                       " s; it is unmounted but still writing (or unmounted lazily and in use)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// A second mount point of a mounted store shows the same mount: a bind
// mount of the first, served by the same daemon, as a second mount of one
// ext4 device shares its superblock (xfstests generic/732). The first
// mount's options hold for both; -o ro makes this one read-only. Binding
// needs CAP_SYS_ADMIN; without it the error says how to get the same.
int mount_second_mount_point(const store_already_mounted& mounted, const mount_options& options) {
  const std::string first = mounted.mountpoint();
  const std::string second = options.mountpoint.string();
  // A volume mounted by its URI: this machine's client directory of it is
  // what is mounted; a second client here needs a directory of its own.
  const std::string second_client =
      options.volume_uri.empty()
          ? std::string()
          : "; for a second client of " + options.volume_uri +
                " on this machine, give it a client directory of its own: densefs mount " +
                options.volume_uri + " " + second + " -o cache_dir=DIR" +
                (options.shared_writer ? ",shared"
                 : options.read_only   ? ",ro"
                                       : "");
  const auto refuse = [&](const std::string& why) {
    return std::runtime_error(std::string(mounted.what()) + "; to see it on " + second +
                              " as well, run `mount --bind " + first + " " + second +
                              "` as root (" + why + ")" + second_client);
  };
  // A bind mount shares the first client's session: it cannot be a second
  // writer beside it.
  if (options.shared_writer && !options.volume_uri.empty())
    throw std::runtime_error(std::string(mounted.what()) + second_client);
  struct stat st {};
  if (::stat(second.c_str(), &st) != 0)
    throw std::runtime_error("mountpoint " + second + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error("mountpoint " + second + " is not a directory");
  if (::mount(first.c_str(), second.c_str(), nullptr, MS_BIND, nullptr) != 0)
    throw refuse(std::strerror(errno));
  if (options.read_only &&
      ::mount(nullptr, second.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    const int error = errno;
    ::umount2(second.c_str(), MNT_DETACH);
    throw refuse(std::string("read-only: ") + std::strerror(error));
  }
  log_info("store " + options.store_dir.string() + " is mounted on " + first + "; " + second +
           " now shows the same mount (a bind mount, served by the same daemon)" + second_client);
  return 0;
}

// The kernel serves FUSE over io_uring only when fuse's enable_uring
// parameter is on (Linux 6.14 and later; off by default). Empty when it is
// on, else why not, for a log line or -o transport=uring's error.
std::string why_no_fuse_uring() {
#ifndef FUSE_CAP_OVER_IO_URING
  return "this densefs was built with libfuse " + std::to_string(FUSE_MAJOR_VERSION) + "." +
         std::to_string(FUSE_MINOR_VERSION) +
         ", which has no io_uring transport (3.18 and later; tools/setup.sh builds it)";
#else
  const char* const parameter = "/sys/module/fuse/parameters/enable_uring";
  std::ifstream in(parameter);
  std::string value;
  if (!(in >> value))
    return std::string("this kernel has no ") + parameter + " (Linux 6.14 and later)";
  if (value != "Y" && value != "1")
    return std::string("the kernel's FUSE io_uring is off (echo Y > ") + parameter + ", as root)";
  return "";
#endif
}

// Resolves -o transport=auto to uring or device; uring where it cannot be
// had is a one-line error before anything is mounted. -s keeps one thread
// under auto: the rings would add one per core.
fuse_transport choose_transport(fuse_transport asked, bool single_threaded) {
  if (asked == fuse_transport::device) return asked;
  if (single_threaded && asked == fuse_transport::automatic) return fuse_transport::device;
  const std::string why_not = why_no_fuse_uring();
  if (why_not.empty()) return fuse_transport::uring;
  if (asked == fuse_transport::uring) throw std::runtime_error("-o transport=uring: " + why_not);
  return fuse_transport::device;
}

}  // namespace

void filesystem::init(fuse_conn_info* conn) {
#ifdef FUSE_CAP_OVER_IO_URING
  // Asked for in mount() (transport); libfuse starts the rings after this
  // reply, or stays on /dev/fuse when the kernel does not offer them.
  if (options_.transport == fuse_transport::uring) {
    if (conn->capable_ext & FUSE_CAP_OVER_IO_URING) {
      log_info(ring_jobs_ ? "FUSE requests over io_uring; changes are handled off the rings' "
                            "threads (they may wait for the network)"
                          : "FUSE requests over io_uring");
    } else {
      log_warning("the kernel does not offer FUSE over io_uring; requests go through /dev/fuse");
    }
  }
#endif
  if (options_.writeback_cache && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) {
    conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  } else {
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  }
  // Read after write through open descriptors (docs/read-path.md, "Read
  // after write"): where only this mount writes, every change of a file's
  // bytes goes through this kernel, which puts written bytes in its pages
  // itself. AUTO_INVAL_DATA made every read after a write (the attributes
  // are stale then) fetch them and drop all of the file's pages when the
  // mtime had moved, among them a page another process had just written
  // whose WRITE was still on its way here; a read of that page from us
  // before the WRITE was staged cached the old bytes. A follower or a
  // writer beside others keeps it: their files change under them.
  if (!store_->follows() && !store_->writes_beside_others())
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // flock and fcntl locks: kept in the volume's database where its other
  // clients must see them (a volume in PostgreSQL with a session: a
  // writer, -o shared or a follower; docs/scale-out.md, "Locks across
  // clients"); elsewhere the kernel keeps them, as on a local file
  // system. Decided once: the kernel asks no daemon per request.
  serves_locks_ = store_->membership().keeps_sessions() &&
                  !store_->membership().session_id().empty() && !options_.local_locks &&
                  (conn->capable & FUSE_CAP_POSIX_LOCKS) && (conn->capable & FUSE_CAP_FLOCK_LOCKS);
  if (serves_locks_) {
    conn->want |= FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS;
    lock_waiters_ = std::make_unique<lock_waiters>();
  } else {
    conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
  }
  // Directories need no handle (filesystem::opendir): the kernel can skip
  // OPENDIR and RELEASEDIR.
  if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) no_opendir_ = true;
  // Files need none either on a read-only mount of a volume no one else
  // writes meanwhile (its records are not in a shared database): the
  // kernel then opens files alone (FUSE's no_open), and a warm read of a
  // small file is no request at all. Not where files are written: once the
  // kernel opens files alone it sends no RELEASE for a file created after
  // that either (6.18; tests/mount/kernel_opens_test.cpp), and a new file's
  // last close is what ends its being new (whole or absent after a crash).
  // docs/read-path.md, "Opens"; -o open_requests keeps them. Not with
  // writeback_cache: after `mount -o remount,rw` the kernel would take a
  // write(2) into its cache with no OPEN to refuse it, and keep the bytes
  // though densefs refuses their WRITE.
  if ((conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && options_.read_only && !options_.open_requests &&
      !options_.writeback_cache && !store_->membership().keeps_sessions())
    kernel_opens_ = true;
  // READDIRPLUS on every batch, not only the first (AUTO): a walk stats
  // every entry, and each batch without attributes costs a LOOKUP per entry.
  if (conn->capable & FUSE_CAP_READDIRPLUS) {
    conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  }
  // We clear suid and sgid (filesystem::setattr, filesystem::write), told by
  // the kernel when a change asks for it (KILLPRIV_V2). The kernel then
  // marks the superblock SB_NOSEC: once a file's first write found no
  // security.capability, its later writes ask for none (tar writes 10 KiB
  // records, each a GETXATTR round trip before). Without V2 (libfuse 3.14)
  // the kernel computes the mode change and sends it as a SETATTR.
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
  if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV_V2) {
    conn->want |= FUSE_CAP_HANDLE_KILLPRIV_V2;
    kills_suid_sgid_ = true;
  }
#endif
  // No atomic_o_trunc: with it the kernel sends O_TRUNC in OPEN and sets its
  // i_size to 0 as the OPEN returns, before the VFS checks for a running
  // executable (ETXTBSY). A refused open(O_TRUNC) of a running program then
  // still dropped its page cache and killed it with SIGSEGV, and if the
  // program was still starting, the open then succeeded (pjdfstest
  // open::etxtbsy). It also kept O_RDONLY|O_TRUNC from truncating. Without
  // it the VFS truncates with a SETATTR after that check, as on ext4.
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  // File handles (name_to_handle_at, open_by_handle_at, NFS export) that
  // still work after the kernel dropped the inode: it then asks us for "."
  // and ".." (filesystem::lookup). Inode numbers are never reused, so a
  // handle of a deleted file goes stale (ENOENT) instead of reaching another.
  if (conn->capable & FUSE_CAP_EXPORT_SUPPORT) conn->want |= FUSE_CAP_EXPORT_SUPPORT;
  // POSIX ACLs: the kernel enforces them and leaves the umask to us, since a
  // default ACL replaces it (filesystem::acls_for_new_inode). Both or
  // neither: without DONT_MASK a default ACL could not undo the umask.
  if (options_.posix_acl && (conn->capable & FUSE_CAP_POSIX_ACL) &&
      (conn->capable & FUSE_CAP_DONT_MASK)) {
    conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
    posix_acl_ = true;
  }
  conn->time_gran = 1;  // timestamps are kept to the nanosecond
  // Sequential reads in requests of up to 1 MiB with several in flight,
  // instead of 128 KiB ones (fs/read_ahead.h, raise_kernel_read_ahead).
  conn->max_readahead = k_kernel_read_ahead_kib * 1024;
}

// Changes the read-only flag of a live densefs mount. MS_REMOUNT replaces the
// per-mount flags, so the current ones are carried over.
static int remount(const mount_options& options) {
  struct statfs fs_info {};
  if (::statfs(options.mountpoint.c_str(), &fs_info) != 0)
    throw std::runtime_error("cannot remount " + options.mountpoint.string() + ": " +
                             std::strerror(errno));
  constexpr long k_fuse_super_magic = 0x65735546;
  if (fs_info.f_type != k_fuse_super_magic)
    throw std::runtime_error("cannot remount " + options.mountpoint.string() +
                             ": not a densefs mount");
  struct statvfs current {};
  ::statvfs(options.mountpoint.c_str(), &current);
  unsigned long flags = MS_REMOUNT;
  if (current.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (current.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (current.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (current.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (current.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (current.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (options.read_only) flags |= MS_RDONLY;
  if (::mount(nullptr, options.mountpoint.c_str(), nullptr, flags, nullptr) != 0)
    throw std::runtime_error("cannot remount " + options.mountpoint.string() + ": " +
                             std::strerror(errno));
  return 0;
}

std::uint64_t libfuse_error_count() {
  return g_libfuse_errors.load(std::memory_order_relaxed);
}

int mount(const mount_options& requested) {
  fuse_set_log_func(route_libfuse_log);
  mount_options options = requested;
  if (options.remount) {
    options.mountpoint = std::filesystem::absolute(options.mountpoint);
    return remount(options);
  }
  if (options.debug) options.foreground = true;
  // A mount that succeeds prints nothing (its info lines go to the log).
  if (!options.foreground) log_quiet_terminal(true);
  options.store_dir = std::filesystem::absolute(options.store_dir);
  options.mountpoint = std::filesystem::absolute(options.mountpoint);

  // Everything that can fail for a user reason fails here, before the fork.
  store::store::check(options.store_dir);
  // The lock first: while a previous daemon of this store is exiting, its
  // mount point may still be mounted (SIGTERM) and stat it fails.
  int lock_fd = -1;
  try {
    lock_fd = lock_store(options.store_dir);
  } catch (const store_already_mounted& mounted) {
    // A second mount point of a mounted volume shows the same mount: not
    // a snapshot of the live volume, nor the live volume of a snapshot.
    if (!options.snapshot.empty())
      throw std::runtime_error("store " + options.store_dir.string() +
                               " is mounted; -o snapshot= mounts a snapshot of a volume that is "
                               "not (unmount it first)");
    // The first mount serves the metrics of both (its own -o metrics=).
    if (!options.metrics_address.empty())
      throw std::runtime_error(std::string(mounted.what()) +
                               "; a second mount point of it shows the same mount, whose metrics "
                               "are its own: mount it again without -o metrics=");
    if (const auto holder = store::store::read_lock_holder(options.store_dir);
        holder && !holder->snapshot.empty())
      throw std::runtime_error("store " + options.store_dir.string() + " is mounted on " +
                               mounted.mountpoint() + " as its snapshot '" + holder->snapshot +
                               "' (read-only); unmount that first to mount the volume itself");
    return mount_second_mount_point(mounted, options);
  }
  struct stat st {};
  if (::stat(options.mountpoint.c_str(), &st) != 0)
    throw std::runtime_error("mountpoint " + options.mountpoint.string() + ": " +
                             std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error("mountpoint " + options.mountpoint.string() + " is not a directory");
  if (!options.codec_spec.empty()) codec::parse_policy(options.codec_spec);
  options.transport = choose_transport(options.transport, options.single_threaded);
  // As /proc/self/mountinfo will show it (lock_store compares the two);
  // resolved now, before the mount would route the lookup to ourselves.
  std::error_code ec;
  std::filesystem::path mountpoint_seen = std::filesystem::canonical(options.mountpoint, ec);
  if (ec) mountpoint_seen = options.mountpoint;

  std::string fuse_opts = "fsname=" + escape_option(options.store_dir.string()) +
                          ",subtype=densefs,default_permissions";
  if (options.allow_other) fuse_opts += ",allow_other";
  if (options.read_only) fuse_opts += ",ro";
  // libfuse's own option (3.18): a ring per core instead of /dev/fuse reads.
  if (options.transport == fuse_transport::uring) fuse_opts += ",io_uring";
  for (const auto& o : options.fuse_options) fuse_opts += "," + o;
  std::vector<std::string> argv_storage = {"densefs", "-o", fuse_opts};
  if (options.debug) argv_storage.push_back("-d");
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  filesystem fs(options);
  // Bound here, before the mount and the fork: a port that is taken is a
  // one-line error and no mount. Answered from a thread started after.
  std::optional<metrics_server> metrics;
  if (!options.metrics_address.empty()) metrics.emplace(options.metrics_address);
  const fuse_lowlevel_ops ops = make_ops();
  session_guard session;
  session.se = fuse_session_new(&args, &ops, sizeof ops, &fs);
  fuse_opt_free_args(&args);
  if (!session.se) throw std::runtime_error("cannot start a FUSE session (see the message above)");
  if (fuse_set_signal_handlers(session.se) != 0)
    throw std::runtime_error("cannot install signal handlers");
  session.handlers = true;
  if (fuse_session_mount(session.se, options.mountpoint.c_str()) != 0)
    throw std::runtime_error("cannot mount on " + options.mountpoint.string());
  session.mounted = true;
  raise_kernel_read_ahead(options.mountpoint.string(), k_kernel_read_ahead_kib);
  fs.set_session(session.se);

  daemonizer daemon;
  if (!options.foreground) daemon.fork_now();
  // After the fork: the record names the daemon that keeps the lock.
  store::store::lock_holder holder{::getpid(), mountpoint_seen.string(), false, options.snapshot};
  const auto record_holder = [&] {
    try {
      store::store::record_lock_holder(lock_fd, holder);
    } catch (const std::exception& e) {
      log_error(std::string(e.what()) + " (a mount right after this one ends may fail)");
    }
  };
  record_holder();
  // From here on threads may start: RocksDB's and our worker pool.
  // --- control socket (fs/control_server.h, docs/export.md) ---
  // STORE/control.sock serves `densefs cat --encoding=br` on this mount. It
  // starts a thread, so after the fork; it is ready before the parent exits
  // (a `densefs cat` right after `densefs mount` finds it); it reads the
  // store `fs` owns, so it stops before fs.shutdown() closes it. Without it
  // the mount still works.
  control_server control(options.store_dir);
  // --- end control socket ---
  try {
    store::store_open_options open_options;
    open_options.chunk_cache_bytes = options.chunk_cache_bytes;
    open_options.cache_dir = options.cache_dir;
    open_options.cache_bytes = options.cache_bytes;
    open_options.io = options.io;
    open_options.key_secret = options.key_secret;
    // -o ro on a shared volume: a follower beside its writer (no lock).
    open_options.follower = options.read_only && options.snapshot.empty();
    if (!options.snapshot.empty()) open_options.snapshot = options.snapshot;
    open_options.shared_writer = options.shared_writer;
    open_options.in_use_hint =
        options.shared_writer
            ? "that client writes alone: remount it -o shared to write beside it, or mount this "
              "one -o ro (a read-only follower)"
            : "mount this client -o ro (a read-only follower), or mount every writer -o shared "
              "(shared_writer in fstab and mount units: mount(8) keeps shared for itself; "
              "docs/scale-out.md, \"Several writers\")";
    // -o io=uring on a kernel that refuses io_uring: one line, no mount.
    if (options.io == store::io_mode::uring) store::make_batched_reader(store::io_mode::uring);
    auto s = store::store::open(options.store_dir, open_options);
    // Writers on several machines share payloads only through object
    // storage (a store's own packs are in its directory).
    if (options.shared_writer && !options.read_only && s->payload_location().empty())
      throw store::store_error(EINVAL,
                               "-o shared needs a volume whose records are in "
                               "PostgreSQL and whose packs are in object storage "
                               "(densefs mkfs --meta ... --data s3://...)");
    // With writeback_cache the kernel keeps its own size and mtime of every
    // regular file it has cached and never takes ours (fuse_get_cache_mask
    // in the kernel's fs/fuse): another client's writes would stay unseen,
    // and invalidating the inode does not change that (found by the
    // differential test on two writers).
    if (options.writeback_cache && (s->follows() || s->writes_beside_others()))
      throw store::store_error(EINVAL,
                               "-o writeback_cache cannot be used where other clients write "
                               "(-o shared, or -o ro of a volume in PostgreSQL): the kernel "
                               "would keep its own file sizes and never see their writes");
    // A volume in a shared database lists its mounts (`densefs status`).
    s->membership().begin(holder.mountpoint);
    register_store_handlers(control, *s);  // control socket
    fs.start(std::move(s));
    fs.register_control_handlers(control);  // control socket: "recompress"
  } catch (const std::exception& e) {
    log_error(std::string("cannot open store: ") + e.what());
    daemon.report(false);
    return 1;
  }
  try {
    control.start();  // control socket
  } catch (const std::exception& e) {
    log_error(std::string(e.what()) + " (densefs cat --encoding=br will not work on this mount)");
  }
  daemon.report(true);
  log_info("mounted " + options.store_dir.string() + " on " + options.mountpoint.string());
  if (metrics) {
    metrics->serve([&fs] { return fs.metrics_text(); },
                   [&fs] { return fs.refresh_metrics_totals(); });
    log_info("metrics for Prometheus on " + options.metrics_address + " (port " +
             std::to_string(metrics->port()) + "), at /metrics");
  }
  fs.watchdog().start(options.mountpoint, stall_probe_period(), k_stall_bound);

  int result;
  if (options.single_threaded) {
    result = fuse_session_loop(session.se);
  } else {
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 16);
    result = fuse_session_loop_mt(session.se, config);
    fuse_loop_cfg_destroy(config);
  }
  // The session is over: a new mount of this store waits for us now
  // instead of failing (lock_store).
  holder.exiting = true;
  record_holder();
  fs.watchdog().stop();
  fs.cancel_gc();                // a running `densefs gc` must not hold up the unmount
  control.stop();                // control socket: before the store closes
  if (metrics) metrics->stop();  // it reads the store too
  fs.shutdown();
  log_info("unmounted " + options.mountpoint.string());
  // Off the mount point (when SIGTERM ended the session it is still
  // mounted) before the lock goes: a mount waiting for the lock
  // (lock_store) may mount on the same path at once, and unmounting the
  // path after that would take its mount away instead.
  fuse_session_unmount(session.se);
  session.mounted = false;
  ::close(lock_fd);
  return result == 0 ? 0 : 1;
}

}  // namespace densefs::fs
