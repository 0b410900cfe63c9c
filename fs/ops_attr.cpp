// Inode lifecycle and attributes: lookup, forget, getattr, setattr, statfs.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "fs/file_info.h"
#include "fs/filesystem.h"
#include "fs/ops_common.h"
#include "store/payload/pack_store.h"

namespace densefs::fs {

store::timestamp now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return {ts.tv_sec, static_cast<std::uint32_t>(ts.tv_nsec)};
}

namespace {

store::timestamp from_timespec(const timespec& t) {
  return {t.tv_sec, static_cast<std::uint32_t>(t.tv_nsec)};
}

// Without KILLPRIV_V2 (filesystem::init; libfuse 3.14 cannot ask for it)
// the kernel clears suid, and sgid when group-exec is set, itself: a write,
// fallocate, copy_file_range or truncate by a user without CAP_FSETID first
// sends a SETATTR, in that user's context, with the mode less those bits
// (or with nothing to change when there is nothing left to clear). What its
// FUSE code leaves out is the VFS's other sgid rule
// (setattr_should_drop_sgid): sgid without group-exec also goes when the
// user is not in the file's group. ext4 applies it to all of these and to
// chown(-1, -1); a chmod has it applied by the kernel already, so applying
// it again changes nothing.
bool drops_sgid_as_the_vfs_does(fuse_req_t req, const store::inode_record& r, int to_set) {
  if (!S_ISREG(r.mode) || !(r.mode & S_ISGID) || (r.mode & S_IXGRP)) return false;
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) return false;  // chown: the kernel's
  constexpr int k_times =
      FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
  // utimensat keeps the bits; a truncate, a chmod and the kernel's kill
  // request (no attribute at all) are the changes the rule covers.
  const bool kill_like =
      (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE)) != 0 || (to_set & k_times) == 0;
  return kill_like && !filesystem::caller_credentials(req).in_group_or_capable(r.gid);
}

// With KILLPRIV_V2 the kernel asks us to clear the bits: a truncate by a
// user without CAP_FSETID and every chown of a file other than a directory
// carry FUSE_SET_ATTR_KILL_SUID (the kernel's FATTR_KILL_SUIDGID); the
// VFS's own kill request (a write, fallocate or copy_file_range by such a
// user, chown(-1, -1)) arrives as a SETATTR of no attribute at all, since
// the kernel drops the mode it would have computed; with writeback_cache a
// chown(-1, -1) carries the ctime the kernel keeps (and only it: the
// kernel's own time updates always send the mtime too).
bool asks_to_kill_suid_sgid(int to_set) {
  constexpr int k_kill = FUSE_SET_ATTR_KILL_SUID | FUSE_SET_ATTR_KILL_SGID;
  constexpr int k_attributes = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
                               FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                               FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
  return (to_set & k_kill) != 0 || (to_set & k_attributes) == 0;
}

// The bits such a kill takes from a regular file, given its record before
// the change, by the VFS's rules (setattr_should_drop_suidgid): suid always;
// sgid with group-exec, or without it when the caller is neither in the
// file's group nor has CAP_FSETID. Whether the caller's CAP_FSETID spares
// the file the kernel has decided already (it sends no kill then).
mode_t suid_sgid_to_kill(fuse_req_t req, const store::inode_record& before) {
  if (!S_ISREG(before.mode)) return 0;
  mode_t kill = before.mode & S_ISUID;
  if ((before.mode & S_ISGID) &&
      ((before.mode & S_IXGRP) ||
       !filesystem::caller_credentials(req).in_group_or_capable(before.gid)))
    kill |= S_ISGID;
  return kill;
}

// Nodes in memory before idle ones are parked: 16,384 nodes are ~11 MB.
// DENSEFS_RESIDENT_INODES sets another limit (tests park with a few dozen).
std::size_t resident_node_limit() {
  if (const char* env = std::getenv("DENSEFS_RESIDENT_INODES"); env && *env)
    return std::max<std::size_t>(1, std::strtoull(env, nullptr, 10));
  return 16384;
}

// Where changes may wait for the network, requests that change something
// leave the io_uring rings' threads (filesystem::hands_off).
bool hands_off_ring_requests(const store::store& s) {
  if (const char* env = std::getenv("DENSEFS_RING_OFFLOAD"); env && *env) {
    const std::string_view policy(env);
    if (policy == "always") return true;
    if (policy == "never") return false;
    if (policy != "auto")
      log_warning("DENSEFS_RING_OFFLOAD=" + std::string(policy) +
                  " is not one of auto, always, never: auto is used");
  }
  return s.reads_are_round_trips() || !s.payload_location().empty();
}

// The entries of each ring (one per configured CPU, libfuse's
// fuse_create_ring): 8 unless -o io_uring_q_depth says more.
unsigned ring_depth(const mount_options& options) {
  unsigned depth = 8;
  for (const auto& o : options.fuse_options)
    if (o.starts_with("io_uring_q_depth="))
      depth = static_cast<unsigned>(std::strtoul(o.c_str() + 17, nullptr, 10));
  return std::max(1u, depth);
}

}  // namespace

