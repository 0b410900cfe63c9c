// The namespace: mknod, mkdir, symlink, readlink, unlink, rmdir, rename,
// link, and directory listing.
#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "fs/filesystem.h"
#include "fs/ops_common.h"
#include "fs/posix_acl.h"
#include "store/hash.h"

namespace densefs::fs {

void filesystem::check_name(const char* name) const {
  const std::size_t length = std::strlen(name);
  if (length > 255) throw fs_error(ENAMETOOLONG);
  if (length == 0) throw fs_error(ENOENT);
}

bool filesystem::defers_names() const {
  // settle_committer_: it stores what nothing else took (null at unmount).
  return settle_committer_.load() != nullptr && !options_.read_only && !store_->read_only() &&
         !shares_volume() && !store_->membership().others_mounted();
}

std::optional<store::dirent_record> filesystem::entry_at(std::uint64_t parent,
                                                         std::string_view name) {
  if (auto put_off = deferred_.find(parent, name)) return *put_off;
  return store_->get_dirent(parent, name);
}

void filesystem::commit_deferred_locked() {
  if (deferred_.empty()) return;
  store::transaction txn;
  // Readers see the names put off until this has applied (lookup,
  // entry_at), and their nodes stay in the table: they may pass the round
  // trip. Every caller calls this before it reads anything.
  commit(txn, false, {}, nullptr, while_committing::readers_pass);  // adds them
}

void filesystem::commit_deferred() {
  std::lock_guard meta(meta_mutex_);
  commit_deferred_locked();
}

void filesystem::settle_deferred_soon() {
  if (write_back* committer = settle_committer_.load()) committer->settle_soon();
}

// Creates an inode and its directory entry in one commit, or puts both off
// until the next commit (a new file, a directory, a symlink, a special
// file; deferred_names.h).
// Caller holds meta_mutex_.
std::shared_ptr<node> filesystem::make_node(fuse_req_t req, node& parent, const char* name,
                                            mode_t mode, dev_t rdev,
                                            std::string_view symlink_target, bool new_file) {
  if (!S_ISDIR(parent.record.mode)) throw fs_error(ENOTDIR);
  if (options_.read_only) throw fs_error(EROFS);
  // Alone, the checks hold until the commit (meta_mutex_); beside other
  // writers they are made again in it (fill).
  if (parent.record.nlink == 0) throw fs_error(ENOENT);  // removed directory
  if (!shares_volume() && entry_at(parent.ino, name)) throw fs_error(EEXIST);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const store::timestamp t = now();

  // The parent's default ACL, or else the umask, narrows the mode.
  const new_inode_acls acls = acls_for_new_inode(req, parent, mode);

  store::inode_record r;
  r.ino = store_->allocate_ino();
  r.mode = acls.mode;
  r.uid = ctx->uid;
  r.gid = ctx->gid;
  // BSD group semantics under a set-group-ID directory, as ext4 does
  // (inode_init_owner): a directory inherits the bit; a group-executable
  // setgid file from someone outside the group, without CAP_FSETID, loses
  // it. Kernels since 6.0 strip that bit before the request is sent
  // (mode_strip_sgid), older ones leave it to the file system.
  if (parent.record.mode & S_ISGID) {
    r.gid = parent.record.gid;
    constexpr mode_t k_sgid_exec = S_ISGID | S_IXGRP;
    if (S_ISDIR(mode))
      r.mode |= S_ISGID;
    else if ((r.mode & k_sgid_exec) == k_sgid_exec &&
             !caller_credentials(req).in_group_or_capable(r.gid))
      r.mode &= ~S_ISGID;
  }
  r.nlink = S_ISDIR(mode) ? 2 : 1;
  r.rdev = rdev;
  r.parent = S_ISDIR(mode) ? parent.ino : 0;
  r.symlink_target = std::string(symlink_target);
  r.size = symlink_target.size();
  r.atime = r.mtime = r.ctime = r.btime = t;
  // The name is all there is to go on until the first bytes arrive (and the
  // only hint for text formats that have no magic number).
  if (S_ISREG(mode)) r.type = codec::classify({}, name);

  new_file = new_file && S_ISREG(mode);
  // Put off: a new file, a directory, a symlink or a special file, without
  // ACLs to write (the rare inherited default ACL commits at once, as
  // before). A directory put off holds nothing the store has: whatever
  // lands in it commits it first.
  const std::shared_ptr<node> held_parent = table_.find(parent.ino);
  const bool put_off = (new_file || !S_ISREG(mode)) && !acls.access && !acls.default_acl &&
                       held_parent && defers_names();
  store::inode_record p;
  if (put_off) {
    p = parent.record;
    p.mtime = p.ctime = t;
    if (S_ISDIR(mode)) ++p.nlink;
  } else {
    store::transaction txn;
    // Readers may pass its round trip (alone; filesystem::commit): what it
    // writes is a name in `parent`, which the kernel keeps every other
    // request from reading until this replies (it holds the directory's
    // lock), an inode no one knows the number of yet, and the parent's
    // record, which readers take from its node in the table (none is
    // loaded from the store meanwhile), changed after.
    const auto others =
        held_parent.get() == &parent ? while_committing::readers_pass : while_committing::all_wait;
    commit(
        txn, false,
        [&](store::transaction& txn) {
          if (shares_volume()) {
            if (store_->get_dirent(parent.ino, name)) throw fs_error(EEXIST);
            p = record_to_edit(parent);
            if (p.nlink == 0) throw fs_error(ENOENT);
          } else {
            p = parent.record;
          }
          p.mtime = p.ctime = t;
          if (S_ISDIR(mode)) ++p.nlink;
          txn.put_inode(r);
          txn.made_inode(r.ino, S_ISDIR(mode));
          if (acls.access) txn.put_xattr(r.ino, posix_acl::k_access_name, *acls.access);
          if (acls.default_acl) txn.put_xattr(r.ino, posix_acl::k_default_name, *acls.default_acl);
          txn.put_dirent(parent.ino, name, {r.ino, r.mode & S_IFMT});
          txn.put_inode(persistable(parent, p));
          if (new_file)
            txn.mark_new_file(r.ino, parent.ino, name,
                              shares_volume() ? store_->membership().session_id() : "");
        },
        nullptr, others);
  }
  entries_changed(parent);
  keep_record(parent, p);
  auto n = std::make_shared<node>(r);
  n->persisted_size = r.size;
  n->name_type = r.type;
  n->xattr_names.emplace();  // a new inode has none but its ACLs
  if (acls.access) n->xattr_names->emplace(posix_acl::k_access_name);
  if (acls.default_acl) n->xattr_names->emplace(posix_acl::k_default_name);
  n->new_file = new_file;
  n->created = std::chrono::steady_clock::now();
  n = table_.insert(std::move(n));
  if (put_off) {
    if (S_ISDIR(mode))
      store_->has_no_entries_yet(r.ino);  // lookups in it then read nothing
    else if (S_ISREG(mode))
      store_->has_no_extents_yet(r.ino);  // its group commit then reads none
    deferred_.put_entry(parent.ino, name, {r.ino, r.mode & S_IFMT});
    deferred_.store_record(n, true);
    if (new_file) deferred_.name_new_file(r.ino, parent.ino, name);
    deferred_.store_record(held_parent);
    settle_deferred_soon();
  }
  return n;
}

void filesystem::mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                       dev_t rdev) {
  run_op(req, "mknod", [&] {
    check_name(name);
    const mode_t type = mode & S_IFMT;
    if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR &&
        type != S_IFBLK)
      throw fs_error(EINVAL);
    std::lock_guard meta(meta_mutex_);
    auto p = get_node(parent);
    reply_entry(req, make_node(req, *p, name, type | (mode & 07777), rdev, {}));
  });
}

