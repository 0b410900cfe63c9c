// Extended attributes, with the errno semantics rsync -X relies on, and the
// read-only virtual attributes that expose densefs internals
// (user.densefs.info, user.densefs.stats). The virtual ones are never
// listed, so rsync -X and cp --preserve=xattr do not copy them.
//
// POSIX ACLs are the two system.posix_acl_* xattrs, which the kernel reads
// for its permission checks and writes through setfacl, chmod aside: here
// they are checked, and kept in step with the mode (posix_acl.h). Any other
// system.* name is something densefs would store without enforcing:
// refused with EOPNOTSUPP, as ext4 does.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "fs/file_info.h"
#include "fs/filesystem.h"
#include "fs/mount.h"
#include "fs/ops_common.h"
#include "fs/posix_acl.h"

namespace densefs::fs {

namespace {

// The names a node keeps of its xattrs must stay exact (purge() deletes
// them without a scan): a commit changing them that throws may have been
// applied (a lost connection), so the names are forgotten then and loaded
// again when next needed.
class xattr_names_until_committed {
 public:
  explicit xattr_names_until_committed(node& n) : n_(n) {}
  ~xattr_names_until_committed() {
    if (!committed_) n_.xattr_names.reset();
  }
  xattr_names_until_committed(const xattr_names_until_committed&) = delete;
  xattr_names_until_committed& operator=(const xattr_names_until_committed&) = delete;
  void committed() { committed_ = true; }

 private:
  node& n_;
  bool committed_ = false;
};

bool is_virtual(std::string_view name) {
  return name == k_xattr_info || name == k_xattr_stats;
}

}  // namespace

// The caller's groups and CAP_FSETID, from /proc/TID/status (the request
// carries only the fsuid and fsgid). The kernel sends the caller's thread
// id in densefs's pid namespace; if it is not there (0) or the file cannot
// be read, the fsgid is all there is, and uid 0 counts as capable.
posix_acl::caller_credentials filesystem::caller_credentials(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  posix_acl::caller_credentials fallback;
  fallback.fsgid = ctx->gid;
  fallback.cap_fsetid = ctx->uid == 0;
  if (ctx->pid <= 0) return fallback;
  const std::string path = "/proc/" + std::to_string(ctx->pid) + "/status";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fallback;
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got <= 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > (1u << 20)) break;  // a status file is a few KiB
  }
  ::close(fd);
  auto parsed = posix_acl::parse_proc_status(text, ctx->gid);
  return parsed ? *parsed : fallback;
}

std::string filesystem::stats_json() const {
  auto j = nlohmann::json::parse(store::to_json(store_->stats()));
  auto& requests = j["requests"] = nlohmann::json::object();
  auto& seconds = j["request_seconds"] = nlohmann::json::object();
  for (const auto& kind : requests_.nonzero()) {
    requests[kind.name] = kind.count;
    seconds[kind.name] = static_cast<double>(kind.nanoseconds) / 1e9;
  }
  // Errors libfuse logged, among them failed io_uring ring commands.
  j["libfuse_errors"] = libfuse_error_count();
  // Probes of the mount left unanswered past their bound (fs/stall_watchdog.h).
  j["transport_stalls"] = watchdog_.stalls();
  j["transport_stalled"] = watchdog_.stalled();
  // Requests handled off the io_uring rings' threads (filesystem::hands_off).
  j["requests_off_ring"] = requests_off_ring_.load(std::memory_order_relaxed);
  // Inodes with a node in memory, and those the kernel remembers that are
  // parked (fs/inode_table.h).
  j["inodes"] = {{"in_memory", table_.resident()}, {"parked", table_.parked()}};
  // Where flock and fcntl locks are kept ("volume": in its database, seen
  // by every client; "kernel": this machine's), and requests waiting for
  // one (docs/scale-out.md, "Locks across clients").
  j["file_locks"] = {{"kept", serves_locks_ ? "volume" : "kernel"},
                     {"waiting", lock_waiters_ ? lock_waiters_->waiting() : 0}};
  // -o idle_spin: the time its threads spun (fs/idle_spinner.h).
  j["idle_spin_seconds"] = static_cast<double>(spinner_.spun_ns()) / 1e9;
  // What the read-ahead queued since mount (fs/read_ahead.h).
  if (read_ahead_) {
    j["read_ahead"] = {{"pieces", read_ahead_->pieces_queued()},
                       {"sibling_prefetches", read_ahead_->sibling_prefetches()},
                       {"listing_scans", read_ahead_->listing_scans()}};
  }
  return j.dump();
}

