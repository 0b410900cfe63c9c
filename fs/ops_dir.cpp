// The namespace: mknod, mkdir, symlink, readlink, unlink, rmdir, rename,
// link, and directory listing.
#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <sys/stat.h>

#include <cstring>

#include "fs/filesystem.h"
#include "fs/ops_common.h"

namespace densefs::fs {

void filesystem::check_name(const char* name) const {
  const std::size_t length = std::strlen(name);
  if (length > 255) throw fs_error(ENAMETOOLONG);
  if (length == 0) throw fs_error(ENOENT);
}

// Creates an inode and its directory entry in one commit. Caller holds
// meta_mutex_.
std::shared_ptr<node> filesystem::make_node(fuse_req_t req, node& parent, const char* name,
                                            mode_t mode, dev_t rdev,
                                            std::string_view symlink_target) {
  if (!S_ISDIR(parent.record.mode)) throw fs_error(ENOTDIR);
  if (parent.record.nlink == 0) throw fs_error(ENOENT);  // removed directory
  if (options_.read_only) throw fs_error(EROFS);
  if (store_->get_dirent(parent.ino, name)) throw fs_error(EEXIST);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const store::timestamp t = now();

  store::inode_record r;
  r.ino = store_->allocate_ino();
  r.mode = mode;
  r.uid = ctx->uid;
  r.gid = ctx->gid;
  // BSD group semantics under a set-group-ID directory, as ext4 does.
  if (parent.record.mode & S_ISGID) {
    r.gid = parent.record.gid;
    if (S_ISDIR(mode)) r.mode |= S_ISGID;
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

  store::inode_record p = parent.record;
  p.mtime = p.ctime = t;
  if (S_ISDIR(mode)) ++p.nlink;

  store::transaction txn;
  txn.put_inode(r);
  txn.put_dirent(parent.ino, name, {r.ino, r.mode & S_IFMT});
  txn.put_inode(persistable(parent, p));
  commit(txn);
  parent.record = p;
  auto n = std::make_shared<node>(r);
  n->persisted_size = r.size;
  n->name_type = r.type;
  n->xattr_names.emplace();  // a new inode has none
  return table_.insert(std::move(n));
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
    std::lock_guard meta(meta_mutex_);
    auto n = get_node(ino);
    if (!S_ISLNK(n->record.mode)) throw fs_error(EINVAL);
    fuse_reply_readlink(req, n->record.symlink_target.c_str());
  });
}

void filesystem::unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  run_op(req, "unlink", [&] {
    check_name(name);
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    auto p = get_node(parent);
    auto d = store_->get_dirent(parent, name);
    if (!d) throw fs_error(ENOENT);
    auto n = get_node(d->ino);
    if (S_ISDIR(n->record.mode)) throw fs_error(EISDIR);
    const store::timestamp t = now();
    store::transaction txn;
    txn.delete_dirent(parent, name);
    store::inode_record pr = p->record;
    pr.mtime = pr.ctime = t;
    txn.put_inode(persistable(*p, pr));
    store::inode_record r = n->record;
    if (r.nlink > 0) --r.nlink;
    r.ctime = t;
    bool purge_now = false;
    if (r.nlink == 0) {
      if (n->lookups == 0 && n->opens == 0 && !n->has_staged()) {
        purge_now = true;
        purge(txn, *n);
      } else {
        // Open or still known to the kernel: readable until the last close
        // and forget. Recorded so a crash cannot leak it.
        txn.add_orphan(n->ino);
        txn.put_inode(persistable(*n, r));
      }
    } else {
      txn.put_inode(persistable(*n, r));
    }
    commit(txn);
    p->record = pr;
    n->record = r;
    if (purge_now) {
      n->purged = true;
      table_.erase(n->ino);
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
    auto p = get_node(parent);
    auto d = store_->get_dirent(parent, name);
    if (!d) throw fs_error(ENOENT);
    auto n = get_node(d->ino);
    if (!S_ISDIR(n->record.mode)) throw fs_error(ENOTDIR);
    if (!store_->dir_is_empty(n->ino)) throw fs_error(ENOTEMPTY);
    const store::timestamp t = now();
    store::transaction txn;
    txn.delete_dirent(parent, name);
    store::inode_record pr = p->record;
    pr.mtime = pr.ctime = t;
    if (pr.nlink > 2) --pr.nlink;
    txn.put_inode(persistable(*p, pr));
    purge(txn, *n);  // a directory holds no data: it goes at once
    commit(txn);
    p->record = pr;
    n->record.nlink = 0;
    n->record.ctime = t;
    n->purged = true;
    if (n->lookups == 0) table_.erase(n->ino);
    fuse_reply_err(req, 0);
  });
}