filesystem::filesystem(const mount_options& options)
    : options_(options), resident_limit_(resident_node_limit()), park_above_(resident_limit_) {}

filesystem::~filesystem() {
  shutdown();
}

void filesystem::start(std::unique_ptr<store::store> store) {
  store_ = std::move(store);
  if (!options_.codec_spec.empty()) store_->set_policy(codec::parse_policy(options_.codec_spec));
  unsigned threads = options_.encode_threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_ = std::make_unique<worker_pool>(threads);
  syncs_ = std::make_unique<worker_pool>(k_sync_threads);
  if (options_.transport == fuse_transport::uring && hands_off_ring_requests(*store_))
    ring_jobs_ = std::make_unique<ring_helpers>(std::min(64u, ring_depth(options_)));
  data_path::host& host = *this;  // a private base: converted here, where it is visible
  data_ =
      std::make_unique<data_path>(options_, *store_, *workers_, host, [this] { commit_put_off(); });
  settle_committer_ = &data_->committer();
  decoders_ = std::make_unique<worker_pool>(std::max(1u, std::thread::hardware_concurrency()));
  // A snapshot's mount has no `.snapshots` of its own.
  if (!store_->opened_snapshot()) snapshots_ = std::make_unique<snapshot_tree>(*store_, options_);
  if (store_->caches_chunks())
    read_ahead_ = std::make_unique<read_ahead>(*store_, options_.chunk_cache_bytes,
                                               std::max(1u, std::thread::hardware_concurrency()));

  // A read-only store (a follower) leaves the orphans to the writer. A
  // writer beside followers keeps those they may have open, and looks at
  // them again after every heartbeat (shared_orphans.cpp).
  if (!store_->read_only()) {
    remove_unfinished_new_files();
    release_orphans(orphan_scan::whole_store);
  }
  // A follower hears the writer's commits, the writer hears followers that
  // mount (fs/follower.cpp).
  store_->watch([this](const store::change_notice& c) { apply_remote_change(c); });
  if (options_.recompress_threads > 0 && !options_.read_only) {
    recompressor_ = std::make_unique<recompressor>(
        *store_, options_.recompress_threads,
        [this](const store::recompress_item& item) { recompress_chunk(item); });
  }
  if (!store_->read_only()) {
    if (recompressor_) {
      try {
        store_->membership().take_lease(store::volume_membership::k_lease_re_encoder);
      } catch (const std::exception& e) {
        log_error(std::string("taking the re-encoder's lease: ") + e.what());
      }
    }
    if (store_->membership().keeps_sessions())
      store_->membership().on_heartbeat([this] {
        release_deferred_orphans_later();
        // Beside other writers one re-encodes at a time: the lease, when
        // its holder let it go or stopped renewing it (the store renews
        // the leases held).
        try {
          if (recompressor_ &&
              !store_->membership().holds_lease(store::volume_membership::k_lease_re_encoder) &&
              store_->membership().take_lease(store::volume_membership::k_lease_re_encoder))
            recompressor_->notify();
        } catch (const std::exception& e) {
          log_error(std::string("taking the re-encoder's lease: ") + e.what());
        }
      });
  }
  // Replaced payloads (re-encoding) and deleted ones (unlink, overwrite)
  // are both counted by the store; one collector gives their space back.
  if (!options_.read_only) gc_ = std::make_unique<garbage_collector>(*store_);
  // A request's burst keeps cores awake (fs/idle_spinner.h).
  spinner_.start(options_.idle_spin_threads, std::chrono::milliseconds(1));
  // df shows a volume in object storage by its pack objects' bytes, which
  // statfs reads only once listed (it never waits on the network): the
  // listing, once, off the request path.
  if (const store::pack_store* packs = store_->packs(); packs && packs->remote()) {
    workers_->submit([this] {
      try {
        (void)store_->packs()->file_bytes();
      } catch (const std::exception& e) {
        log_error(std::string("listing the volume's packs for df: ") + e.what() +
                  " (df shows 0 bytes used until densefs stats, gc or -o metrics= lists them)");
      }
    });
  }
}