std::string filesystem::info_json(node& n, std::size_t max_chunk_list_bytes) {
  std::uint64_t pending = 0;
  {
    std::unique_lock lock(n.data_mutex);
    // How the file is stored once what was written before is stored
    // (write-behind): its chunks, not "pending". Errors stay for its close.
    if (n.regular) data_->flush_data(lock, n, false);
    for (const auto& [index, s] : n.slots) {
      if (s.dirty) pending += s.dirty->size();
      for (const auto& [gen, data] : s.in_flight) pending += data->size();
    }
  }
  // The record under the lock; the extent walk without it (store reads are
  // thread-safe), so `densefs info` on a file of a million chunks does not
  // hold up every other metadata operation of the mount. A commit landing
  // meanwhile shows as a mix of before and after, as with any concurrent
  // reader.
  store::inode_record record;
  {
    std::lock_guard meta(meta_mutex_);
    record = n.record;
  }
  store::extent_list extents;
  if (S_ISREG(record.mode))
    extents = store_->extents(n.ino, 0, std::numeric_limits<std::uint64_t>::max());
  const auto& snapshot = store_->opened_snapshot();
  return file_info_json(*store_, n.ino, record, extents, pending, max_chunk_list_bytes,
                        snapshot ? snapshot->name : std::string());
}

void filesystem::setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                          std::size_t size, int flags) {
  run_op(req, "setxattr", [&] {
    if (is_virtual(name)) throw fs_error(EPERM);
    if (std::strlen(name) > 255) throw fs_error(ERANGE);
    if (size > 65536) throw fs_error(E2BIG);
    if (is_unsupported_system(name)) throw fs_error(EOPNOTSUPP);
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    auto n = get_node(ino);
    if (is_posix_acl(name)) {
      set_posix_acl(req, *n, name, {value, size}, flags);
      return;
    }
    store::inode_record r;
    store::transaction txn;
    xattr_names_until_committed names(*n);
    commit(txn, false, [&](store::transaction& txn) {
      const bool exists = store_->get_xattr(n->ino, name).has_value();
      if ((flags & XATTR_CREATE) && exists) throw fs_error(EEXIST);
      if ((flags & XATTR_REPLACE) && !exists) throw fs_error(ENODATA);
      r = record_to_edit(*n);
      r.ctime = now();
      txn.put_xattr(n->ino, name, {value, size});
      txn.put_inode(persistable(*n, r));
    });
    names.committed();
    keep_record(*n, r);
    if (n->xattr_names) n->xattr_names->insert(name);
    fuse_reply_err(req, 0);
  });
}

void filesystem::getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size) {
  run_op(req, "getxattr", [&] {
    if (std::strcmp(name, k_xattr_stats) == 0) {
      // What the store holds once what was written before is in it:
      // write-behind must not make `densefs stats` after a copy lag.
      sync_all(nullptr);
      reply_value(req, stats_value(size == 0), size);
      return;
    }
    std::shared_ptr<node> n;
    {
      std::lock_guard meta(meta_mutex_);
      n = get_node(ino);
    }
    if (std::strcmp(name, k_xattr_info) == 0) {
      reply_value(req, info_json(*n, k_info_xattr_chunk_list_bytes), size);
      return;
    }
    if (is_unsupported_system(name)) throw fs_error(EOPNOTSUPP);
    std::optional<std::string> value;
    {
      std::lock_guard meta(meta_mutex_);
      value = stored_xattr(*n, name);
    }
    if (!value) throw fs_error(ENODATA);
    reply_value(req, *value, size);
  });
}

// The stats change with every request (their counts and times), so a size
// query and the read after it would see values of different lengths: the
// read could get ERANGE or a size query's answer not match (getfattr and
// `densefs stats` ask for the size first). The value a size query was
// answered with is kept for the read that follows it.
std::string filesystem::stats_value(bool size_query) {
  std::lock_guard lock(stats_snapshot_mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!size_query && stats_snapshot_ && now - stats_snapshot_time_ < std::chrono::seconds(5))
    return *std::exchange(stats_snapshot_, std::nullopt);
  std::string value = stats_json();
  if (size_query) {
    stats_snapshot_ = value;
    stats_snapshot_time_ = now;
  }
  return value;
}

void filesystem::listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size) {
  run_op(req, "listxattr", [&] {
    std::string list;
    {
      std::lock_guard meta(meta_mutex_);
      auto n = get_node(ino);
      for (const auto& name : store_->list_xattrs(n->ino)) {
        // Stored before densefs refused them (see is_unsupported_system):
        // kept, but not offered to copy.
        if (is_unsupported_system(name)) continue;
        list += name;
        list += '\0';
      }
    }
    reply_value(req, list, size);
  });
}

void filesystem::removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  run_op(req, "removexattr", [&] {
    if (is_virtual(name)) throw fs_error(EPERM);
    if (is_unsupported_system(name)) throw fs_error(EOPNOTSUPP);
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    auto n = get_node(ino);
    store::inode_record r;
    store::transaction txn;
    xattr_names_until_committed names(*n);
    commit(txn, false, [&](store::transaction& txn) {
      // Removing the access ACL leaves the mode as it is, as on ext4.
      if (!store_->get_xattr(n->ino, name)) throw fs_error(ENODATA);
      r = record_to_edit(*n);
      r.ctime = now();
      txn.delete_xattr(n->ino, name);
      txn.put_inode(persistable(*n, r));
    });
    names.committed();
    keep_record(*n, r);
    if (n->xattr_names) n->xattr_names->erase(name);
    fuse_reply_err(req, 0);
  });
}

