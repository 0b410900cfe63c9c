#include "fs/snapshot_tree.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "fs/committed_bytes.h"
#include "fs/file_info.h"
#include "fs/fs_error.h"
#include "fs/ops_common.h"

namespace densefs::fs {
namespace {

constexpr unsigned k_id_shift = 40;
constexpr std::uint64_t k_max_ino = (std::uint64_t{1} << k_id_shift) - 1;
constexpr std::uint64_t k_max_id = (std::uint64_t{1} << (63 - k_id_shift)) - 1;
// How long the kernel keeps `.snapshots` and the names in it, and how long
// a snapshot found alive is believed to be: another client of a shared
// volume may delete one.
constexpr double k_snapshot_names_timeout = 1.0;
constexpr auto k_alive_for = std::chrono::seconds(1);
// Listings of a snapshot's directories kept (their entries, in all).
constexpr std::size_t k_listed_entries = 1 << 20;
constexpr std::uint64_t k_dot_cookie = 1;
constexpr std::uint64_t k_dotdot_cookie = 2;
constexpr std::uint64_t k_first_cookie = 3;

// The xattrs a snapshot's file shows besides its own (ops_xattr.cpp has
// the live ones).
bool is_info(const char* name) {
  return std::strcmp(name, k_xattr_info) == 0;
}

}  // namespace

bool snapshot_tree::names_dir(fuse_ino_t parent, const char* name) {
  return parent == FUSE_ROOT_ID && std::strcmp(name, k_dir_name) == 0;
}

snapshot_tree::snapshot_tree(const store::store& live, const mount_options& options)
    : live_(live), options_(options) {}

fuse_ino_t snapshot_tree::outer_ino(std::uint64_t id, std::uint64_t ino) {
  return k_dir_ino | (id << k_id_shift) | ino;
}

bool snapshot_tree::numberable(const store::snapshot_record& r) {
  return r.id >= 1 && r.id <= k_max_id && r.next_ino <= k_max_ino + 1;
}

std::uint64_t snapshot_tree::closes() {
  std::lock_guard lock(mutex_);
  return closes_;
}

std::optional<snapshot_tree::known_snapshot> snapshot_tree::remember(
    const store::snapshot_record& r, std::uint64_t closes_before,
    std::chrono::steady_clock::time_point read_at) {
  known_snapshot k{live_.read_snapshot(r), read_at};
  std::lock_guard lock(mutex_);
  // Closing now, or closed since the registry was read: it may be gone.
  if (closing_.contains(r.name)) return std::nullopt;
  if (const auto it = last_close_.find(r.name);
      it != last_close_.end() && it->second > closes_before)
    return std::nullopt;
  // One reader and gate per snapshot, whoever made it first.
  const auto [it, added] = snapshots_.try_emplace(r.id, std::move(k));
  return it->second;
}

std::optional<snapshot_tree::known_snapshot> snapshot_tree::snapshot_by_id(std::uint64_t id) {
  std::optional<known_snapshot> known;
  std::uint64_t closes_before = 0;
  {
    std::lock_guard lock(mutex_);
    closes_before = closes_;
    if (const auto it = snapshots_.find(id); it != snapshots_.end()) {
      if (closing_.contains(it->second.reader->record().name)) return std::nullopt;
      if (std::chrono::steady_clock::now() - it->second.checked < k_alive_for) return it->second;
      known = it->second;
    }
  }
  const auto read_at = std::chrono::steady_clock::now();
  if (known) {
    // The check is a store read: never under the mutex.
    const bool alive = known->reader->alive();
    std::lock_guard lock(mutex_);
    const auto it = snapshots_.find(id);
    if (it == snapshots_.end() || it->second.gate != known->gate ||
        closing_.contains(it->second.reader->record().name))
      return std::nullopt;
    if (!alive) {
      snapshots_.erase(it);
      return std::nullopt;
    }
    it->second.checked = read_at;
    return it->second;
  }
  for (const store::snapshot_record& r : live_.snapshots())
    if (r.id == id && r.state == store::snapshot_state::live && numberable(r))
      return remember(r, closes_before, read_at);
  return std::nullopt;
}

std::optional<snapshot_tree::known_snapshot> snapshot_tree::snapshot_by_name(
    const std::string& name) {
  const std::uint64_t closes_before = closes();
  const auto read_at = std::chrono::steady_clock::now();
  for (const store::snapshot_record& r : live_.snapshots()) {
    if (r.name != name) continue;
    if (r.state != store::snapshot_state::live || !numberable(r)) return std::nullopt;
    return remember(r, closes_before, read_at);
  }
  return std::nullopt;
}

std::optional<snapshot_tree::place> snapshot_tree::enter(known_snapshot k, std::uint64_t ino) {
  const std::uint64_t id = k.reader->record().id;
  place p;
  p.snapshot = std::move(k.reader);
  p.ino = ino;
  p.gate = std::move(k.gate);
  p.in_use = std::shared_lock(*p.gate);
  // A close_snapshot between finding it and the hold did not wait for us.
  std::lock_guard lock(mutex_);
  const auto it = snapshots_.find(id);
  if (it == snapshots_.end() || it->second.gate != p.gate ||
      closing_.contains(p.snapshot->record().name))
    return std::nullopt;
  return p;
}

snapshot_tree::place snapshot_tree::resolve(fuse_ino_t ino) {
  const std::uint64_t id = (ino >> k_id_shift) & k_max_id;
  auto known = id == 0 ? std::nullopt : snapshot_by_id(id);
  if (!known) throw fs_error(ESTALE);
  auto p = enter(std::move(*known), ino & k_max_ino);
  if (!p) throw fs_error(ESTALE);
  return std::move(*p);
}

void snapshot_tree::close_snapshot(const std::string& name) {
  std::vector<std::shared_ptr<std::shared_mutex>> gates;
  {
    std::lock_guard lock(mutex_);
    last_close_[name] = ++closes_;
    closing_.insert(name);
    for (auto& [id, k] : snapshots_) {
      if (k.reader->record().name != name) continue;
      gates.push_back(k.gate);
    }
  }
  for (const auto& gate : gates) std::unique_lock wait_for_readers(*gate);
}

struct stat snapshot_tree::dir_stat(const std::vector<store::snapshot_record>& all) const {
  struct stat st {};
  st.st_ino = k_dir_ino;
  st.st_mode = S_IFDIR | 0555;
  st.st_nlink = 2;
  if (const auto root = live_.get_inode(store::k_root_ino)) {
    st.st_uid = root->uid;
    st.st_gid = root->gid;
  }
  // The newest snapshot's time, its nanoseconds made of the newest id and
  // the count: the directory looks changed after any create or delete
  // (the kernel then drops the listing it cached).
  std::int64_t newest = 0;
  std::uint64_t newest_id = 0;
  for (const auto& r : all) {
    newest = std::max(newest, r.created);
    newest_id = std::max(newest_id, r.id);
  }
  st.st_mtim = {static_cast<time_t>(newest),
                static_cast<long>((newest_id % 1000000) * 1000 + all.size() % 1000)};
  st.st_ctim = st.st_mtim;
  st.st_atim = st.st_mtim;
  st.st_blksize = 4096;
  return st;
}

struct stat snapshot_tree::to_stat(std::uint64_t id, const store::inode_record& r) const {
  struct stat st = file_stat(r);
  st.st_ino = outer_ino(id, r.ino);
  return st;
}

fuse_entry_param snapshot_tree::entry(std::uint64_t id, const store::inode_record& r) const {
  fuse_entry_param e{};
  e.ino = outer_ino(id, r.ino);
  e.attr = to_stat(id, r);
  const bool snapshot_root = r.ino == store::k_root_ino;
  e.attr_timeout = snapshot_root ? k_snapshot_names_timeout : options_.attr_timeout;
  e.entry_timeout = snapshot_root ? k_snapshot_names_timeout : options_.entry_timeout;
  return e;
}

void snapshot_tree::reply_dir_entry(fuse_req_t req) {
  run_op(req, "lookup", [&] {
    fuse_entry_param e{};
    e.ino = k_dir_ino;
    e.attr = dir_stat(live_.snapshots());
    e.attr_timeout = k_snapshot_names_timeout;
    e.entry_timeout = options_.entry_timeout;
    fuse_reply_entry(req, &e);
  });
}

void snapshot_tree::lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  run_op(req, "lookup", [&] {
    // "." and ".." come for file handles only (filesystem::lookup); the
    // ".." of `.snapshots` is the live root's (fs/mount.cpp).
    const bool dot = std::strcmp(name, ".") == 0;
    if (parent == k_dir_ino && dot) {
      reply_dir_entry(req);
      return;
    }
    if (parent == k_dir_ino) {
      // No negative entry: a snapshot may be taken any time.
      auto known = snapshot_by_name(name);
      if (!known) throw fs_error(ENOENT);
      const std::uint64_t id = known->reader->record().id;
      const auto p = enter(std::move(*known), store::k_root_ino);
      if (!p) throw fs_error(ENOENT);
      const auto root = p->snapshot->get_inode(store::k_root_ino);
      if (!root) throw fs_error(EIO);
      const fuse_entry_param e = entry(id, *root);
      fuse_reply_entry(req, &e);
      return;
    }
    const place p = resolve(parent);
    const std::uint64_t id = p.snapshot->record().id;
    if (dot || std::strcmp(name, "..") == 0) {
      const auto self = p.snapshot->get_inode(p.ino);
      if (!self) throw fs_error(ESTALE);
      if (dot) {
        const fuse_entry_param e = entry(id, *self);
        fuse_reply_entry(req, &e);
        return;
      }
      if (!S_ISDIR(self->mode)) throw fs_error(ENOTDIR);
      if (p.ino == store::k_root_ino) {
        reply_dir_entry(req);
        return;
      }
      const auto up = p.snapshot->get_inode(self->parent);
      if (!up) throw fs_error(ESTALE);
      const fuse_entry_param e = entry(id, *up);
      fuse_reply_entry(req, &e);
      return;
    }
    const auto d = p.snapshot->get_dirent(p.ino, name);
    std::optional<store::inode_record> child;
    if (d && d->ino <= k_max_ino) child = p.snapshot->get_inode(d->ino);
    if (!child) {
      // A snapshot never changes: "no such name" holds as long as it lives.
      if (options_.negative_timeout <= 0) throw fs_error(ENOENT);
      fuse_entry_param e{};
      e.entry_timeout = options_.negative_timeout;
      fuse_reply_entry(req, &e);
      return;
    }
    const fuse_entry_param e = entry(id, *child);
    fuse_reply_entry(req, &e);
  });
}