void filesystem::rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                        const char* newname, unsigned int flags) {
  run_op(req, "rename", [&] {
    check_name(name);
    check_name(newname);
    if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) throw fs_error(EINVAL);
    if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) throw fs_error(EINVAL);
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    auto from_dir = get_node(parent);
    auto to_dir = get_node(newparent);
    if (!S_ISDIR(to_dir->record.mode)) throw fs_error(ENOTDIR);
    auto from_entry = store_->get_dirent(parent, name);
    if (!from_entry) throw fs_error(ENOENT);
    auto to_entry = store_->get_dirent(newparent, newname);
    auto src = get_node(from_entry->ino);
    const bool src_is_dir = S_ISDIR(src->record.mode);
    const store::timestamp t = now();

    // Records to write, applied to memory after the commit.
    std::map<std::uint64_t, std::pair<std::shared_ptr<node>, store::inode_record>> changed;
    auto edit = [&](const std::shared_ptr<node>& n) -> store::inode_record& {
      auto [it, inserted] = changed.try_emplace(n->ino, n, n->record);
      return it->second.second;
    };
    store::transaction txn;

    if (flags & RENAME_EXCHANGE) {
      if (!to_entry) throw fs_error(ENOENT);
      auto dst = get_node(to_entry->ino);
      const bool dst_is_dir = S_ISDIR(dst->record.mode);
      txn.put_dirent(parent, name, *to_entry);
      txn.put_dirent(newparent, newname, *from_entry);
      if (parent != newparent) {
        if (src_is_dir) {
          edit(src).parent = newparent;
          --edit(from_dir).nlink;
          ++edit(to_dir).nlink;
        }
        if (dst_is_dir) {
          edit(dst).parent = parent;
          --edit(to_dir).nlink;
          ++edit(from_dir).nlink;
        }
      }
      edit(src).ctime = t;
      edit(dst).ctime = t;
    } else {
      if (to_entry && (flags & RENAME_NOREPLACE)) throw fs_error(EEXIST);
      if (to_entry && to_entry->ino == from_entry->ino) {
        // Both names are links to one inode: POSIX says do nothing.
        fuse_reply_err(req, 0);
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
          dst->purged = true;
        } else if (--dr.nlink == 0) {
          if (dst->lookups == 0 && dst->opens == 0 && !dst->has_staged()) {
            purge(txn, *dst);
            dst->purged = true;
          } else {
            txn.add_orphan(dst->ino);
          }
        }
      }
      txn.delete_dirent(parent, name);
      txn.put_dirent(newparent, newname, *from_entry);
      if (src_is_dir && parent != newparent) {
        edit(src).parent = newparent;
        --edit(from_dir).nlink;
        ++edit(to_dir).nlink;
      }
      edit(src).ctime = t;
    }
    store::inode_record& fr = edit(from_dir);
    fr.mtime = fr.ctime = t;
    store::inode_record& tr = edit(to_dir);
    tr.mtime = tr.ctime = t;
    for (auto& [ino, entry] : changed) {
      auto& [n, r] = entry;
      if (!n->purged) txn.put_inode(persistable(*n, r));
    }
    commit(txn);
    for (auto& [ino, entry] : changed) {
      auto& [n, r] = entry;
      n->record = r;
      if (n->purged && n->lookups == 0) table_.erase(ino);
    }
    fuse_reply_err(req, 0);
  });
}