void filesystem::shutdown() {
  if (!store_) return;
  // Waiting lock requests are answered (EINTR): the mount is going.
  if (lock_waiters_) lock_waiters_->stop();
  store_->membership().on_heartbeat({});  // release_orphans runs no more on its own
  store_->unwatch();                      // apply_remote_change runs no more
  // No collection at unmount: it costs I/O in proportion to the live
  // payloads, and unmount must be prompt. The next mount estimates what is
  // left (garbage_collector), or `densefs gc STORE` collects it.
  gc_.reset();  // cancels a collection in progress
  // The fsyncs and the changes handed off the rings under way end (and
  // reply) first.
  syncs_.reset();
  ring_jobs_.reset();
  // Staged data first, while everything a group commit calls on (the
  // re-encoder's notify, the worker pool for big orphans) still exists.
  for (const auto& n : table_.all()) {
    std::unique_lock lock(n->data_mutex);
    if (!n->regular) continue;
    try {
      if (int error = data_->flush_data(lock, *n)) {
        log_error("inode " + std::to_string(n->ino) +
                  ": staged data lost at unmount: " + std::strerror(error));
      }
    } catch (const std::exception& e) {
      log_error("inode " + std::to_string(n->ino) + ": flush at unmount failed: " + e.what());
    }
  }
  // Names put off (deferred_names.h) go to the store before its new-file
  // rows are read.
  commit_put_off();
  // Every file's data is committed (or lost with an error above): none is
  // new any more, unless its data was lost (the next mount removes it).
  try {
    settle_new_files(nullptr, true);
  } catch (const std::exception& e) {
    log_error(std::string("ending new files at unmount failed: ") + e.what());
  }
  // Every encode the flushes waited for is committed: the committer is
  // idle and stops first (it notifies the re-encoder), then the re-encoder
  // (it hands commits to the workers), then the workers.
  settle_committer_ = nullptr;
  data_->stop_committer();
  // The rows of files that ended since (the committer's last group
  // released them): none may outlive this session.
  commit_put_off();
  recompressor_.reset();  // finishes the chunk in progress; the rest stays queued
  workers_.reset();       // drains the queue
  read_ahead_.reset();    // drops the prefetches still queued
  decoders_.reset();      // answers the reads still queued
  data_.reset();          // after the last read it served
  try {
    // The kernel is gone: nothing here references them now.
    if (!store_->read_only()) release_orphans(orphan_scan::whole_store);
  } catch (const std::exception& e) {
    log_error(std::string("releasing unlinked files failed (the next mount retries): ") + e.what());
  }
  try {
    store_->sync();
  } catch (const std::exception& e) {
    log_error(std::string("final sync failed: ") + e.what());
  }
  snapshots_.reset();  // it reads through the store
  store_.reset();
}

void filesystem::data_committed(bool queued_recompress) {
  if (!recompressor_) return;
  recompressor_->note_activity();
  if (queued_recompress) recompressor_->notify();
}

void filesystem::cancel_gc() {
  if (store_) store_->cancel_garbage_collection();
}

void filesystem::commit(store::transaction& txn, bool sync,
                        const std::function<void(store::transaction&)>& fill,
                        store::payloads_ahead* ahead, while_committing others) {
  std::vector<std::uint64_t> ended;
  {
    std::lock_guard lock(ended_new_files_mutex_);
    ended.swap(ended_new_files_);
  }
  for (const std::uint64_t ino : ended) txn.clear_new_file(ino);
  // Names put off go first: this commit's own changes come after them
  // (a record it stores wins over the one put off).
  const bool with_deferred = !deferred_.empty();
  if (with_deferred) {
    store::transaction earlier;
    deferred_.add_to(earlier, [this](const node& n) { return persistable(n, n.record); });
    txn.prepend(std::move(earlier));
  }
  // Readers may pass the store call (a round trip on PostgreSQL) when the
  // caller says they cannot see this commit half done, and only alone:
  // beside other writers `fill` runs inside the store's lock and changes
  // records readers copy (shared_writers.cpp). Alone `fill` reads nothing
  // another writer could change, so it runs first, under the lock, and
  // the store call touches no memory a reader reads.
  const bool readers_pass = others == while_committing::readers_pass && !shares_volume();
  try {
    if (readers_pass) {
      if (fill) fill(txn);
      const meta_lock::window window(meta_mutex_);
      store_->commit(txn, sync, {}, ahead);
    } else {
      store_->commit(txn, sync, fill, ahead);
    }
  } catch (...) {
    // Not cleared: the next commit tries again.
    {
      std::lock_guard lock(ended_new_files_mutex_);
      ended_new_files_.insert(ended_new_files_.end(), ended.begin(), ended.end());
    }
    // An unknown outcome may have landed: readers that began meanwhile
    // read again.
    meta_gen_.fetch_add(1, std::memory_order_release);
    release_after_commit();
    throw;
  }
  // After the commit is visible, before meta_mutex_ is given to a writer,
  // and before the names put off (which readers saw instead of the store's
  // while the commit was on its way) are dropped: see meta_gen_.
  meta_gen_.fetch_add(1, std::memory_order_release);
  // The nodes of names put off stayed in the table for this. The commit
  // landed: nothing here may make it look failed to the caller.
  if (with_deferred)
    for (const std::shared_ptr<node>& n : deferred_.committed()) release_after_commit(n);
  release_after_commit();
}

void filesystem::release_when_unused(const std::shared_ptr<node>& n) {
  // A reader during a commit's window must not release (that may commit,
  // or erase a node the commit applies to): the committer does it after.
  if (meta_mutex_.window_open())
    release_after_commit(n);
  else
    maybe_release(n);
}

void filesystem::release_after_commit(const std::shared_ptr<node>& n) {
  if (std::find(release_after_commit_.begin(), release_after_commit_.end(), n) ==
      release_after_commit_.end())
    release_after_commit_.push_back(n);
}