void filesystem::mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  run_op(req, "mkdir", [&] {
    check_name(name);
    std::lock_guard meta(meta_mutex_);
    auto p = get_node(parent);
    reply_entry(req, make_node(req, *p, name, S_IFDIR | (mode & 07777), 0, {}));
  });
}

void filesystem::symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  run_op(req, "symlink", [&] {
    check_name(name);
    const std::size_t length = std::strlen(target);
    if (length == 0) throw fs_error(ENOENT);
    if (length >= 4096) throw fs_error(ENAMETOOLONG);
    std::lock_guard meta(meta_mutex_);
    auto p = get_node(parent);
    reply_entry(req, make_node(req, *p, name, S_IFLNK | 0777, 0, {target, length}));
  });
}

void filesystem::readlink(fuse_req_t req, fuse_ino_t ino) {
  run_op(req, "readlink", [&] {
    std::lock_guard meta(meta_mutex_.reading());
    auto n = get_node(ino);
    if (!S_ISLNK(n->record.mode)) throw fs_error(EINVAL);
    fuse_reply_readlink(req, n->record.symlink_target.c_str());
  });
}

void filesystem::unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  run_op(req, "unlink", [&] {
    check_name(name);
    std::unique_lock meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    commit_deferred_locked();  // the store then has the name, if it is one put off
    auto p = get_node(parent);
    const store::timestamp t = now();
    std::shared_ptr<node> n;
    store::inode_record pr;
    store::inode_record r;
    bool purge_now = false;
    store::transaction txn;
    commit(txn, false, [&](store::transaction& txn) {
      auto d = store_->get_dirent(parent, name);
      if (!d) throw fs_error(ENOENT);
      n = get_node(d->ino);
      if (S_ISDIR(n->record.mode)) throw fs_error(EISDIR);
      txn.delete_dirent(parent, name);
      pr = record_to_edit(*p);
      pr.mtime = pr.ctime = t;
      txn.put_inode(persistable(*p, pr));
      r = record_to_edit(*n);
      if (r.nlink > 0) --r.nlink;
      r.ctime = t;
      purge_now = false;
      if (r.nlink == 0) {
        if (const std::optional<store::extent_list> extents = purgeable_now(*n)) {
          purge_now = true;
          purge(txn, *n, *extents);
        } else {
          // Open or still known to the kernel (or maybe open on another
          // client): readable until the last close and forget. Recorded so
          // a crash cannot leak it.
          txn.add_orphan(n->ino);
          txn.put_inode(persistable(*n, r));
        }
      } else {
        txn.put_inode(persistable(*n, r));
      }
    });
    entries_changed(*p);
    keep_record(*p, pr);
    keep_record(*n, r);
    if (purge_now) {
      n->purged = true;
      n->new_file = false;                        // its row went with it
      if (n->lookups == 0) table_.erase(n->ino);  // else at its forget
    } else if (r.nlink == 0 && n->unused()) {
      defer_orphan(n->ino);
      table_.erase(n->ino);
    }
    // Open here: beside other writers, a hold row keeps it from them.
    if (shares_volume() && r.nlink == 0 && !purge_now) {
      meta.unlock();
      hold_if_unlinked(*n);
    }
    fuse_reply_err(req, 0);
  });
}

