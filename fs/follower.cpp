// A follower mount (`densefs mount -o ro` of a volume another client
// writes; docs/scale-out.md, "Several clients"): the writer's commits reach
// this daemon as change notices (store::watch), and each one drops what
// this daemon and its kernel cache of the inodes and entries it names.
// Without this the kernel would keep serving attributes, names and pages
// for its one-day timeouts. The writer hears one kind of notice: a
// follower that just mounted (answer_new_clients).
//
// Runs on the store's listening thread, holding no lock on entry. The
// kernel notifications go out with no lock held either: invalidating an
// inode's pages waits for reads of them, which FUSE threads answer.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fs/filesystem.h"
#include "store/log.h"

namespace densefs::fs {

// The writer: followers mounted and wait (volume_membership::begin). From now
// on close commits (close-to-open for them); what was closed before, and is
// still staged, is committed now; then they are told.
void filesystem::answer_new_clients(const std::vector<std::string>& sessions) {
  if (sessions.empty()) return;
  store_->membership().note_other_client();
  if (const int error = sync_all(nullptr))
    log_error(std::string("committing staged files for a client that mounted: ") +
              std::strerror(error));
  store_->membership().answer_sessions(sessions);
}

// The record as the writer committed it; the node's cached listing and
// xattr names are dropped, and an open after this does not keep the page
// cache (data_version moved). A node the store no longer has keeps its
// record: the kernel's entries naming it go with the dirent notices, and
// its open handles read what is left (EIO once the extents are gone), as
// NFS's stale handles do; open() refuses it (ESTALE). Says whether the
// record changed or is gone.
filesystem::refreshed filesystem::refresh_from_store(node& n) {
  // A writer beside others reads the record under the file's lock: its own
  // group commit (which holds that lock) could otherwise store the file
  // between the read and the lock, and the record read before it would
  // then look like another writer's newer one (measured: 1 file in 400
  // read back empty right after it was written).
  std::unique_lock data(n.data_mutex, std::defer_lock);
  if (shares_volume()) data.lock();
  // Nor may a commit of this daemon's that does not take the file's lock
  // (a chmod, a rename) land between the read and meta_mutex_: the record
  // read before it would undo it in the table (found by the differential
  // test on two writers: a suid bit set here gone from fstat). As in
  // lookup, the read is repeated under the mutex when meta_gen_ moved.
  const std::uint64_t gen = meta_gen_.load(std::memory_order_acquire);
  std::optional<store::inode_record> r = store_->get_inode(n.ino);
  if (!r) return refreshed::gone;
  if (!data.owns_lock()) data.lock();
  std::lock_guard meta(meta_mutex_);
  if (meta_gen_.load(std::memory_order_acquire) != gen) {
    r = store_->get_inode(n.ino);
    if (!r) return refreshed::gone;
  }
  // A writer beside others may have taken the record already
  // (record_to_edit), but not the size its reads stop at.
  if (n.record == *r && (!n.regular || (n.size == r->size && n.persisted_size == r->size)))
    return refreshed::unchanged;
  store_->forget_extents(n.ino);
  n.xattr_names.reset();
  if (shares_volume() && (has_own_data(n) || n.size != n.persisted_size)) {
    // Written here too: its size and times stay this daemon's (the last
    // close wins); the rest is the store's.
    const store::inode_record own = n.record;
    n.record = *r;
    n.record.size = own.size;
    keep_own_times(own, n.record);
    n.record.stored_bytes = own.stored_bytes;
    meta_gen_.fetch_add(1, std::memory_order_release);
    return refreshed::changed;
  }
  n.record = *r;
  n.persisted_size = r->size;
  n.size = r->size;
  n.type = r->type;
  n.bytes_changed();
  if (S_ISDIR(r->mode)) entries_changed(n);
  meta_gen_.fetch_add(1, std::memory_order_release);
  return refreshed::changed;
}

void filesystem::apply_remote_change(const store::change_notice& c) {
  if (!store_->follows()) {
    answer_new_clients(c.sessions_started);
    // A writer beside others hears their commits as a follower does.
    if (!shares_volume()) return;
  }
  std::vector<std::shared_ptr<node>> changed;
  std::vector<std::pair<std::uint64_t, std::string>> entries = c.entries;
  if (c.everything) {
    changed = table_.all();
    // The kernel's entries cannot be listed; those this daemon listed go.
    for (const auto& n : changed) {
      std::lock_guard lock(n->listing_mutex);
      if (n->listing)
        for (const auto& e : n->listing->entries) entries.emplace_back(n->ino, e.name);
    }
  } else {
    for (const std::uint64_t ino : c.inodes)
      if (auto n = table_.find(ino)) changed.push_back(std::move(n));
    for (const auto& [parent, name] : c.entries)
      if (auto dir = table_.find(parent)) changed.push_back(std::move(dir));
  }
  for (const auto& n : changed) {
    try {
      refresh_from_store(*n);
    } catch (const std::exception& e) {
      // The kernel still forgets it below; the next request reads again.
      log_error("inode " + std::to_string(n->ino) +
                ": re-reading after another client's change: " + e.what());
    }
    // Unlinked by the writer while open here: kept for the open handles.
    hold_if_unlinked(*n);
  }
  if (!session_) return;
  for (const auto& n : changed) fuse_lowlevel_notify_inval_inode(session_, n->ino, 0, 0);
  for (const auto& [parent, name] : entries)
    fuse_lowlevel_notify_inval_entry(session_, parent, name.data(), name.size());
}

}  // namespace densefs::fs