void filesystem::release_after_commit() noexcept {
  for (const std::shared_ptr<node>& n : std::exchange(release_after_commit_, {})) {
    try {
      maybe_release(n);
    } catch (const std::exception& e) {
      log_error("inode " + std::to_string(n->ino) + ": release failed: " + e.what());
    }
  }
}

std::shared_ptr<node> filesystem::node_from(std::uint64_t ino, const store::inode_record& fetched) {
  if (auto n = table_.find(ino)) return n;
  auto fresh = std::make_shared<node>(fetched);
  fresh->persisted_size = fetched.size;
  return table_.insert(std::move(fresh));
}

void filesystem::invalidate_attributes(std::uint64_t ino) {
  // Attributes only (negative offset): no page locks are taken, so this is
  // safe from any thread, even inside a request for the same inode. ENOENT
  // (the kernel does not have the inode) is fine.
  if (session_) fuse_lowlevel_notify_inval_inode(session_, ino, -1, 0);
}

void filesystem::invalidate_listing(std::uint64_t ino) {
  if (session_) fuse_lowlevel_notify_inval_inode(session_, ino, 0, 0);
}

std::shared_ptr<node> filesystem::get_node(std::uint64_t ino) {
  for (;;) {
    // Read without meta_mutex_ (callers may or may not hold it), so a commit
    // may change the inode between the read and the insert: of a parked
    // one (the kernel knows it, and a link, chmod or re-encoding may come),
    // whose stale record would then be committed again later. Every commit
    // bumps meta_gen_ under meta_mutex_: if it moved, read again. A caller
    // holding the mutex never loops.
    const std::uint64_t gen = meta_gen_.load(std::memory_order_acquire);
    if (auto n = table_.find(ino)) {
      // The kernel walks a path again after ESTALE and finds the name gone.
      if (n->gone_for_good()) throw fs_error(ESTALE);
      return n;
    }
    auto r = store_->get_inode(ino);
    if (!r) throw fs_error(ENOENT);
    auto fresh = std::make_shared<node>(*r);
    fresh->persisted_size = r->size;
    if (auto n = table_.insert_unless(
            std::move(fresh), [&] { return meta_gen_.load(std::memory_order_acquire) != gen; }))
      return n;
  }
}

struct stat filesystem::to_stat(const store::inode_record& r) const {
  return file_stat(r);
}

fuse_entry_param filesystem::entry_for(const node& n) const {
  fuse_entry_param e{};
  e.ino = n.ino;
  e.generation = 0;  // inode numbers are never reused
  e.attr = to_stat(n.record);
  e.attr_timeout = options_.attr_timeout;
  e.entry_timeout = options_.entry_timeout;
  return e;
}

void filesystem::reply_entry(fuse_req_t req, const std::shared_ptr<node>& n) {
  fuse_entry_param e = entry_for(*n);
  ++n->lookups;
  // A reply the kernel did not take (interrupted request) will never be
  // forgotten, so it must not count.
  if (fuse_reply_entry(req, &e) != 0) --n->lookups;
}

store::inode_record filesystem::persistable(const node& n, store::inode_record r) const {
  // Beside other writers the size comes from record_to_edit: the store's,
  // or this daemon's persisted size while it has data of its own staged.
  if (S_ISREG(r.mode) && !shares_volume()) r.size = n.persisted_size;
  return r;
}

void filesystem::purge(store::transaction& txn, node& n) {
  purge(txn, n,
        S_ISREG(n.record.mode)
            ? store_->extents(n.ino, 0, std::numeric_limits<std::uint64_t>::max())
            : store::extent_list{});
}

void filesystem::purge(store::transaction& txn, node& n, const store::extent_list& extents) {
  for (const auto& [offset, extent] : extents) {
    txn.delete_extent(n.ino, offset);
    txn.unref_chunk(extent.hash);
  }
  // The names this daemon keeps are exact but beside other writers.
  if (n.xattr_names && !shares_volume()) {
    for (const auto& name : *n.xattr_names) txn.delete_xattr(n.ino, name);
  } else {
    for (const auto& name : store_->list_xattrs(n.ino)) txn.delete_xattr(n.ino, name);
  }
  txn.delete_inode(n.ino);
  txn.remove_orphan(n.ino);
  if (n.new_file) txn.clear_new_file(n.ino);
}

std::optional<store::extent_list> filesystem::purgeable_now(const node& n) const {
  if (n.opens != 0 || n.has_staged() || others_may_hold(n)) return std::nullopt;
  // A FIFO, socket or device node is opened without an OPEN here: while
  // the kernel knows it, a process may hold it (fstat and fchmod on its
  // descriptor must keep working), so it waits for the forget as before.
  if (!n.regular && !S_ISLNK(n.record.mode) && n.lookups != 0) return std::nullopt;
  // Beside other writers only one the kernel forgot too, as before: the
  // last forget of another releases it inside its own commit's lock.
  if (shares_volume() && n.lookups != 0) return std::nullopt;
  return n.regular ? extents_if_one_batch(n.ino) : std::optional(store::extent_list{});
}