void filesystem::rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  run_op(req, "rmdir", [&] {
    check_name(name);
    if (std::strcmp(name, ".") == 0) throw fs_error(EINVAL);
    if (std::strcmp(name, "..") == 0) throw fs_error(ENOTEMPTY);
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    commit_deferred_locked();  // its entries as the store has them
    auto p = get_node(parent);
    const store::timestamp t = now();
    std::shared_ptr<node> n;
    store::inode_record pr;
    store::transaction txn;
    commit(txn, false, [&](store::transaction& txn) {
      auto d = store_->get_dirent(parent, name);
      if (!d) throw fs_error(ENOENT);
      n = get_node(d->ino);
      if (!S_ISDIR(n->record.mode)) throw fs_error(ENOTDIR);
      if (!store_->dir_is_empty(n->ino)) throw fs_error(ENOTEMPTY);
      txn.delete_dirent(parent, name);
      pr = record_to_edit(*p);
      pr.mtime = pr.ctime = t;
      if (pr.nlink > 2) --pr.nlink;
      txn.put_inode(persistable(*p, pr));
      purge(txn, *n);  // a directory holds no data: it goes at once
    });
    entries_changed(*p);
    keep_record(*p, pr);
    n->record.nlink = 0;
    n->record.ctime = t;
    n->purged = true;
    if (n->lookups == 0) table_.erase(n->ino);
    fuse_reply_err(req, 0);
  });
}

void filesystem::refuse_loop(std::uint64_t moved_dir, std::uint64_t new_parent) {
  std::uint64_t ino = new_parent;
  // Deeper than any path the kernel can name (PATH_MAX / 2): a loop already.
  for (int depth = 0; depth < 2048; ++depth) {
    if (ino == moved_dir) throw fs_error(EINVAL);
    if (ino == store::k_root_ino) return;
    const std::optional<store::inode_record> r = store_->get_inode(ino);
    if (!r) throw fs_error(ENOENT);  // removed by another writer
    ino = r->parent;
  }
  throw fs_error(ELOOP);
}

bool filesystem::land_before_rename(std::uint64_t parent, const char* name, bool may_stay_staged) {
  if (options_.read_only) return false;
  const auto entry = store_->get_dirent(parent, name);
  if (!entry) return false;
  const auto n = table_.find(entry->ino);
  if (!n || !n->regular || !n->has_staged()) return false;
  std::unique_lock lock(n->data_mutex);
  // A file whose last commit failed lands (and the rename fails) as before:
  // its close reported nothing (no FLUSH), so this is where rsync hears it.
  if (may_stay_staged && n->write_error == 0) {
    std::lock_guard meta(meta_mutex_);
    if (n->new_file) return true;
  }
  // The error stays the file's too (its close or fsync reports it); the
  // rename fails rather than name data that is not stored.
  if (const int error = data_->flush_data(lock, *n, false)) throw fs_error(error);
  return false;
}