void snapshot_tree::getattr(fuse_req_t req, fuse_ino_t ino) {
  run_op(req, "getattr", [&] {
    if (ino == k_dir_ino) {
      const struct stat st = dir_stat(live_.snapshots());
      fuse_reply_attr(req, &st, k_snapshot_names_timeout);
      return;
    }
    const place p = resolve(ino);
    const auto r = p.snapshot->get_inode(p.ino);
    if (!r) throw fs_error(ESTALE);
    const fuse_entry_param e = entry(p.snapshot->record().id, *r);
    fuse_reply_attr(req, &e.attr, e.attr_timeout);
  });
}

void snapshot_tree::readlink(fuse_req_t req, fuse_ino_t ino) {
  run_op(req, "readlink", [&] {
    if (ino == k_dir_ino) throw fs_error(EINVAL);
    const place p = resolve(ino);
    const auto r = p.snapshot->get_inode(p.ino);
    if (!r) throw fs_error(ESTALE);
    if (!S_ISLNK(r->mode)) throw fs_error(EINVAL);
    fuse_reply_readlink(req, r->symlink_target.c_str());
  });
}

void snapshot_tree::open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  run_op(req, "open", [&] {
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) throw fs_error(EROFS);
    if (ino == k_dir_ino) throw fs_error(EISDIR);
    const place p = resolve(ino);
    const auto r = p.snapshot->get_inode(p.ino);
    if (!r) throw fs_error(ESTALE);
    fi->fh = 0;
    fi->keep_cache = 1;  // its bytes never change
    fuse_reply_open(req, fi);
  });
}