std::optional<store::extent_list> filesystem::extents_if_one_batch(std::uint64_t ino) const {
  auto extents =
      store_->extents(ino, 0, std::numeric_limits<std::uint64_t>::max(), k_purge_batch + 1);
  if (extents.size() > k_purge_batch) return std::nullopt;
  return extents;
}

void filesystem::drop_orphan_extents_in_batches(std::uint64_t ino) {
  for (bool done = false; !done;) {
    std::lock_guard meta(meta_mutex_);
    store::transaction txn;
    // The batch read inside the commit: another writer may release the
    // same orphan (and it then has no extents left here).
    commit(txn, false, [&](store::transaction& txn) {
      // Released or linked again by another writer meanwhile: not ours to
      // cut (purge_orphan_now decides the rest).
      if (shares_volume()) {
        const std::optional<store::inode_record> r = store_->get_inode(ino);
        if (!r || r->nlink != 0) {
          done = true;
          return;
        }
      }
      auto batch =
          store_->extents(ino, 0, std::numeric_limits<std::uint64_t>::max(), k_purge_batch + 1);
      done = batch.size() <= k_purge_batch;
      if (done) return;
      txn.add_orphan(ino);  // already there; a crash must leave it there
      for (std::size_t i = 0; i < k_purge_batch; ++i) {
        txn.delete_extent(ino, batch[i].first);
        txn.unref_chunk(batch[i].second.hash);
      }
    });
  }
}

bool filesystem::purge_orphan_now(store::transaction& txn, node& n) {
  const std::optional<store::inode_record> r = store_->get_inode(n.ino);
  if (!r || r->nlink != 0) {
    // Released by another writer already, or linked again (linkat of an
    // open file): only this daemon's rows of it go.
    txn.remove_orphan(n.ino);
    if (n.new_file) txn.clear_new_file(n.ino);
    return true;
  }
  std::optional<store::extent_list> extents =
      S_ISREG(r->mode) ? extents_if_one_batch(n.ino) : std::optional(store::extent_list{});
  if (!extents) return false;
  purge(txn, n, *extents);
  return true;
}

void filesystem::shrink_in_batches(node& n, std::uint64_t new_size) {
  for (bool done = false; !done;) {
    std::lock_guard meta(meta_mutex_);
    store::inode_record r;
    store::inode_record persisted;
    store::transaction txn;
    commit(txn, false, [&](store::transaction& txn) {
      auto batch = store_->last_extents(n.ino, new_size, k_purge_batch + 1);
      done = batch.size() <= k_purge_batch;
      if (done) return;
      batch.erase(batch.begin());  // the lowest one stays for the next round
      const std::uint64_t dropped = data_->drop_extents(txn, n.ino, batch);
      r = record_to_edit(n);
      r.stored_bytes -= std::min(r.stored_bytes, dropped);
      persisted = r;
      persisted.size = std::min(n.persisted_size, batch.front().first);
      txn.put_inode(persisted);
    });
    if (done) return;
    n.record.stored_bytes = r.stored_bytes;
    n.persisted_size = persisted.size;
  }
}

void filesystem::release_big_orphan(const store::inode_record& r) {
  try {
    drop_orphan_extents_in_batches(r.ino);
    std::lock_guard meta(meta_mutex_);
    store::transaction txn;
    node n(r);
    commit(txn, false, [&](store::transaction& txn) {
      // Grown past a batch again? Only a bug could do that to an orphan.
      if (!purge_orphan_now(txn, n))
        throw store::store_error(EAGAIN, "the orphan's extents grew while it was released");
    });
  } catch (const std::exception& e) {
    log_error("inode " + std::to_string(r.ino) +
              ": release failed (the next mount retries): " + e.what());
  }
}

void filesystem::maybe_release(const std::shared_ptr<node>& n) {
  if (n->lookups != 0 || n->opens != 0 || n->ino == store::k_root_ino) return;
  if (deferred_.holds(n->ino)) return;  // the store cannot load it yet: the commit calls us
  if (n->has_staged()) return;          // the last background commit calls us again
  if (n->record.nlink == 0 && !n->purged && others_may_hold(*n)) {
    // A follower leaves unlinked files to the writer; so does the writer
    // while another client may have this one open (shared_orphans.cpp).
    if (!store_->follows()) defer_orphan(n->ino);
  } else if (n->record.nlink == 0 && !n->purged) {
    const auto extents =
        n->regular ? extents_if_one_batch(n->ino) : std::optional(store::extent_list{});
    if (!extents && workers_) {
      // Off this (FUSE) thread, in batches: the mount does not stall.
      workers_->submit([this, r = n->record] { release_big_orphan(r); });
    } else {
      store::transaction txn;
      try {
        commit(txn, false, [&](store::transaction& txn) {
          if (shares_volume())
            purge_orphan_now(txn, *n) || (purge(txn, *n), true);
          else if (extents)
            purge(txn, *n, *extents);
          else
            purge(txn, *n);
        });
      } catch (const std::exception& e) {
        // Stays an orphan in the store; the next mount releases it.
        log_error("inode " + std::to_string(n->ino) + ": release failed: " + e.what());
      }
    }
    n->purged = true;
  } else if (new_file_ends(*n, true)) {
    // Closed with everything stored, and leaving the table: a node loaded
    // again later would not know it was new.
    end_new_file_locked(*n);
  }
  table_.erase(n->ino);
}