bool filesystem::rename_put_off(std::uint64_t parent, const char* name, std::uint64_t newparent,
                                const char* newname) {
  std::shared_ptr<node> src;
  {
    std::lock_guard meta(meta_mutex_);
    if (!defers_names()) return false;
    const std::optional<store::dirent_record> from = entry_at(parent, name);
    if (!from) return false;
    src = table_.find(from->ino);
    if (!src || !src->regular || !src->new_file) return false;
  }
  // Its write error is read under its data lock (taken before meta_mutex_):
  // a file whose last commit failed lands before the rename, as before
  // (land_before_rename), so that the rename reports the error.
  std::unique_lock data(src->data_mutex);
  std::lock_guard meta(meta_mutex_);
  if (!defers_names() || src->write_error != 0 || !src->new_file || src->purged ||
      src->record.nlink != 1)
    return false;
  const std::optional<store::dirent_record> from = entry_at(parent, name);
  if (!from || from->ino != src->ino || entry_at(newparent, newname)) return false;
  const std::shared_ptr<node> from_dir = get_node(parent);
  const std::shared_ptr<node> to_dir = get_node(newparent);
  if (!S_ISDIR(to_dir->record.mode) || to_dir->record.nlink == 0) return false;
  const store::timestamp t = now();
  deferred_.remove_entry(parent, name);
  deferred_.put_entry(newparent, newname, *from);
  src->record.ctime = t;
  from_dir->record.mtime = from_dir->record.ctime = t;
  to_dir->record.mtime = to_dir->record.ctime = t;
  for (const auto& n : {src, from_dir, to_dir}) deferred_.store_record(n);
  deferred_.name_new_file(src->ino, newparent, newname);
  entries_changed(*from_dir);
  entries_changed(*to_dir);
  settle_deferred_soon();
  return true;
}