void snapshot_tree::read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off) {
  run_op(req, "read", [&] {
    if (ino == k_dir_ino || off < 0) throw fs_error(EINVAL);
    const place p = resolve(ino);
    const auto r = p.snapshot->get_inode(p.ino);
    if (!r) throw fs_error(ESTALE);
    if (!S_ISREG(r->mode)) throw fs_error(EISDIR);
    const auto begin = static_cast<std::uint64_t>(off);
    if (begin >= r->size) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    const std::size_t length =
        static_cast<std::size_t>(std::min<std::uint64_t>(size, r->size - begin));
    std::vector<char> bytes(length);
    read_committed(*p.snapshot, p.ino, begin, length, bytes.data());
    fuse_reply_buf(req, bytes.data(), length);
  });
}

void snapshot_tree::opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  run_op(req, "opendir", [&] {
    if (ino != k_dir_ino) resolve(ino);
    fi->fh = 0;
    // A snapshot's listings never change; that of `.snapshots` does. (A
    // kernel that opens directories without asking, after the live
    // opendir's ENOSYS, caches every listing: `.snapshots` then counts on
    // its mtime, dir_stat, and on snapshots_changed.)
    fi->cache_readdir = ino != k_dir_ino;
    fi->keep_cache = ino != k_dir_ino;
    fuse_reply_open(req, fi);
  });
}