bool filesystem::parkable(node& n) const {
  if (n.ino == store::k_root_ino || n.purged || n.new_file || n.held || n.opens != 0 ||
      n.record_dirty || n.record.nlink == 0 || n.has_staged() || deferred_.holds(n.ino))
    return false;
  // No one else holds the node, so no one holds its mutexes either; taking
  // them orders these reads after the last writer's.
  std::unique_lock data(n.data_mutex, std::try_to_lock);
  if (!data.owns_lock() || n.write_error != 0 || !n.slots.empty()) return false;
  // A directory in the middle of a listing keeps it: its next READDIR goes
  // on from it (the listing is dropped at its end anyway).
  std::unique_lock listing(n.listing_mutex, std::try_to_lock);
  return listing.owns_lock() && !n.listing;
}

void filesystem::park_idle_nodes() noexcept {
  if (table_.resident() <= park_above_.load(std::memory_order_relaxed)) return;
  // Beside other clients a node is what their changes are applied to
  // (follower.cpp, shared_writers.cpp): every node stays.
  if (shares_volume() || store_->follows()) return;
  try {
    // After every request: a reader, which leaves the table alone while a
    // commit is on its way (its nodes must stay).
    std::lock_guard meta(meta_mutex_.reading());
    if (meta_mutex_.window_open()) return;
    const std::size_t left =
        table_.park(resident_limit_ * 3 / 4, [this](node& n) { return parkable(n); });
    park_above_.store(std::max(resident_limit_, left + left / 4), std::memory_order_relaxed);
  } catch (const std::exception& e) {
    log_error(std::string("parking idle inodes: ") + e.what());  // they stay in memory
  }
}

// The store is read without meta_mutex_, so that parallel walks do not
// queue behind one another's RocksDB reads: meta_gen_ is read first, and if
// a commit happened before the mutex is taken, the reads are repeated
// under it. Every commit holds the mutex and bumps meta_gen_ after it is
// visible, so an unchanged meta_gen_ means no commit landed after the reads
// began and before the mutex was taken: the reads are as current as if
// they had been made under it. (The kernel also holds the parent's lock
// shared during a lookup and exclusively while changing its entries.)
void filesystem::lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  run_op(req, "lookup", [&] {
    check_name(name);
    // The kernel sends "." and ".." only for file handles (export support,
    // filesystem::init): open_by_handle_at of an inode it no longer caches
    // looks up "." in that inode, and reconnecting a directory looks up its
    // "..". Any inode, even a regular file, answers "." with itself.
    // Unlinked and closed: gone for good, as on ext4 (ESTALE), even while
    // the kernel's forget is still on its way. Checked before the inode is
    // put into the table: an orphan still being released must not get a
    // second node that no forget would ever remove.
    const bool dot = std::strcmp(name, ".") == 0;
    const bool dotdot = std::strcmp(name, "..") == 0;
    std::shared_ptr<node> n;
    fuse_entry_param e{};
    if (dot || dotdot) {
      std::lock_guard meta(meta_mutex_.reading());
      const auto live_node = [&](std::uint64_t ino) {
        if (auto found = table_.find(ino)) {
          if (found->record.nlink == 0 && found->opens == 0) throw fs_error(ENOENT);
          return found;
        }
        auto r = store_->get_inode(ino);
        if (!r || r->nlink == 0) throw fs_error(ENOENT);
        return node_from(ino, *r);  // one read, not a second get_node
      };
      n = live_node(parent);
      if (dotdot) {
        if (!S_ISDIR(n->record.mode)) throw fs_error(ENOTDIR);
        n = live_node(n->record.parent);
      }
      e = entry_for(*n);
      ++n->lookups;
    } else {
      const std::uint64_t gen = meta_gen_.load(std::memory_order_acquire);
      auto d = store_->get_dirent(parent, name);
      std::optional<store::inode_record> fetched;
      if (d && !table_.find(d->ino)) fetched = store_->get_inode(d->ino);
      // A reader: a commit that lets readers in writes only records of
      // nodes in the table and names put off (deferred_ answers for those
      // until meta_gen_ has moved).
      std::lock_guard meta(meta_mutex_.reading());
      if (meta_gen_.load(std::memory_order_acquire) != gen) {
        d = store_->get_dirent(parent, name);
        fetched.reset();
      }
      if (auto put_off = deferred_.find(parent, name)) {
        d = *put_off;
        fetched.reset();
      }
      if (d) {
        n = fetched ? node_from(d->ino, *fetched) : get_node(d->ino);
        e = entry_for(*n);
        ++n->lookups;
      }
    }
    if (n) n->parent_hint.store(parent, std::memory_order_relaxed);
    if (!n && snapshots_ && snapshot_tree::names_dir(parent, name)) {
      snapshots_->reply_dir_entry(req);
      return;
    }
    if (!n) {
      if (options_.negative_timeout <= 0) throw fs_error(ENOENT);
      e.entry_timeout = options_.negative_timeout;  // ino 0: a cached "no such name"
      fuse_reply_entry(req, &e);
      return;
    }
    // A reply the kernel did not take (interrupted request) will never be
    // forgotten, so it must not count.
    if (fuse_reply_entry(req, &e) != 0) {
      std::lock_guard meta(meta_mutex_);
      --n->lookups;
      maybe_release(n);
    }
  });
}

