// Unlinked files on a volume that other clients mount (docs/scale-out.md,
// "Unlinked while open elsewhere"). A file keeps its data after its last
// name goes for as long as someone has it open. On one machine the daemon
// sees every open; on a shared volume a follower may have the file open
// too, and the writer cannot see that. So:
//
// - the writer keeps an unlinked file whose last local user is gone as an
//   orphan (the same record a crash leaves) while another client is
//   mounted, for other_clients_grace(): time enough for every follower to
//   hear the unlink's change notice;
// - a follower that has the file open, on hearing it (or on an open that
//   re-reads the record), writes a hold row, and erases it at its last
//   close; a session that ends or expires loses its holds;
// - after every heartbeat the writer releases the deferred orphans past the
//   grace that no live session holds; at mount and unmount it looks at
//   every orphan in the store the same way.
#include <sys/stat.h>

#include <cstring>
#include <string>

#include "fs/filesystem.h"
#include "store/log.h"

namespace densefs::fs {

bool filesystem::others_may_hold(const node& n) const {
  return store_->follows() || (n.regular && store_->membership().keeps_sessions() &&
                               store_->membership().others_mounted());
}

void filesystem::defer_orphan(std::uint64_t ino) {
  std::lock_guard lock(deferred_mutex_);
  deferred_orphans_.try_emplace(ino, std::chrono::steady_clock::now());
}

void filesystem::release_orphans(orphan_scan scan) {
  std::vector<std::uint64_t> candidates;
  if (scan != orphan_scan::deferred) {
    candidates = store_->orphans();
  } else {
    std::lock_guard lock(deferred_mutex_);
    for (const auto& [ino, since] : deferred_orphans_) candidates.push_back(ino);
  }
  if (candidates.empty()) return;
  const std::set<std::uint64_t> held = store_->membership().held_inodes();
  const bool others =
      store_->membership().keeps_sessions() && store_->membership().others_mounted();
  const auto now = std::chrono::steady_clock::now();
  // Small files go many to a commit: a tree removed while a follower is
  // mounted comes back here whole, and one commit per file would take
  // minutes on PostgreSQL. Synced at mount and unmount, as each release
  // was before.
  store::transaction txn;
  std::size_t txn_ops = 0;
  // Taken off deferred_orphans_ and not released yet: put back when this
  // fails, so that the next heartbeat tries them again.
  std::vector<std::uint64_t> taken;
  const auto commit_batch = [&] {
    if (txn_ops == 0) return;
    {
      std::lock_guard meta(meta_mutex_);
      // Beside other writers each is deleted as the store has it inside
      // the commit: another writer may release the same orphans.
      commit(txn, scan != orphan_scan::deferred, [&](store::transaction& txn) {
        if (!shares_volume()) return;
        for (const std::uint64_t ino : taken) {
          store::inode_record r;
          r.ino = ino;
          node n(r);
          if (!purge_orphan_now(txn, n))
            throw store::store_error(EAGAIN, "inode " + std::to_string(ino) +
                                                 ": an orphan's extents grew while it was "
                                                 "released");
        }
      });
    }
    for (const std::uint64_t ino : taken)
      log_debug("released orphaned inode " + std::to_string(ino));
    txn = store::transaction();
    txn_ops = 0;
    taken.clear();
  };
  try {
    for (const std::uint64_t ino : candidates) {
      // Still this daemon's (open, known to the kernel, or staged): its
      // last release decides (maybe_release). At unmount the kernel is gone.
      if (scan != orphan_scan::whole_store && table_.find(ino)) continue;
      {
        std::lock_guard lock(deferred_mutex_);
        if (held.contains(ino)) {
          deferred_orphans_.try_emplace(ino, now);
          continue;
        }
        if (others) {
          // Found at mount or unmount: unlinked at some unknown time, so
          // the grace starts now.
          const auto since = deferred_orphans_.try_emplace(ino, now).first->second;
          if (now - since < store::volume_membership::other_clients_grace()) continue;
        }
        deferred_orphans_.erase(ino);
      }
      taken.push_back(ino);
      const std::optional<store::inode_record> r = store_->get_inode(ino);
      std::optional<store::extent_list> extents = store::extent_list{};
      if (r && S_ISREG(r->mode)) extents = extents_if_one_batch(ino);
      if (!extents) {
        // Its own commits; a failure is logged and stays an orphan in the
        // store, for the next mount.
        taken.pop_back();
        release_big_orphan(*r);
        continue;
      }
      if (r && !shares_volume()) {
        node n(*r);
        purge(txn, n, *extents);
      } else if (!r) {
        txn.remove_orphan(ino);
      }
      txn_ops += 1 + extents->size();
      if (txn_ops >= k_purge_batch) commit_batch();
    }
    commit_batch();
  } catch (...) {
    std::lock_guard lock(deferred_mutex_);
    for (const std::uint64_t ino : taken)
      deferred_orphans_.try_emplace(ino, std::chrono::steady_clock::time_point{});
    throw;
  }
}

void filesystem::release_deferred_orphans_later() {
  if (!workers_ || releasing_orphans_.exchange(true)) return;
  workers_->submit([this] {
    try {
      // Beside other writers, the unfinished new files of writers whose
      // session is gone (they become orphans here), and every orphan of
      // the volume: those of a writer whose session expired are the living
      // writers' to release.
      if (shares_volume()) remove_unfinished_new_files(false);
      release_orphans(shares_volume() ? orphan_scan::all_not_here : orphan_scan::deferred);
    } catch (const std::exception& e) {
      log_error(std::string("releasing unlinked files (the next heartbeat retries): ") + e.what());
    }
    releasing_orphans_ = false;
  });
}

void filesystem::hold_if_unlinked(node& n) {
  if ((!store_->follows() && !shares_volume()) || !n.regular) return;
  std::lock_guard holds(holds_mutex_);
  {
    std::lock_guard meta(meta_mutex_);
    if (n.held || n.opens == 0 || n.record.nlink != 0) return;
  }
  try {
    store_->membership().hold_inode(n.ino);
  } catch (const std::exception& e) {
    log_error("inode " + std::to_string(n.ino) +
              ": keeping the unlinked file for its open handles: " + e.what());
    return;
  }
  {
    std::lock_guard meta(meta_mutex_);
    if (n.opens > 0) {
      n.held = true;
      return;
    }
  }
  // Its last handle closed meanwhile, and that close found no hold to drop.
  erase_hold(n.ino);
}

void filesystem::close_handle(const std::shared_ptr<node>& n, bool writer) {
  bool drop = false;
  {
    // A reader: a close does not wait for a commit on its way (held is
    // only set beside other clients, where no commit lets readers in).
    std::lock_guard meta(meta_mutex_.reading());
    drop = close_handle_locked(n, writer);
  }
  if (!drop) return;
  std::lock_guard holds(holds_mutex_);
  {
    // Opened again and held again meanwhile: that hold is this row.
    std::lock_guard meta(meta_mutex_);
    if (n->held) return;
  }
  erase_hold(n->ino);
}

bool filesystem::close_handle_locked(const std::shared_ptr<node>& n, bool writer) {
  if (n->opens > 0) --n->opens;
  if (writer && n->writers > 0) --n->writers;
  const bool drop = n->held && n->opens == 0;
  if (drop) n->held = false;
  release_when_unused(n);
  return drop;
}

void filesystem::erase_hold(std::uint64_t ino) {
  try {
    store_->membership().release_inode_hold(ino);
  } catch (const std::exception& e) {
    // The writer ignores it once this session ends (its rows go with it).
    log_error("inode " + std::to_string(ino) + ": letting the unlinked file go: " + e.what());
  }
}

}  // namespace densefs::fs