snapshot_tree::listing snapshot_tree::snapshots_listing() {
  // In the order of their ids, each its id as its cookie: ids are never
  // used again, so a snapshot taken or deleted between two reads of one
  // listing moves no other name (one is neither skipped nor listed twice).
  listing out;
  for (const store::snapshot_record& r : live_.snapshots())
    if (r.state == store::snapshot_state::live && numberable(r))
      out.push_back({r.name, outer_ino(r.id, store::k_root_ino), S_IFDIR, k_first_cookie + r.id});
  std::sort(out.begin(), out.end(),
            [](const listed& a, const listed& b) { return a.cookie < b.cookie; });
  return out;
}

std::shared_ptr<const snapshot_tree::listing> snapshot_tree::listing_of(fuse_ino_t ino,
                                                                        const place& p) {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = listings_.find(ino); it != listings_.end()) return it->second;
  }
  auto all = std::make_shared<listing>();
  const std::uint64_t id = p.snapshot->record().id;
  p.snapshot->list_dir(
      p.ino, std::nullopt, [&](std::string_view name, const store::dirent_record& d) {
        if (d.ino <= k_max_ino)
          all->push_back(
              {std::string(name), outer_ino(id, d.ino), d.type, k_first_cookie + all->size()});
        return true;
      });
  std::lock_guard lock(mutex_);
  if (listed_entries_ + all->size() > k_listed_entries) {
    listings_.clear();
    listed_entries_ = 0;
  }
  const auto [it, added] = listings_.try_emplace(ino, all);
  if (added) listed_entries_ += all->size();
  return it->second;
}