std::optional<std::string> filesystem::stored_xattr(node& n, std::string_view name) {
  // The kernel asks for system.posix_acl_access once per inode it checks a
  // non-owner's access to (it caches the answer): one point read, which the
  // bloom filter answers for most inodes (they have none). A walk as
  // another user costs one such read per file, not a listing.
  if (!n.xattr_names && is_posix_acl(name)) return store_->get_xattr(n.ino, name);
  // It asks for security.capability before every write: the in-memory
  // name set answers "none" without touching the store.
  if (!n.xattr_names) {
    auto names = store_->list_xattrs(n.ino);
    n.xattr_names.emplace(names.begin(), names.end());
  }
  if (!n.xattr_names->count(std::string(name))) return std::nullopt;
  return store_->get_xattr(n.ino, name);
}

// What the kernel's set_posix_acl leaves to the file system (fs/posix_acl.c,
// fs/fuse/acl.c): the kernel has checked that the caller owns the inode and
// re-encoded the ACL, and drops its cached ACL and attributes after the
// reply. The mode follows the access ACL, and an ACL the mode says in full
// is not stored (posix_acl_update_mode), as on ext4.
void filesystem::set_posix_acl(fuse_req_t req, node& n, std::string_view name,
                               std::string_view value, int flags) {
  if (!posix_acl_ || S_ISLNK(n.record.mode)) throw fs_error(EOPNOTSUPP);
  const bool access = name == posix_acl::k_access_name;
  // Only directories have a default ACL (the kernel checks this too).
  if (!access && !S_ISDIR(n.record.mode)) throw fs_error(EACCES);
  const auto acl = posix_acl::parse(value);
  if (!acl) throw fs_error(EINVAL);
  store::inode_record r;
  bool keep = true;
  store::transaction txn;
  xattr_names_until_committed names(n);
  commit(txn, false, [&](store::transaction& txn) {
    const bool exists = shares_volume() ? store_->get_xattr(n.ino, name).has_value()
                                        : stored_xattr(n, name).has_value();
    if ((flags & XATTR_CREATE) && exists) throw fs_error(EEXIST);
    if ((flags & XATTR_REPLACE) && !exists) throw fs_error(ENODATA);
    r = record_to_edit(n);
    r.ctime = now();
    keep = true;
    if (access) {
      mode_t mode = r.mode;
      keep = !posix_acl::equivalent_mode(*acl, mode);
      // The kernel's FUSE_SETXATTR_ACL_KILL_SGID says this, but libfuse
      // 3.14 does not pass it on (no FUSE_CAP_SETXATTR_EXT): the same rule,
      // asked of the caller directly.
      if ((mode & S_ISGID) && !caller_credentials(req).in_group_or_capable(r.gid)) mode &= ~S_ISGID;
      r.mode = static_cast<std::uint32_t>(mode);
    }
    if (keep)
      txn.put_xattr(n.ino, name, posix_acl::serialize(*acl));
    else if (exists)
      txn.delete_xattr(n.ino, name);
    txn.put_inode(persistable(n, r));
  });
  names.committed();
  keep_record(n, r);
  if (n.xattr_names) {
    if (keep)
      n.xattr_names->insert(std::string(name));
    else
      n.xattr_names->erase(std::string(name));
  }
  fuse_reply_err(req, 0);
}

filesystem::new_inode_acls filesystem::acls_for_new_inode(fuse_req_t req, node& parent,
                                                          mode_t mode) {
  new_inode_acls result{mode, std::nullopt, std::nullopt};
  // Without FUSE_CAP_DONT_MASK the kernel applied the umask already; a
  // symlink has neither ACLs nor a umask (posix_acl_create).
  if (!posix_acl_ || S_ISLNK(mode)) return result;
  std::optional<posix_acl::acl> inherited;
  const auto stored = stored_xattr(parent, posix_acl::k_default_name);
  if (stored) inherited = posix_acl::parse(*stored);
  if (!inherited) {
    result.mode &= ~(fuse_req_ctx(req)->umask & 0777);
    return result;
  }
  // The umask does not apply: the default ACL takes its place.
  if (auto access = posix_acl::inherit(*inherited, result.mode))
    result.access = posix_acl::serialize(*access);
  if (S_ISDIR(mode)) result.default_acl = *stored;
  return result;
}

void filesystem::chmod_access_acl(node& n, mode_t mode, store::transaction& txn) {
  if (!posix_acl_ || S_ISLNK(n.record.mode)) return;
  // Beside other writers the cached names may miss an ACL another set.
  const auto stored = shares_volume() ? store_->get_xattr(n.ino, posix_acl::k_access_name)
                                      : stored_xattr(n, posix_acl::k_access_name);
  if (!stored) return;
  auto acl = posix_acl::parse(*stored);
  if (!acl) return;  // never stored so; left for fsck rather than guessed at
  posix_acl::apply_chmod(*acl, mode);
  txn.put_xattr(n.ino, posix_acl::k_access_name, posix_acl::serialize(*acl));
}

}  // namespace densefs::fs