void filesystem::forget(fuse_ino_t ino, std::uint64_t nlookup) {
  // A reader, so that a FORGET does not hold a FUSE thread (or a ring)
  // through a commit's round trip; the release waits for the commit.
  std::lock_guard meta(meta_mutex_.reading());
  auto n = table_.find(ino);
  if (!n) {
    table_.forget_parked(ino, nlookup);
    return;
  }
  n->lookups -= std::min<std::uint64_t>(n->lookups, nlookup);
  release_when_unused(n);
}

void filesystem::getattr(fuse_req_t req, fuse_ino_t ino) {
  run_op(req, "getattr", [&] {
    // Loaded (a parked inode: a RocksDB read) before the mutex is taken,
    // so that a walk's GETATTRs do not queue behind one another's reads.
    const auto n = get_node(ino);
    struct stat st;
    {
      std::lock_guard meta(meta_mutex_.reading());
      st = to_stat(n->record);
    }
    fuse_reply_attr(req, &st, options_.attr_timeout);
  });
}

void filesystem::edit_attributes(fuse_req_t req, store::inode_record& r, const struct stat* attr,
                                 int to_set, store::timestamp t, bool truncating) const {
  const store::inode_record before = r;
  if (to_set & FUSE_SET_ATTR_MODE) r.mode = (r.mode & S_IFMT) | (attr->st_mode & 07777);
  if (to_set & FUSE_SET_ATTR_UID) r.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) r.gid = attr->st_gid;
  if (drops_sgid_as_the_vfs_does(req, r, to_set)) r.mode &= ~S_ISGID;
  if (kills_suid_sgid_ && asks_to_kill_suid_sgid(to_set)) r.mode &= ~suid_sgid_to_kill(req, before);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW)
    r.atime = t;
  else if (to_set & FUSE_SET_ATTR_ATIME)
    r.atime = from_timespec(attr->st_atim);
  if (to_set & FUSE_SET_ATTR_MTIME_NOW)
    r.mtime = t;
  else if (to_set & FUSE_SET_ATTR_MTIME)
    r.mtime = from_timespec(attr->st_mtim);
  if (truncating && !(to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))) r.mtime = t;
  r.ctime = (to_set & FUSE_SET_ATTR_CTIME) ? from_timespec(attr->st_ctim) : t;
}

// A SETATTR put off rather than a commit of its own (on PostgreSQL a round trip
// each, docs/scale-out.md "Round trips"), never a truncate, nor a
// chmod that rewrites an access ACL:
//  - A new file's change (rsync's chown, chmod and utimes after its
//    close), or that of a directory or symlink whose making is put off
//    still (rsync sets a directory's attributes as it makes it): a
//    crash before the next commit removes it whole, so nothing of the
//    crash rules waits on it. With its data still staged it rides with
//    that data's group commit, which stores the record as it then is
//    (group_commit::put_file_record runs under meta_mutex_, so it
//    cannot miss this one); not beside other writers.
//  - Any other inode's change whose loss to a crash takes no protection
//    away: times, and a chmod that only adds permissions (rsync sets a
//    directory's times and mode again once it filled it). A crash
//    before the next commit leaves the old times or the stricter mode,
//    as ext4 does within its commit interval. A chown, or a chmod that
//    takes a permission away or adds the sticky bit, commits at once:
//    it must not come undone. (An inode loaded from the store has its
//    xattr names unknown: a chmod of it commits, as it may have an ACL.)
// Either way until the next commit of any kind (deferred_names.h),
// within -o commit.
bool filesystem::put_off_attributes(fuse_req_t req, const std::shared_ptr<node>& n,
                                    const struct stat* attr, int to_set, store::timestamp t) {
  const bool may_have_acl =
      !n->xattr_names || n->xattr_names->contains(std::string(posix_acl::k_access_name));
  if (n->record.nlink == 0 || ((to_set & FUSE_SET_ATTR_MODE) && may_have_acl)) return false;
  store::inode_record edited = n->record;
  edit_attributes(req, edited, attr, to_set, t, false);
  const bool staged = n->has_staged();
  const bool unmade = n->new_file || deferred_.made(n->ino);
  // The sticky bit restricts (who may delete in a directory): adding it
  // must not come undone either.
  const mode_t taken = n->record.mode & ~edited.mode & 07777;
  const mode_t added = edited.mode & ~n->record.mode & 07777;
  const bool harmless_to_lose = edited.uid == n->record.uid && edited.gid == n->record.gid &&
                                taken == 0 && (added & S_ISVTX) == 0;
  const bool put_off = unmade ? (staged ? !shares_volume() : defers_names())
                              : (!staged && harmless_to_lose && defers_names());
  if (!put_off) return false;
  n->record = edited;
  if (staged) {
    n->record_dirty = true;
  } else {
    deferred_.store_record(n);
    settle_deferred_soon();
  }
  struct stat st = to_stat(n->record);
  fuse_reply_attr(req, &st, options_.attr_timeout);
  return true;
}