void snapshot_tree::readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                            bool plus) {
  run_op(req, plus ? "readdirplus" : "readdir", [&] {
    std::shared_ptr<const listing> all;
    fuse_ino_t dotdot = FUSE_ROOT_ID;
    std::optional<place> p;
    if (ino == k_dir_ino) {
      all = std::make_shared<const listing>(snapshots_listing());
    } else {
      p = resolve(ino);
      const auto r = p->snapshot->get_inode(p->ino);
      if (!r) throw fs_error(ESTALE);
      if (!S_ISDIR(r->mode)) throw fs_error(ENOTDIR);
      dotdot =
          p->ino == store::k_root_ino ? k_dir_ino : outer_ino(p->snapshot->record().id, r->parent);
      all = listing_of(ino, *p);
    }
    std::vector<char> buffer(size);
    std::size_t used = 0;
    // Adds one entry; false when the buffer is full.
    const auto add = [&](const char* name, fuse_ino_t child, std::uint32_t type,
                         std::uint64_t cookie) {
      std::size_t needed = 0;
      if (plus) {
        // Node id 0: a name and type only, nothing the kernel keeps as
        // looked up ("." and "..", and the snapshots in `.snapshots`).
        fuse_entry_param e{};
        e.attr.st_ino = child;
        e.attr.st_mode = type;
        const bool dot = name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0));
        if (!dot && p) {
          const auto r = p->snapshot->get_inode(child & k_max_ino);
          if (!r) return true;  // not there: left out
          e = entry(p->snapshot->record().id, *r);
        }
        needed = fuse_add_direntry_plus(req, buffer.data() + used, size - used, name, &e,
                                        static_cast<off_t>(cookie));
      } else {
        struct stat st {};
        st.st_ino = child;
        st.st_mode = type;
        needed = fuse_add_direntry(req, buffer.data() + used, size - used, name, &st,
                                   static_cast<off_t>(cookie));
      }
      if (needed > size - used) return false;
      used += needed;
      return true;
    };
    const auto start = off < 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(off);
    bool room = true;
    if (start < k_dot_cookie) room = add(".", ino, S_IFDIR, k_dot_cookie);
    if (room && start < k_dotdot_cookie) room = add("..", dotdot, S_IFDIR, k_dotdot_cookie);
    auto it = std::upper_bound(all->begin(), all->end(), start,
                               [](std::uint64_t c, const listed& l) { return c < l.cookie; });
    for (; room && it != all->end(); ++it)
      room = add(it->name.c_str(), it->ino, it->type, it->cookie);
    if (used == 0 && room == false) throw fs_error(EINVAL);  // buffer too small for one
    fuse_reply_buf(req, buffer.data(), used);
  });
}

void snapshot_tree::getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size) {
  run_op(req, "getxattr", [&] {
    if (ino == k_dir_ino) throw fs_error(ENODATA);
    const place p = resolve(ino);
    if (is_info(name)) {
      const auto r = p.snapshot->get_inode(p.ino);
      if (!r) throw fs_error(ESTALE);
      store::extent_list extents;
      if (S_ISREG(r->mode))
        extents = p.snapshot->extents(p.ino, 0, std::numeric_limits<std::uint64_t>::max());
      std::string info = file_info_json(live_, ino, *r, extents, 0, k_info_xattr_chunk_list_bytes,
                                        p.snapshot->record().name);
      reply_value(req, info, size);
      return;
    }
    if (is_unsupported_system(name)) throw fs_error(EOPNOTSUPP);  // as the live getxattr
    const auto value = p.snapshot->get_xattr(p.ino, name);
    if (!value) throw fs_error(ENODATA);
    reply_value(req, *value, size);
  });
}

void snapshot_tree::listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size) {
  run_op(req, "listxattr", [&] {
    std::string list;
    if (ino != k_dir_ino) {
      const place p = resolve(ino);
      for (const auto& name : p.snapshot->list_xattrs(p.ino)) {
        if (is_unsupported_system(name)) continue;  // as the live listxattr
        list += name;
        list += '\0';
      }
    }
    reply_value(req, list, size);
  });
}

void snapshot_tree::snapshots_changed(fuse_session* session, const std::string& name) {
  {
    std::lock_guard lock(mutex_);
    closing_.erase(name);
    for (auto it = snapshots_.begin(); it != snapshots_.end();) {
      if (it->second.reader->record().name != name) {
        ++it;
        continue;
      }
      // Its listings go with it (their inode numbers carry its id).
      const fuse_ino_t first = outer_ino(it->first, 0);
      const fuse_ino_t last = outer_ino(it->first, k_max_ino);
      for (auto l = listings_.lower_bound(first); l != listings_.end() && l->first <= last;) {
        listed_entries_ -= l->second->size();
        l = listings_.erase(l);
      }
      it = snapshots_.erase(it);
    }
  }
  if (!session) return;
  // Not known to the kernel (ENOENT) is fine: nothing to drop.
  fuse_lowlevel_notify_inval_entry(session, k_dir_ino, name.data(), name.size());
  fuse_lowlevel_notify_inval_inode(session, k_dir_ino, 0, 0);
}

}  // namespace densefs::fs