void filesystem::rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                        const char* newname, unsigned int flags) {
  run_op(req, "rename", [&] {
    // Directories whose ".." changed: the kernel does not know, and may hold
    // their listings (FOPEN_CACHE_DIR).
    std::vector<std::uint64_t> moved_dirs;
    check_name(name);
    check_name(newname);
    if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) throw fs_error(EINVAL);
    if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) throw fs_error(EINVAL);
    // A new file moved to a free name (rsync's temporary renamed into
    // place): put off until the next commit, as its create may be.
    if (!(flags & RENAME_EXCHANGE) && rename_put_off(parent, name, newparent, newname)) {
      fuse_reply_err(req, 0);
      return;
    }
    commit_deferred();  // what follows reads the store
    // Write-behind must not reorder a write-then-rename (rsync, editors,
    // package managers): after a crash a name holds the old file or the
    // whole new one, never an empty or partial one.
    // - A file that replaces another (or is exchanged with one) has its
    //   staged data committed first, here: only a file with staged data
    //   waits, and only for its own data.
    // - A new file moved to a free name (rsync's temporary renamed into
    //   place, a download finished) waits for nothing: its data stays
    //   staged, its new-file row moves with its name, and a crash before
    //   the group commit stores the data removes it, so the name is found
    //   absent or whole (new_files.cpp). Alone on the volume only: the
    //   kernel then holds both directories locked, so the free name stays
    //   free; beside other writers a close commits anyway.
    bool stayed_staged = false;
    std::unique_lock meta(meta_mutex_, std::defer_lock);
    for (bool may_stay_staged = !(flags & RENAME_EXCHANGE) && !shares_volume() &&
                                !store_->membership().others_mounted();
         ; may_stay_staged = false) {
      const bool free_name = may_stay_staged && !store_->get_dirent(newparent, newname);
      stayed_staged = land_before_rename(parent, name, free_name);
      if (flags & RENAME_EXCHANGE) land_before_rename(newparent, newname, false);
      meta.lock();
      // Filled between the check and the lock: not alone on the volume,
      // where the kernel holds both directories locked; a guard all the
      // same. The data lands first after all.
      if (!stayed_staged || !store_->get_dirent(newparent, newname)) break;
      meta.unlock();
    }
    if (options_.read_only) throw fs_error(EROFS);
    auto from_dir = get_node(parent);
    auto to_dir = get_node(newparent);
    if (!S_ISDIR(to_dir->record.mode)) throw fs_error(ENOTDIR);
    const store::timestamp t = now();

    // Records to write, applied to memory after the commit; all of it is
    // decided inside the commit (fill), on entries and records as the store
    // has them then.
    std::optional<store::dirent_record> from_entry, to_entry;
    std::shared_ptr<node> src;
    std::map<std::uint64_t, std::pair<std::shared_ptr<node>, store::inode_record>> changed;
    std::set<std::uint64_t> purged;  // purged by this rename
    bool same_inode = false;
    auto edit = [&](const std::shared_ptr<node>& n) -> store::inode_record& {
      auto [it, inserted] = changed.try_emplace(n->ino, n, store::inode_record{});
      if (inserted) it->second.second = record_to_edit(*n);
      return it->second.second;
    };
    store::transaction txn;
    commit(txn, false, [&](store::transaction& txn) {
      changed.clear();
      purged.clear();
      moved_dirs.clear();
      same_inode = false;
      from_entry = store_->get_dirent(parent, name);
      if (!from_entry) throw fs_error(ENOENT);
      to_entry = store_->get_dirent(newparent, newname);
      src = get_node(from_entry->ino);
      const bool src_is_dir = S_ISDIR(src->record.mode);
      // The kernel refuses to move a directory under itself, but only by
      // what it sees: beside other writers, one may have moved the target
      // under the source meanwhile (A: mv x y/, B: mv y x/). Walked up from
      // the target here, on the records as they are in the lock.
      if (shares_volume() && src_is_dir && parent != newparent) refuse_loop(src->ino, newparent);
      if (flags & RENAME_EXCHANGE) {
        if (!to_entry) throw fs_error(ENOENT);
        auto dst = get_node(to_entry->ino);
        const bool dst_is_dir = S_ISDIR(dst->record.mode);
        if (shares_volume() && dst_is_dir && parent != newparent) refuse_loop(dst->ino, parent);
        txn.put_dirent(parent, name, *to_entry);
        txn.put_dirent(newparent, newname, *from_entry);
        if (parent != newparent) {
          if (src_is_dir) {
            edit(src).parent = newparent;
            --edit(from_dir).nlink;
            ++edit(to_dir).nlink;
            moved_dirs.push_back(src->ino);
          }
          if (dst_is_dir) {
            moved_dirs.push_back(dst->ino);
            edit(dst).parent = parent;
            --edit(to_dir).nlink;
            ++edit(from_dir).nlink;
          }
        }
        edit(src).ctime = t;
        edit(dst).ctime = t;
        // Both named anew with their data committed (land_before_rename).
        for (const auto& moved : {src, dst})
          if (moved->new_file) txn.clear_new_file(moved->ino);
      } else {
        if (to_entry && (flags & RENAME_NOREPLACE)) throw fs_error(EEXIST);
        if (to_entry && to_entry->ino == from_entry->ino) {
          // Both names are links to one inode: POSIX says do nothing.
          same_inode = true;
          return;
        }
        if (to_entry) {
          auto dst = get_node(to_entry->ino);
          const bool dst_is_dir = S_ISDIR(dst->record.mode);
          if (src_is_dir && !dst_is_dir) throw fs_error(ENOTDIR);
          if (!src_is_dir && dst_is_dir) throw fs_error(EISDIR);
          if (dst_is_dir && !store_->dir_is_empty(dst->ino)) throw fs_error(ENOTEMPTY);
          store::inode_record& dr = edit(dst);
          dr.ctime = t;
          if (dst_is_dir) {
            dr.nlink = 0;
            --edit(to_dir).nlink;
            purge(txn, *dst);
            purged.insert(dst->ino);
          } else if (--dr.nlink == 0) {
            if (const std::optional<store::extent_list> extents = purgeable_now(*dst)) {
              purge(txn, *dst, *extents);
              purged.insert(dst->ino);
            } else {
              txn.add_orphan(dst->ino);
            }
          }
        }
        txn.delete_dirent(parent, name);
        txn.put_dirent(newparent, newname, *from_entry);
        if (src_is_dir && parent != newparent) {
          moved_dirs.push_back(src->ino);
          edit(src).parent = newparent;
          --edit(from_dir).nlink;
          ++edit(to_dir).nlink;
        }
        edit(src).ctime = t;
        // Named anew with its data committed (land_before_rename): a crash
        // leaves the name the old file or this one as it is now. Or still
        // new, its data staged: its row names it where it is now.
        if (src->new_file && stayed_staged)
          txn.mark_new_file(src->ino, newparent, newname, "");
        else if (src->new_file)
          txn.clear_new_file(src->ino);
      }
      store::inode_record& fr = edit(from_dir);
      fr.mtime = fr.ctime = t;
      store::inode_record& tr = edit(to_dir);
      tr.mtime = tr.ctime = t;
      for (auto& [ino, entry] : changed) {
        auto& [n, r] = entry;
        if (!purged.contains(ino)) txn.put_inode(persistable(*n, r));
      }
    });
    if (same_inode) {
      fuse_reply_err(req, 0);
      return;
    }
    for (const std::uint64_t ino : purged) {
      node& gone = *changed.at(ino).first;
      gone.purged = true;
      gone.new_file = false;  // its row went with it
    }
    if (!stayed_staged) src->new_file = false;
    if (flags & RENAME_EXCHANGE)
      if (const auto dst = table_.find(to_entry->ino)) dst->new_file = false;
    entries_changed(*from_dir);
    entries_changed(*to_dir);
    for (auto& [ino, entry] : changed) {
      auto& [n, r] = entry;
      keep_record(*n, r);
      if (n->purged && n->lookups == 0) {
        table_.erase(ino);
      } else if (!n->purged && r.nlink == 0 && n->unused()) {
        defer_orphan(ino);  // replaced while another client may have it open
        table_.erase(ino);
      }
    }
    // Told before the reply, so that a readdir right after rename() returns
    // never gets the old ".." from the kernel's cache (told after it, a
    // test saw that 1 time in 15). No lock of ours is held. It cannot wait
    // on the request it is part of: the kernel holds a directory moved to
    // another parent locked for the whole rename, so no readdir holds its
    // cached pages, and dropping a directory's pages writes nothing back.
    meta.unlock();
    for (std::uint64_t ino : moved_dirs) invalidate_listing(ino);
    // A replaced file open here: beside other writers, a hold row keeps it.
    if (shares_volume())
      for (auto& [ino, entry] : changed)
        if (!purged.contains(ino) && entry.second.nlink == 0) hold_if_unlinked(*entry.first);
    fuse_reply_err(req, 0);
  });
}