// On a ring's thread (serve_changing): only a change that is put off, and
// only while no commit holds the mutex; a parked inode is a store read.
bool filesystem::setattr_here(fuse_req_t req, fuse_ino_t ino, const struct stat* attr, int to_set) {
  if (options_.read_only || (to_set & FUSE_SET_ATTR_SIZE)) return false;
  const std::shared_ptr<node> n = table_.find(ino);
  if (!n) return false;
  std::unique_lock meta(meta_mutex_, std::try_to_lock);
  if (!meta.owns_lock() || n->gone_for_good()) return false;
  try {
    return put_off_attributes(req, n, attr, to_set, now());
  } catch (const std::exception&) {
    return false;  // answered by the full handler, which meets it again
  }
}

void filesystem::setattr(fuse_req_t req, fuse_ino_t ino, const struct stat* attr, int to_set,
                         fuse_file_info* fi) {
  run_op(req, "setattr", [&] {
    // A daemon mounted read-only stays so after `mount -o remount,rw`
    // (docs/mounting.md): chmod, chown, utimes and truncate are refused as
    // creates and writes are.
    if (options_.read_only) throw fs_error(EROFS);
    auto n = get_node(ino);
    const bool truncating = (to_set & FUSE_SET_ATTR_SIZE) != 0;
    std::unique_lock data_lock(n->data_mutex, std::defer_lock);
    if (truncating) {
      if (!n->regular) throw fs_error(EINVAL);  // the kernel answers EISDIR itself
      if (attr->st_size < 0) throw fs_error(EINVAL);
      data_lock.lock();
      data_->wait_in_flight(data_lock, *n);
      shrink_in_batches(*n, static_cast<std::uint64_t>(attr->st_size));
    }
    std::lock_guard meta(meta_mutex_);
    // Purged since get_node (writeback_cache's SETATTR comes without the
    // inode's lock): its record must not be written back.
    if (n->gone_for_good()) throw fs_error(ESTALE);
    const store::timestamp t = now();
    if (!truncating && put_off_attributes(req, n, attr, to_set, t)) return;
    const std::optional<std::uint64_t> new_size =
        truncating ? std::optional(static_cast<std::uint64_t>(attr->st_size)) : std::nullopt;
    store::inode_record r;
    store::inode_record persisted;
    store::transaction txn;
    commit(txn, false, [&](store::transaction& txn) {
      r = record_to_edit(*n);
      edit_attributes(req, r, attr, to_set, t, truncating);
      // A chmod rewrites the access ACL in the same commit (posix_acl_chmod);
      // the kernel drops its cached ACLs after a SETATTR.
      if (to_set & FUSE_SET_ATTR_MODE) chmod_access_acl(*n, r.mode, txn);
      persisted = persistable(*n, r);
      if (new_size) {
        r.stored_bytes = data_->plan_truncate(*n, r.stored_bytes, *new_size, txn);
        r.size = *new_size;
        persisted = r;
        // Staged data below the new end is not committed yet: the persisted
        // size must not claim it (it would read as zeros after a crash).
        persisted.size = n->has_staged() ? std::min(*new_size, n->persisted_size) : *new_size;
      }
      txn.put_inode(persisted);
    });
    if (new_size) {
      data_->apply_truncate(*n, r.size);
      n->persisted_size = persisted.size;
    }
    keep_record(*n, r);
    if (new_size) n->record.size = *new_size;
    n->record_dirty = false;
    struct stat st = to_stat(n->record);
    fuse_reply_attr(req, &st, options_.attr_timeout);
  });
}

void filesystem::kill_suid_sgid(fuse_req_t req, node& n) {
  std::lock_guard meta(meta_mutex_);
  // Almost every write: neither bit, nothing to do.
  if (!(n.record.mode & (S_ISUID | S_ISGID)) || suid_sgid_to_kill(req, n.record) == 0) return;
  store::inode_record r;
  store::transaction txn;
  commit(txn, false, [&](store::transaction& txn) {
    r = record_to_edit(n);
    r.mode &= ~suid_sgid_to_kill(req, r);
    r.ctime = now();
    txn.put_inode(persistable(n, r));
  });
  keep_record(n, r);
  n.record_dirty = false;
}

void filesystem::statfs(fuse_req_t req, fuse_ino_t) {
  run_op(req, "statfs", [&] {
    struct statvfs sv = store_->statvfs();
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
  });
}

}  // namespace densefs::fs