void filesystem::link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  run_op(req, "link", [&] {
    check_name(newname);
    std::lock_guard meta(meta_mutex_);
    if (options_.read_only) throw fs_error(EROFS);
    auto n = get_node(ino);
    auto p = get_node(newparent);
    if (S_ISDIR(n->record.mode)) throw fs_error(EPERM);
    if (!S_ISDIR(p->record.mode)) throw fs_error(ENOTDIR);
    if (store_->get_dirent(newparent, newname)) throw fs_error(EEXIST);
    if (n->record.nlink >= 65000) throw fs_error(EMLINK);
    const store::timestamp t = now();
    store::inode_record r = n->record;
    ++r.nlink;
    r.ctime = t;
    store::inode_record pr = p->record;
    pr.mtime = pr.ctime = t;
    store::transaction txn;
    txn.put_dirent(newparent, newname, {n->ino, r.mode & S_IFMT});
    txn.put_inode(persistable(*n, r));
    txn.put_inode(persistable(*p, pr));
    txn.remove_orphan(n->ino);  // linkat(AT_EMPTY_PATH) of an unlinked file
    commit(txn);
    n->record = r;
    p->record = pr;
    reply_entry(req, n);
  });
}

void filesystem::opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  run_op(req, "opendir", [&] {
    {
      std::lock_guard meta(meta_mutex_);
      auto n = get_node(ino);
      if (!S_ISDIR(n->record.mode)) throw fs_error(ENOTDIR);
    }
    auto handle = std::make_unique<dir_handle>();
    fi->fh = reinterpret_cast<std::uint64_t>(handle.get());
    if (fuse_reply_open(req, fi) == 0) handle.release();
  });
}

void filesystem::readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                         fuse_file_info* fi, bool plus) {
  run_op(req, plus ? "readdirplus" : "readdir", [&] {
    auto* handle = reinterpret_cast<dir_handle*>(fi->fh);
    std::vector<char> buffer(size);
    std::size_t used = 0;
    std::vector<std::shared_ptr<node>> counted;  // lookups this reply adds
    // The reply goes out after the handle's lock is released: once the
    // kernel has the last batch it may send releasedir, which frees it.
    {
      std::lock_guard handle_lock(handle->mutex);
      if (off == 0) {
        // (Re)start: snapshot the listing so offsets stay valid while the
        // directory changes; rewinddir() sees a fresh one.
        handle->entries.clear();
        std::lock_guard meta(meta_mutex_);
        auto n = get_node(ino);
        const std::uint64_t dotdot = n->ino == store::k_root_ino ? n->ino : n->record.parent;
        handle->entries.push_back({".", n->ino, S_IFDIR});
        handle->entries.push_back({"..", dotdot, S_IFDIR});
        store_->list_dir(ino, std::nullopt,
                         [&](std::string_view name, const store::dirent_record& d) {
                           handle->entries.push_back({std::string(name), d.ino, d.type});
                           return true;
                         });
      }
      std::unique_lock meta(meta_mutex_, std::defer_lock);
      if (plus) meta.lock();
      for (std::size_t i = static_cast<std::size_t>(off); i < handle->entries.size(); ++i) {
        const auto& entry = handle->entries[i];
        const off_t next = static_cast<off_t>(i + 1);
        std::size_t needed;
        if (plus) {
          fuse_entry_param e{};
          std::shared_ptr<node> child;
          if (entry.name == "." || entry.name == "..") {
            e.attr.st_ino = entry.ino;
            e.attr.st_mode = entry.type;
          } else {
            try {
              child = get_node(entry.ino);
            } catch (const fs_error&) {
              continue;  // removed since the snapshot
            }
            e = entry_for(*child);
          }
          needed = fuse_add_direntry_plus(req, buffer.data() + used, size - used,
                                          entry.name.c_str(), &e, next);
          if (needed > size - used) break;
          // Every entry the kernel receives (but . and ..) counts as a lookup.
          if (child) {
            ++child->lookups;
            counted.push_back(child);
          }
        } else {
          struct stat st {};
          st.st_ino = entry.ino;
          st.st_mode = entry.type;
          needed = fuse_add_direntry(req, buffer.data() + used, size - used, entry.name.c_str(),
                                     &st, next);
          if (needed > size - used) break;
        }
        used += needed;
      }
    }
    if (fuse_reply_buf(req, buffer.data(), used) != 0 && !counted.empty()) {
      // The kernel never got these entries: it will not forget them.
      std::lock_guard meta(meta_mutex_);
      for (const auto& child : counted) {
        --child->lookups;
        maybe_release(child);
      }
    }
  });
}

void filesystem::releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<dir_handle*>(fi->fh);
  fuse_reply_err(req, 0);
}

}  // namespace densefs::fs