void filesystem::link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  run_op(req, "link", [&] {
    check_name(newname);
    // As for rename: the new name must not appear before the data it names
    // (maildir delivers with link, then unlink of the temporary name).
    if (const auto staged = table_.find(ino);
        staged && staged->regular && staged->has_staged() && !options_.read_only) {
      std::unique_lock lock(staged->data_mutex);
      if (const int error = data_->flush_data(lock, *staged, false)) throw fs_error(error);
    }
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    commit_deferred_locked();  // the new name's check reads the store
    auto n = get_node(ino);
    auto p = get_node(newparent);
    if (S_ISDIR(n->record.mode)) throw fs_error(EPERM);
    if (!S_ISDIR(p->record.mode)) throw fs_error(ENOTDIR);
    const store::timestamp t = now();
    store::inode_record r;
    store::inode_record pr;
    store::transaction txn;
    commit(txn, false, [&](store::transaction& txn) {
      if (store_->get_dirent(newparent, newname)) throw fs_error(EEXIST);
      r = record_to_edit(*n);
      if (r.nlink >= 65000) throw fs_error(EMLINK);
      ++r.nlink;
      r.ctime = t;
      pr = record_to_edit(*p);
      if (pr.nlink == 0) throw fs_error(ENOENT);  // removed directory
      pr.mtime = pr.ctime = t;
      txn.put_dirent(newparent, newname, {n->ino, r.mode & S_IFMT});
      txn.put_inode(persistable(*n, r));
      txn.put_inode(persistable(*p, pr));
      txn.remove_orphan(n->ino);                    // linkat(AT_EMPTY_PATH) of an unlinked file
      if (n->new_file) txn.clear_new_file(n->ino);  // its data was committed above
    });
    n->new_file = false;
    entries_changed(*p);
    keep_record(*n, r);
    keep_record(*p, pr);
    reply_entry(req, n);
  });
}

// Directories are opened without a handle: readdir offsets are cookies
// (dir_listing), so nothing per open is needed, and with
// FUSE_CAP_NO_OPENDIR_SUPPORT the kernel skips OPENDIR and RELEASEDIR
// altogether (a warm walk then sends no request at all). Either way the
// kernel keeps the listings it read (FOPEN_CACHE_DIR). It drops a cached
// listing itself when it changes the directory through this mount (create,
// mknod, mkdir, symlink, link, unlink, rmdir, rename bump the directory's
// i_version, fs/fuse/dir.c fuse_dir_changed), and nothing else changes the
// entries of a mounted store (it is locked); rename notifies the one change
// the kernel does not see, the ".." of a moved directory.
void filesystem::opendir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  // ENOSYS once and the kernel stops asking; it then opens with the flags
  // set below (fs/fuse/file.c fuse_file_open: "Default for no-open").
  if (no_opendir_) {
    fuse_reply_err(req, ENOSYS);
    return;
  }
  fi->fh = 0;
  fi->cache_readdir = 1;
  fi->keep_cache = 1;  // without it every open drops the cached listing
  fuse_reply_open(req, fi);
}

