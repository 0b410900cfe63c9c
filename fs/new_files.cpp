// New files and crashes (docs/design.md, "Durability"). close(2) returns
// before a file's data is committed (write-behind, write_back.h), while its
// create was committed at once: a crash in between would leave the name
// empty or cut short. So a file created through the mount carries a
// new-file row in the store (records.h, k_new_file_prefix), written in its
// create's commit, until its data as of its last close is committed; the
// commit that stores the last of it removes the row. The next mount after
// a crash removes every file still marked, its name and its data: a name
// is found absent, or whole.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "fs/filesystem.h"
#include "store/log.h"

namespace densefs::fs {

bool filesystem::new_file_ends(const node& n, bool settled) const {
  if (!n.new_file) return false;
  // Readers do not count: a file written, closed and then held open by a
  // reader (a player, less, an indexer) is whole.
  if (settled && n.writers == 0 && n.write_error == 0) return true;
  // Kept open for writing a long time (a log, a download): it keeps its
  // name after a crash, with what is committed, as on ext4. Only while it
  // is open for writing: a closed file ends once all of it is stored (a
  // big one renamed to a free name keeps its row until its last group).
  return n.writers > 0 && std::chrono::steady_clock::now() - n.created >= k_new_file_grace;
}

void filesystem::settle_new_file(node& n) {
  {
    std::lock_guard meta(meta_mutex_.reading());
    if (!n.new_file) return;
  }
  std::unique_lock data(n.data_mutex);
  std::lock_guard meta(meta_mutex_);
  settle_new_file_locked(n);
}

void filesystem::settle_new_file_locked(node& n) {
  if (n.purged || n.has_staged() || !new_file_ends(n, true)) return;
  end_new_file_locked(n);
}

void filesystem::settle_new_files(const node* own, bool unmounting) {
  if (store_->read_only() || options_.read_only) return;
  const std::vector<store::new_file_record> rows = store_->new_files();
  if (rows.empty()) return;
  store::transaction txn;
  std::vector<std::shared_ptr<node>> ended;
  std::size_t cleared = 0;
  for (const store::new_file_record& r : rows) {
    const std::shared_ptr<node> n = table_.find(r.ino);
    if (n) {
      std::unique_lock data(n->data_mutex);
      std::lock_guard meta(meta_mutex_);
      // Still being written (a handle open for writing, other than the
      // fsync's own): it stays new, so that a crash before its last close
      // is stored removes it rather than leave it cut short.
      // At unmount the kernel is gone, and with it every handle, whether
      // or not its RELEASE reached us: everything was flushed.
      if (n->has_staged() || n->write_error != 0 ||
          (n->writers > 0 && n.get() != own && !unmounting))
        continue;
      ended.push_back(n);
    } else if (shares_volume() && r.writer != store_->membership().session_id()) {
      // No node, beside other writers: it may be another writer's file,
      // being written there.
      continue;
    }
    // No node: nothing of it is staged or open here (a node leaves the
    // table only then), so its data is all stored.
    txn.clear_new_file(r.ino);
    ++cleared;
  }
  if (cleared == 0) {
    commit_put_off();  // the rows of files that ended before, if any
    return;
  }
  std::lock_guard meta(meta_mutex_);
  // Rows and names readers do not read, of nodes the table keeps: readers
  // may pass the round trip.
  commit(txn, false, {}, nullptr, while_committing::readers_pass);  // also clears those
  for (const auto& n : ended) n->new_file = false;
}

void filesystem::end_new_file_locked(node& n) {
  if (!n.new_file) return;
  {
    std::lock_guard lock(ended_new_files_mutex_);
    ended_new_files_.push_back(n.ino);
  }
  n.new_file = false;
  if (write_back* committer = settle_committer_.load()) {
    committer->settle_soon();
  } else {
    // Unmounting: the committer is gone. Inside maybe_release, whose
    // caller goes on from the state it read: nothing may pass.
    commit_put_off_locked(while_committing::all_wait);
  }
}

void filesystem::commit_put_off() {
  std::lock_guard meta(meta_mutex_);
  commit_put_off_locked(while_committing::readers_pass);
}

void filesystem::commit_put_off_locked(while_committing others) {
  {
    std::lock_guard lock(ended_new_files_mutex_);
    if (ended_new_files_.empty() && deferred_.empty()) return;
  }
  try {
    store::transaction txn;
    commit(txn, false, {}, nullptr, others);  // adds them
  } catch (const std::exception& e) {
    // Kept for the next commit, or the committer's next try; the next sync
    // or unmount ends them too (from the store's list); a crash before that
    // removes the files (absent, which the rule allows).
    log_error(std::string("committing new files' names and ends: ") + e.what());
    if (write_back* committer = settle_committer_.load()) committer->settle_soon();
  }
}

void filesystem::remove_unfinished_new_files(bool at_mount) {
  // Not on a mount made read-only (-o ro): it changes nothing. Its rows
  // wait for the next read-write mount.
  if (options_.read_only) return;
  std::vector<store::new_file_record> rows = store_->new_files();
  if (shares_volume()) {
    // Beside other writers a row may be another's, of a file being written
    // there: only those of writers whose session is gone (killed, or
    // expired) go, and at a mount those of a writer alone that crashed
    // (none can be alive beside this one). Never this writer's own.
    std::set<std::string> live;
    for (const store::session_record& s : store_->membership().sessions())
      if (!s.read_only && store_->membership().session_alive(s)) live.insert(s.id);
    // Rows without a writer: a writer alone that crashed, or a writer
    // beside others of a build before the writer field (then only when no
    // other writer is alive, as those builds did).
    const bool others_alive = at_mount && store_->membership().other_writers_alive();
    std::erase_if(rows, [&](const store::new_file_record& r) {
      if (r.writer.empty()) return !at_mount || others_alive;
      return r.writer == store_->membership().session_id() || live.contains(r.writer);
    });
  }
  if (rows.empty()) return;
  const store::timestamp t = now();
  std::vector<store::new_file_record> removed;
  store::transaction txn;
  std::unique_lock meta(meta_mutex_);
  // Beside other writers, read as the store has them inside the commit's
  // lock: another writer may rename or remove the same names meanwhile.
  commit(txn, true, [&](store::transaction& txn) {
    removed.clear();
    std::map<std::uint64_t, store::inode_record> parents;
    for (const store::new_file_record& r : rows) {
      txn.clear_new_file(r.ino);
      // Renamed, linked or unlinked since, the row would be gone: a name
      // that is another file's now is left alone.
      const std::optional<store::dirent_record> entry = store_->get_dirent(r.parent, r.name);
      if (!entry || entry->ino != r.ino) continue;
      std::optional<store::inode_record> inode = store_->get_inode(r.ino);
      if (!inode || !S_ISREG(inode->mode) || inode->nlink != 1) continue;
      auto parent = parents.find(r.parent);
      if (parent == parents.end()) {
        std::optional<store::inode_record> p = store_->get_inode(r.parent);
        if (!p) continue;
        parent = parents.emplace(r.parent, *p).first;
      }
      parent->second.mtime = parent->second.ctime = t;
      txn.delete_dirent(r.parent, r.name);
      inode->nlink = 0;
      inode->ctime = t;
      txn.put_inode(*inode);
      txn.add_orphan(r.ino);  // its data goes with the orphans (release_orphans)
      removed.push_back(r);
    }
    for (const auto& [ino, p] : parents) txn.put_inode(p);
  });
  meta.unlock();
  if (removed.empty()) return;
  for (const store::new_file_record& r : removed)
    log_info("removed \"" + r.name + "\" (inode " + std::to_string(r.ino) + ") in directory " +
             std::to_string(r.parent) +
             (r.writer.empty() ? std::string(": created before the daemon stopped")
                               : ": created by writer " + r.writer + ", gone since") +
             ", and its data was not all stored");
  log_info("removed " + std::to_string(removed.size()) +
           " file(s) whose data a crash left incomplete");
  if (at_mount) return;
  // After the mount, this daemon's table and the kernel may hold the
  // names and files removed: its own commit is not heard as another's
  // (store::watch skips it), so it is applied here the same way.
  store::change_notice removal;
  for (const store::new_file_record& r : removed) {
    removal.inodes.push_back(r.ino);
    removal.inodes.push_back(r.parent);
    removal.entries.emplace_back(r.parent, r.name);
  }
  apply_remote_change(removal);
}

}  // namespace densefs::fs