namespace {

// Cookies 1 and 2 are "." and ".."; names get 3 and up, 63 bits (off_t).
constexpr std::uint64_t k_dot_cookie = 1;
constexpr std::uint64_t k_dotdot_cookie = 2;

std::uint64_t name_cookie(std::string_view name) {
  const std::uint64_t c = store::stored_checksum(name) >> 1;  // XXH3-64: stable across mounts
  return c < 3 ? c + 3 : c;
}

// A directory's regular files as (cookie, inode) in the store's order (by
// name): both orders the read-ahead follows, the second as readdir hands
// them out (a stable sort by cookie, as listing_of sorts the entries).
read_ahead::listing_orders both_orders(std::vector<std::pair<std::uint64_t, std::uint64_t>> files) {
  read_ahead::listing_orders orders;
  orders.by_name.reserve(files.size());
  for (const auto& [cookie, ino] : files) orders.by_name.push_back(ino);
  std::stable_sort(files.begin(), files.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  orders.listing.reserve(files.size());
  for (const auto& [cookie, ino] : files) orders.listing.push_back(ino);
  return orders;
}

bool is_dot_or_dotdot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

}  // namespace

std::shared_ptr<const dir_listing> filesystem::listing_of(node& dir) {
  {
    // The store lists what it has: names put off here go to it first.
    // Looked at as a reader: most listings need no commit, and need not
    // wait for one on its way.
    bool touches = false;
    {
      std::lock_guard meta(meta_mutex_.reading());
      touches = deferred_.touches(dir.ino);
    }
    if (touches) commit_deferred();
  }
  std::lock_guard lock(dir.listing_mutex);
  // Read before the scan: a change that commits during the scan bumps the
  // version after this, so the next readdir reads the directory again.
  const std::uint64_t version = dir.dir_version.load(std::memory_order_acquire);
  if (dir.listing && dir.listing_version == version) return dir.listing;
  auto fresh = std::make_shared<dir_listing>();
  store_->list_dir(
      dir.ino, std::nullopt, [&](std::string_view name, const store::dirent_record& d) {
        fresh->entries.push_back({name_cookie(name), std::string(name), d.ino, d.type});
        return true;
      });
  // The files' orders outlive the listing, for the sibling prefetch of a
  // reader that goes through them after the readdir ends. The store lists
  // by name: the files' cookies in that order, before the sort.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> files;
  if (read_ahead_)
    for (const auto& e : fresh->entries)
      if (e.type == S_IFREG) files.emplace_back(e.cookie, e.ino);
  std::stable_sort(fresh->entries.begin(), fresh->entries.end(),
                   [](const auto& x, const auto& y) { return x.cookie < y.cookie; });
  dir.listing = fresh;
  dir.listing_version = version;
  if (read_ahead_) read_ahead_->remember_listing(dir.ino, both_orders(std::move(files)));
  return fresh;
}

std::optional<read_ahead::listing_orders> filesystem::listing_orders(std::uint64_t dir) const {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> files;  // cookie, inode; by name
  std::size_t entries = 0;
  store_->list_dir(dir, std::nullopt, [&](std::string_view name, const store::dirent_record& d) {
    if (++entries > read_ahead::k_max_listed_files) return false;
    if (d.type == S_IFREG) files.emplace_back(name_cookie(name), d.ino);
    return true;
  });
  if (entries > read_ahead::k_max_listed_files) return std::nullopt;
  return both_orders(std::move(files));
}

std::size_t filesystem::fill_plus(fuse_req_t req, std::uint64_t dir,
                                  const std::vector<readdir_pick>& batch, char* buffer,
                                  std::size_t size, std::vector<std::shared_ptr<node>>& counted) {
  // The inodes the table lacks, in one MultiGet without meta_mutex_; used
  // only if no commit happened in between (meta_gen_, as in lookup).
  const std::uint64_t gen = meta_gen_.load(std::memory_order_acquire);
  std::vector<std::uint64_t> missing;
  for (const auto& p : batch)
    if (!is_dot_or_dotdot(p.name) && !table_.find(p.ino)) missing.push_back(p.ino);
  const auto records = store_->get_inodes(missing);
  // Null: not in the store when read.
  std::unordered_map<std::uint64_t, const store::inode_record*> fetched;
  for (std::size_t i = 0; i < missing.size(); ++i)
    fetched.emplace(missing[i], records[i] ? &*records[i] : nullptr);

  std::size_t used = 0;
  std::lock_guard meta(meta_mutex_.reading());  // as lookup (ops_attr.cpp)
  const bool current = meta_gen_.load(std::memory_order_acquire) == gen;
  for (const auto& p : batch) {
    fuse_entry_param e{};
    std::shared_ptr<node> child;
    if (is_dot_or_dotdot(p.name)) {
      e.attr.st_ino = p.ino;
      e.attr.st_mode = p.type;
    } else {
      child = table_.find(p.ino);
      const auto f = fetched.find(p.ino);
      if (!child && current && f != fetched.end()) {
        if (!f->second) continue;  // removed since the listing was read
        child = node_from(p.ino, *f->second);
      } else if (!child) {
        // A commit since the MultiGet, or a node the kernel forgot since:
        // read it again, under the mutex.
        try {
          child = get_node(p.ino);
        } catch (const fs_error&) {
          continue;  // removed since the listing was read
        }
      }
      if (child->record.nlink == 0) continue;  // unlinked, still open
      e = entry_for(*child);
      child->parent_hint.store(dir, std::memory_order_relaxed);
    }
    const std::size_t needed = fuse_add_direntry_plus(req, buffer + used, size - used, p.name, &e,
                                                      static_cast<off_t>(p.cookie));
    if (needed > size - used) break;
    used += needed;
    // Every entry the kernel receives (but . and ..) counts as a lookup.
    if (child) {
      ++child->lookups;
      counted.push_back(child);
    }
  }
  return used;
}

// A reply holds the entries after the cookie `off`, in cookie order, each
// with its own cookie as the offset to go on from. Two names with one
// cookie (a 63-bit hash collision) never straddle two replies, or the
// second would be skipped. The listing is a prefix scan cached per
// directory, read without meta_mutex_; readdirplus takes the mutex once per
// reply, after fetching the inodes it lacks in one MultiGet. The kernel
// holds the directory's lock shared while it reads it and exclusively
// while it changes it, so a listing read at the start of a reply is the
// directory's listing for that reply.
void filesystem::readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                         fuse_file_info*, bool plus) {
  run_op(req, plus ? "readdirplus" : "readdir", [&] {
    auto dir = get_node(ino);  // known to the kernel: in the table
    const auto listing = listing_of(*dir);
    const auto& all = listing->entries;
    const std::uint64_t start = off < 0 ? 0 : static_cast<std::uint64_t>(off);
    std::vector<readdir_pick> batch;
    if (start < k_dotdot_cookie) {
      std::uint64_t dotdot;
      {
        std::lock_guard meta(meta_mutex_.reading());
        dotdot = dir->ino == store::k_root_ino ? dir->ino : dir->record.parent;
      }
      if (start < k_dot_cookie) batch.push_back({k_dot_cookie, ".", dir->ino, S_IFDIR});
      batch.push_back({k_dotdot_cookie, "..", dotdot, S_IFDIR});
    }
    // A null buffer only measures an entry.
    const auto measure = [&](const char* name) {
      return plus ? fuse_add_direntry_plus(req, nullptr, 0, name, nullptr, 0)
                  : fuse_add_direntry(req, nullptr, 0, name, nullptr, 0);
    };
    auto it = std::upper_bound(all.begin(), all.end(), start,
                               [](std::uint64_t c, const auto& e) { return c < e.cookie; });
    std::vector<char> buffer(size);
    for (;;) {
      std::size_t fill = 0;
      for (const auto& p : batch) fill += measure(p.name);
      std::size_t group_start = 0;  // where the last run of equal cookies starts
      for (; it != all.end(); ++it) {
        const std::size_t needed = measure(it->name.c_str());
        if (fill + needed > size) break;
        if (batch.empty() || batch.back().cookie != it->cookie) group_start = batch.size();
        batch.push_back({it->cookie, it->name.c_str(), it->ino, it->type});
        fill += needed;
      }
      if (it != all.end() && batch.empty()) throw fs_error(EINVAL);  // buffer too small
      if (it != all.end() && group_start > 0 && batch.back().cookie == it->cookie) {
        it -= static_cast<std::ptrdiff_t>(batch.size() - group_start);
        batch.resize(group_start);
      }
      std::size_t used = 0;
      std::vector<std::shared_ptr<node>> counted;  // lookups this reply adds
      if (plus) {
        used = fill_plus(req, ino, batch, buffer.data(), size, counted);
      } else {
        for (const auto& p : batch) {
          struct stat st {};
          st.st_ino = p.ino;
          st.st_mode = p.type;
          const std::size_t needed = fuse_add_direntry(req, buffer.data() + used, size - used,
                                                       p.name, &st, static_cast<off_t>(p.cookie));
          if (needed > size - used) break;
          used += needed;
        }
      }
      // All of this batch was removed since the listing was read: an empty
      // reply would end the listing early, so go on with the next batch.
      if (used == 0 && it != all.end()) {
        batch.clear();
        continue;
      }
      if (used == 0) {
        // The end of the listing (the kernel reads until an empty reply):
        // the kernel caches it now, so densefs need not; memory stays
        // bounded by the directories being read, not those ever read.
        std::lock_guard lock(dir->listing_mutex);
        if (dir->listing == listing) dir->listing.reset();
      }
      if (fuse_reply_buf(req, buffer.data(), used) != 0 && !counted.empty()) {
        // The kernel never got these entries: it will not forget them.
        std::lock_guard meta(meta_mutex_);
        for (const auto& child : counted) {
          --child->lookups;
          maybe_release(child);
        }
      }
      return;
    }
  });
}

void filesystem::releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  fuse_reply_err(req, 0);
}

}  // namespace densefs::fs
