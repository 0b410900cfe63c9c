// The densefs file system: POSIX semantics on top of a store. Each FUSE
// operation family lives in its own file (ops_attr.cpp, ops_dir.cpp,
// ops_file.cpp, ops_xattr.cpp); the data of regular files (staging,
// encoding, group commit, truncation) is the data path beside it
// (data_path.h), whose host it is; the session and the C callback table
// are in mount.cpp.
#pragma once

#define FUSE_USE_VERSION 314
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fs/data_path.h"
#include "fs/deferred_names.h"
#include "fs/fs_error.h"
#include "fs/garbage_collector.h"
#include "fs/idle_spinner.h"
#include "fs/inode_table.h"
#include "fs/lock_waiters.h"
#include "fs/meta_lock.h"
#include "fs/mount.h"
#include "fs/posix_acl.h"
#include "fs/read_ahead.h"
#include "fs/recompressor.h"
#include "fs/request_counts.h"
#include "fs/ring_helpers.h"
#include "fs/snapshot_tree.h"
#include "fs/stall_watchdog.h"
#include "fs/worker_pool.h"
#include "fs/write_back.h"
#include "store/store.h"

namespace densefs::fs {

class control_server;

class filesystem final : private data_path::host {
 public:
  explicit filesystem(const mount_options& options);
  ~filesystem();

  // After daemonizing: adopts the opened store and starts the worker pool.
  void start(std::unique_ptr<store::store> store);
  // Flushes everything staged and stops the workers (unmount, SIGTERM).
  void shutdown();
  void set_session(fuse_session* se) { session_ = se; }
  // Control-socket requests that need the running file system
  // ("recompress", "gc").
  void register_control_handlers(control_server& server);
  // Stops a garbage collection in progress (background or a control
  // request) so that unmounting does not wait for it; at unmount, before
  // the control server stops.
  void cancel_gc();
  // Requests received since mount, by kind (counted in fs/mount.cpp).
  request_counts& requests() { return requests_; }
  // -o metrics=: this mount's metrics in the Prometheus text format
  // (docs/metrics.md), and the walk of the store's totals they serve as
  // of its last run (the metrics server's refresher calls it each minute).
  std::string metrics_text() const;
  // Returns when to walk again: a minute, or ten times the walk's own
  // time on a volume where it is long, so it never takes the machine.
  std::chrono::seconds refresh_metrics_totals();
  idle_spinner& spinner() { return spinner_; }
  // The hidden `.snapshots` directory (null on a snapshot's mount): the
  // requests for its inodes go there (fs/mount.cpp).
  snapshot_tree* snapshots() { return snapshots_.get(); }
  stall_watchdog& watchdog() { return watchdog_; }

  // Whether a request that changes something (fs/mount.cpp,
  // serve_changing) is handed to the ring helpers rather than handled on
  // this thread: only a request that came through an io_uring ring, whose
  // thread serves every request from its core, and only where a change may
  // wait for the network (records in PostgreSQL, packs in object storage;
  // DENSEFS_RING_OFFLOAD=always|never overrides for tests). Every such
  // change, not only those that look as if they would wait: almost any of
  // them may start or join a commit, and one left on the ring during a
  // partition holds its core's reads for the whole cut (tried: handing off
  // only while a commit was under way left a create on the ring, and a
  // read from its core waited 28.8 s). The exceptions are the *_here
  // functions below, which decide with try-locks and what is in memory,
  // never a store call. A hand-off costs two thread wake-ups, 30-70 us on
  // the development VM (docs/scale-out.md, "Changes answered on the
  // ring"). Over /dev/fuse each request has a thread of its own already,
  // and libfuse reuses the buffer its arguments are in once the handler
  // returns.
  bool hands_off(fuse_req_t req) const;
  // Runs `job` on the ring helpers (or here before start()).
  void run_off_ring(std::function<void()> job);
  // The changes a ring's thread answers itself before it hands one off
  // (serve_changing), sparing the hand-off's two wake-ups: rsync's chmod
  // and utimes put off until the next commit, and closes with nothing to
  // store. Each answers and returns true only where nothing would wait:
  // the locks a commit may hold across its round trip are tried, never
  // waited for, and any path to the store, to another client or to a
  // lock table is left to the full handler. On false nothing is answered,
  // and nothing is changed that the full handler would not do the same
  // (an exception in flush_here may leave dirty slots handed to the
  // encoders, which the full flush would have done first).
  bool setattr_here(fuse_req_t req, fuse_ino_t ino, const struct stat* attr, int to_set);
  bool flush_here(fuse_req_t req, fuse_ino_t ino, const fuse_file_info& fi);
  bool release_here(fuse_req_t req, fuse_ino_t ino, const fuse_file_info& fi);

  // Parks idle nodes once more than the resident limit are in memory
  // (inode_table::park; docs/design.md, "Inodes in memory"). After every
  // request, with no lock held and no node of the request's still held.
  void park_idle_nodes() noexcept;

  // The requester's groups and CAP_FSETID, for the kernel's
  // in_group_or_capable rules (setgid clearing): FUSE passes only the
  // fsuid, fsgid and thread id, so they are read from /proc (ops_xattr.cpp).
  static posix_acl::caller_credentials caller_credentials(fuse_req_t req);

  // FUSE operations (one reply on every path; see run_op in ops_common.h).
  void init(fuse_conn_info* conn);
  void lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void forget(fuse_ino_t ino, std::uint64_t nlookup);
  void getattr(fuse_req_t req, fuse_ino_t ino);
  void setattr(fuse_req_t req, fuse_ino_t ino, const struct stat* attr, int to_set,
               fuse_file_info* fi);
  void readlink(fuse_req_t req, fuse_ino_t ino);
  void mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev);
  void mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
  void unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
  void rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
  void symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name);
  void rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags);
  void link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname);
  void open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
  // True when the reply is left to the decode pool, which counts the
  // request (request_counts) once it has answered.
  bool read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi);
  void write(fuse_req_t req, fuse_ino_t ino, const char* buf, std::size_t size, off_t off,
             fuse_file_info* fi);
  void flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  // fsync and fsyncdir answer from a pool of their own, which counts the
  // request (run_sync_request).
  void fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
  void opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi,
               bool plus);
  void releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
  void statfs(fuse_req_t req, fuse_ino_t ino);
  void setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                std::size_t size, int flags);
  void getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size);
  void listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size);
  void removexattr(fuse_req_t req, fuse_ino_t ino, const char* name);
  void fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                 fuse_file_info* fi);
  void copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, fuse_file_info* fi_in,
                       fuse_ino_t ino_out, off_t off_out, fuse_file_info* fi_out, std::size_t len,
                       int flags);
  // Locks (ops_lock.cpp): served only where every client of the volume
  // must see them (serves_locks()); elsewhere the kernel keeps them.
  void getlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock);
  void setlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, bool sleep);
  void flock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op);

 private:
  // --- inodes (ops_attr.cpp) ---
  std::shared_ptr<node> get_node(std::uint64_t ino);  // loads from the store if needed
  struct stat to_stat(const store::inode_record& r) const;
  fuse_entry_param entry_for(const node& n) const;  // caller holds meta_mutex_
  // Replies with an entry for `n` and counts the lookup.
  void reply_entry(fuse_req_t req, const std::shared_ptr<node>& n);
  // Clears the suid and sgid bits a write by this caller takes away (the
  // kernel asked: KILLPRIV_V2's kill_suidgid), in a commit of their own.
  void kill_suid_sgid(fuse_req_t req, node& n);
  // What a SETATTR asks (`to_set` of `attr`) applied to `r`, at time `t`:
  // modes, owners, times, and the bits the kernel leaves to us to drop.
  void edit_attributes(fuse_req_t req, store::inode_record& r, const struct stat* attr, int to_set,
                       store::timestamp t, bool truncating) const;
  // A SETATTR that is no truncate, put off until the next commit and
  // answered where that is safe (setattr says when); false where it must
  // commit now. Caller holds meta_mutex_ as a writer.
  bool put_off_attributes(fuse_req_t req, const std::shared_ptr<node>& n, const struct stat* attr,
                          int to_set, store::timestamp t);
  // A copy of n's record safe to persist: size never ahead of committed data.
  store::inode_record persistable(const node& n, store::inode_record r) const;
  // Drops the node from memory once the kernel and open files are done
  // with it; deletes it from the store if it has no links left.
  void maybe_release(const std::shared_ptr<node>& n) override;  // caller holds meta_mutex_
  void purge(store::transaction& txn, node& n);                 // delete data + inode
  // The same, given all of the file's extents (already read).
  void purge(store::transaction& txn, node& n, const store::extent_list& extents);
  // A file with millions of extents (a 100 GiB image in 32 KiB chunks) is
  // not deleted in one transaction: its extents go k_purge_batch at a time,
  // each batch its own commit, while the inode stays in the orphan list, so
  // a crash in between leaves an orphan the next mount finishes.
  static constexpr std::size_t k_purge_batch = 16384;
  // All of the file's extents if they are at most one batch, else nothing.
  std::optional<store::extent_list> extents_if_one_batch(std::uint64_t ino) const;
  // `n` losing its last link (unlink, a rename over it), caller holds
  // meta_mutex_: its extents when its records may go in that same commit,
  // so an unlink is one commit (docs/scale-out.md, "Round trips"). It may
  // when nothing has it open here or on another client, nothing of it is
  // staged and it has at most one batch of extents, even while the kernel
  // still knows the inode (alone on the volume): only a file handle or a request racing the
  // unlink can reach it then, and get_node answers ESTALE, as NFS does.
  // nullopt: it stays an orphan until its last forget (maybe_release).
  std::optional<store::extent_list> purgeable_now(const node& n) const;
  // Before a truncate to `new_size` (data_mutex held, meta_mutex_ not):
  // drops the extents past it from the end, a batch per commit, lowering
  // the persisted size with each, until one batch is left for
  // plan_truncate. A crash in between leaves the file cut part of the way.
  void shrink_in_batches(node& n, std::uint64_t new_size);
  // Takes meta_mutex_ per batch, until one batch at most is left.
  void drop_orphan_extents_in_batches(std::uint64_t ino);
  // Inside a commit's fill: deletes orphan `n` as the store has it now
  // (its extents read now; only its orphan row when another writer has
  // released or linked it meanwhile). False, adding nothing, when it has
  // more extents than one batch.
  bool purge_orphan_now(store::transaction& txn, node& n);
  // On a worker: the batches, then purge() of the rest and the inode.
  void release_big_orphan(const store::inode_record& r);

  // --- unlinked files on a volume other clients mount (shared_orphans.cpp) ---
  // Whether an unlinked file must keep its data after this daemon's last use
  // of it: on a follower always (the writer releases it), on the writer
  // while another client is mounted (it may have the file open).
  bool others_may_hold(const node& n) const;
  // The writer: keeps orphan `ino` at least other_clients_grace() from now,
  // and as long as a live session holds it.
  void defer_orphan(std::uint64_t ino);
  // all_not_here: every orphan in the store but those this daemon still
  // uses (a writer beside others, after a heartbeat).
  enum class orphan_scan { whole_store, deferred, all_not_here };
  // The writer: releases the orphans (all in the store, or those deferred)
  // that no client can use any more; at mount, at unmount and after every
  // heartbeat.
  void release_orphans(orphan_scan scan);
  // After a heartbeat: release_orphans(deferred) on a worker, one at a time
  // (thousands of files removed at once must not delay the heartbeats).
  void release_deferred_orphans_later();
  std::atomic<bool> releasing_orphans_{false};
  // A follower: holds `n` when it is open here and the writer unlinked it
  // (after an open or a change notice re-read its record)...
  void hold_if_unlinked(node& n);
  // ...and lets it go at the last close. Every close of a handle: one open
  // less (and one writer less for a handle open for writing), and the node
  // released when nothing uses it.
  void close_handle(const std::shared_ptr<node>& n, bool writer);
  // The same with meta_mutex_ held (as a reader at least): true when the
  // hold is to be let go of (erase_hold, a round trip, without the mutex).
  bool close_handle_locked(const std::shared_ptr<node>& n, bool writer);
  void erase_hold(std::uint64_t ino);  // caller holds holds_mutex_
  std::mutex deferred_mutex_;
  std::map<std::uint64_t, std::chrono::steady_clock::time_point> deferred_orphans_;
  // A follower's hold rows are written and erased one at a time, in the
  // order of the decisions; taken before meta_mutex_.
  std::mutex holds_mutex_;
  // A follower (fs/follower.cpp): another client committed `c`. The
  // writer: `c` names followers that just mounted.
  void apply_remote_change(const store::change_notice& c);
  void answer_new_clients(const std::vector<std::string>& sessions);
  // Re-reads n's record (close-to-open). `gone`: the writer released the
  // file (unlinked, and no client held it open).
  enum class refreshed { unchanged, changed, gone };
  refreshed refresh_from_store(node& n);
  // Commits `txn`; `fill` adds what depends on records other writers of a
  // shared volume may change, read inside the commit's lock (store::commit;
  // fs/shared_writers.cpp). Caller holds meta_mutex_.
  // Every commit also clears the rows of new files that ended since the
  // last one (end_new_file_locked), and stores first the names and
  // records put off (deferred_names.h).
  // `ahead`: its payloads, written before the caller took meta_mutex_.
  // `others`: readers_pass lets readers take meta_mutex_ during the store
  // call (alone only; writers wait). Only for a commit whose every inode
  // record is of a node that stays in the table and whose every entry is
  // one put off (deferred_ answers for it until meta_gen_ moves), which
  // changes no memory before the call returns: a reader then sees the
  // store before or after it, and the same answer.
  void commit(store::transaction& txn, bool sync = false,
              const std::function<void(store::transaction&)>& fill = {},
              store::payloads_ahead* ahead = nullptr,
              while_committing others = while_committing::all_wait) override;
  // Inside a rename's fill beside other writers: EINVAL when `moved_dir`
  // is `new_parent` or one of its ancestors, as the store has them now.
  void refuse_loop(std::uint64_t moved_dir, std::uint64_t new_parent);
  // --- several writers of one volume (shared_writers.cpp) ---
  bool shares_volume() const { return store_->writes_beside_others(); }
  // Inside a commit's fill, meta_mutex_ held: the record of `n` to change
  // and store. Alone, n's own record. Beside other writers, the store's
  // record as of now (throws ENOENT if another writer removed it), with
  // this daemon's data not committed yet on top (size as persisted, mtime
  // of its writes); n's record takes the rest (mode, owners, links, times
  // another writer set).
  store::inode_record record_to_edit(node& n) override;
  // A file this daemon writes: with data, a size or times not committed
  // yet. Its size, mtime and atime are this
  // daemon's until its commits store them (the last close wins, as on
  // NFS). Caller holds meta_mutex_ (n.size is under data_mutex, which a
  // fill cannot take: meta_mutex_ comes after it).
  static bool has_own_data(const node& n);
  // Onto `r` (the store's record of a file with data of its own here): the
  // times of `own`, this daemon's record.
  static void keep_own_times(const store::inode_record& own, store::inode_record& r);
  // After the commit: `r` (from record_to_edit) becomes n's record; beside
  // other writers the node keeps its size (its reads stop there), which
  // refresh_from_store moves with another writer's.
  void keep_record(node& n, const store::inode_record& r);
  // The node for `ino`, made from `fetched` (read without meta_mutex_) if
  // the table lacks it. Caller holds meta_mutex_ and has checked that
  // meta_gen_ did not move since before the read (see lookup).
  std::shared_ptr<node> node_from(std::uint64_t ino, const store::inode_record& fetched);
  // Tells the kernel to drop the attributes it caches for `ino` (changed
  // behind its back: stored size after a background commit).
  void invalidate_attributes(std::uint64_t ino) override;
  // ...and the listing it caches for directory `ino`. Not while the kernel
  // may wait on us holding a lock of that directory's pages.
  void invalidate_listing(std::uint64_t ino);

  // --- namespace helpers (ops_dir.cpp) ---
  // `new_file`: a regular file opened by its create, whose data follows:
  // marked as new in the same commit (node::new_file).
  std::shared_ptr<node> make_node(fuse_req_t req, node& parent, const char* name, mode_t mode,
                                  dev_t rdev, std::string_view symlink_target,
                                  bool new_file = false);
  void check_name(const char* name) const;
  // --- names put off until the next commit (fs/deferred_names.h) ---
  // Whether creates and renames of new files may be put off now: a writer
  // with no other client of the volume (they read the store).
  bool defers_names() const;
  // The entry at `name` in `parent` as the next commit leaves it: what is
  // put off, else the store's. Caller holds meta_mutex_.
  std::optional<store::dirent_record> entry_at(std::uint64_t parent, std::string_view name);
  // Before a request reads the store by name or lists a directory: commits
  // what is put off, if anything (throws what the commit throws). Caller
  // holds meta_mutex_ as a writer, or not (the unlocked form takes it).
  // Readers pass its round trip (meta_lock.h).
  void commit_deferred_locked();
  void commit_deferred();
  // Put off: the committer's settle commits it within -o commit=SEC.
  void settle_deferred_soon();
  // A rename of a new file to a free name, put off; false when it cannot
  // be (the caller commits it as before). No lock held.
  bool rename_put_off(std::uint64_t parent, const char* name, std::uint64_t newparent,
                      const char* newname);
  deferred_names deferred_;  // guarded by meta_mutex_
  // Before a rename: commits the staged data of the file `name` in `parent`
  // names, if it has any (write-behind ordering), unless `may_stay_staged`
  // and the file is new: then its data stays staged, the rename moves its
  // new-file row with its name, and the group commit that stores the data
  // ends it. Returns whether the data stayed staged. No lock held.
  bool land_before_rename(std::uint64_t parent, const char* name, bool may_stay_staged);
  // Whether a handle opened with `fi` can do without FLUSH at close(2)
  // (fi->noflush): a reader's always, a writer's alone on the volume
  // (ops_file.cpp says why).
  bool needs_no_flush(const fuse_file_info& fi) const;
  // readdir's listing of `dir`: the cached one unless the directory changed
  // since it was read (node::dir_version). Takes dir.listing_mutex.
  std::shared_ptr<const dir_listing> listing_of(node& dir);
  struct readdir_pick {
    std::uint64_t cookie;
    const char* name;
    std::uint64_t ino;
    std::uint32_t type;
  };
  // Encodes `batch` as readdirplus entries (skipping those removed since the
  // listing was read) and counts their lookups; returns the bytes used.
  std::size_t fill_plus(fuse_req_t req, std::uint64_t dir, const std::vector<readdir_pick>& batch,
                        char* buffer, std::size_t size,
                        std::vector<std::shared_ptr<node>>& counted);
  // After a commit that changed the entries of `dir` (caller holds
  // meta_mutex_).
  static void entries_changed(node& dir) {
    dir.dir_version.fetch_add(1, std::memory_order_release);
  }
  // How `n` is stored (docs/mounting.md, "densefs info"). The chunk list
  // stops once it takes `max_chunk_list_bytes` of JSON ("chunks_truncated";
  // the counts still cover every chunk): an xattr value is at most 64 KiB.
  std::string info_json(node& n, std::size_t max_chunk_list_bytes);
  // The store's statistics (store::to_json) plus this mount's request
  // counts and time ("requests": {kind: count}, "request_seconds": {kind:
  // seconds in the daemon}).
  std::string stats_json() const;
  // user.densefs.stats: a size query's value kept for the read after it.
  std::string stats_value(bool size_query);
  std::mutex stats_snapshot_mutex_;
  std::optional<std::string> stats_snapshot_;
  std::chrono::steady_clock::time_point stats_snapshot_time_;
  // -o metrics=: the store's statistics, a walk of its records taken apart
  // from the scrapes (refresh_metrics_totals). The mutex guards the copy
  // in and out, never the walk.
  mutable std::mutex metrics_totals_mutex_;
  std::optional<store::store_stats> metrics_totals_;
  std::chrono::steady_clock::time_point metrics_totals_time_;

  // --- POSIX ACLs (ops_xattr.cpp; the rules are in posix_acl.h) ---
  // A stored xattr of `n`, through its cached name set (caller holds
  // meta_mutex_).
  std::optional<std::string> stored_xattr(node& n, std::string_view name);
  void set_posix_acl(fuse_req_t req, node& n, std::string_view name, std::string_view value,
                     int flags);  // caller holds meta_mutex_
  // What a new inode of `mode` in `parent` gets: `mode` narrowed by the
  // parent's default ACL, or else by the caller's umask, and the ACL
  // xattrs to store with it. Caller holds meta_mutex_.
  struct new_inode_acls {
    mode_t mode;
    std::optional<std::string> access;
    std::optional<std::string> default_acl;  // directories inherit it as is
  };
  new_inode_acls acls_for_new_inode(fuse_req_t req, node& parent, mode_t mode);
  // chmod's update of the access ACL, added to `txn` (caller holds
  // meta_mutex_): the owner, other and mask (or group) entries follow the
  // new mode.
  void chmod_access_acl(node& n, mode_t mode, store::transaction& txn);

  // --- file data (ops_file.cpp; the data path itself is data_path.h) ---
  // Reads: replies with [off, off + size) of `n`, or with
  // `cached_only` returns false without replying when a chunk needs a
  // decode; decode_chunks decodes a range's chunks into the chunk cache.
  // `file_size` (optional) gets the file's size as the read saw it.
  bool reply_read(fuse_req_t req, node& n, std::size_t size, off_t off, bool cached_only,
                  std::uint64_t* file_size = nullptr);
  void decode_chunks(std::uint64_t ino, std::uint64_t offset, std::size_t size) const;
  // A read at the start of `n` missed the chunk cache: the files after it
  // in its directory's listing are prefetched (read_ahead::note_cold_file).
  void prefetch_siblings(const node& n);
  // `dir`'s regular files in readdir's order and by name, read from the
  // store for the sibling prefetch of a reader that did not list it;
  // nullopt for a directory too big to remember (fs/read_ahead.h).
  std::optional<read_ahead::listing_orders> listing_orders(std::uint64_t dir) const;
  // Bytes of [begin, end) that committed extents hold (not holes).
  std::uint64_t stored_bytes_in(std::uint64_t ino, std::uint64_t begin, std::uint64_t end) const;

  // --- new files (new_files.cpp) ---
  // New files (node::new_file). A file stays new until its data as of its
  // last close is committed: the group commit that stores it, or its last
  // release when nothing is staged, ends that in the same commit; so do an
  // fsync (everything), a rename of it over another file or a link of it
  // (its data is committed first), its deletion, and unmount. A file kept
  // open for writing longer than k_new_file_grace ends it at its next group
  // commit, so that a log written for hours is not removed by a crash.
  static constexpr std::chrono::seconds k_new_file_grace{30};
  // Whether `n` stops being new with a commit that leaves nothing of it
  // staged (`settled`), or that leaves some. Caller holds n.data_mutex and
  // meta_mutex_.
  bool new_file_ends(const node& n, bool settled) const override;
  // After the last release of `n`: ends its being new if nothing is staged.
  void settle_new_file(node& n);
  // The same with n.data_mutex and meta_mutex_ (as a writer) held.
  void settle_new_file_locked(node& n);
  // Ends the being new of `n`, whose data is all committed (its last
  // release, or leaving the node table with nothing staged): its row is
  // cleared by the next commit of any kind (commit() adds it), or by the
  // committer once the commit interval has passed (write_back::
  // settle_soon), rather than by a commit of its own: a create and close
  // of an empty file is then one commit, not two (on PostgreSQL each is a
  // round trip). A crash before that removes the file (absent, which the
  // rule allows), as a crash within ext4's commit interval loses a file
  // closed without fsync. Caller holds n.data_mutex and meta_mutex_.
  void end_new_file_locked(node& n);
  // The committer's settle: commits the rows put off above and the names
  // put off (deferred_), if no commit took them first. Logs a failure (the
  // next commit or settle tries again). Takes meta_mutex_; the _locked
  // form is for a caller that holds it; `others`: whether readers may pass
  // its round trip (filesystem::commit).
  void commit_put_off();
  void commit_put_off_locked(while_committing others);
  std::mutex ended_new_files_mutex_;  // a leaf: held only to take or add
  std::vector<std::uint64_t> ended_new_files_;
  // The data path's committer while it takes settle_soon(); null from the
  // start of shutdown, which clears the rows itself (read from any thread,
  // so not through data_).
  std::atomic<write_back*> settle_committer_{nullptr};
  // fsync of `own`, fsyncdir, `densefs sync`, unmount (`own` null): ends
  // the being new of every file whose data is all committed and that no
  // handle has open for writing (but `own`), from the store's rows, so
  // that a file whose node left the table is not missed. Takes the files'
  // data_mutex and meta_mutex_.
  void settle_new_files(const node* own, bool unmounting = false);
  // At mount: files still new after a crash are removed (their names, then
  // their data as orphans), so that no name is found empty or cut short.
  // Beside other writers, only those of writers whose session is gone, at
  // mount and again after every heartbeat (`at_mount` false: the names
  // then leave this daemon's table and the kernel too).
  void remove_unfinished_new_files(bool at_mount = true);
  // fsync, fsyncdir, `densefs sync`, the stats xattr: every file's staged
  // data committed (not synced: the caller syncs when it must). Returns
  // `own`'s error (cleared), never the others' (kept for them); with no
  // `own`, the first error of any file (kept).
  int sync_all(const node* own);
  // Background re-encoding of one queued chunk (recompressor threads).
  void recompress_chunk(const store::recompress_item& item);
  // `references`: the file that queued the chunk still uses it, so its
  // stored_bytes gets the saving.
  void commit_on_worker(const store::recompress_item& item, store::transaction txn,
                        std::uint64_t saved, bool fell_back, bool references);
  void commit_recompressed(const store::recompress_item& item, store::transaction txn,
                           std::uint64_t saved, bool fell_back, bool references);
  // Open and create: keep the kernel's cached pages of `n` only where they
  // are known to be fresh (ops_file.cpp explains). Caller holds meta_mutex_.
  void choose_page_cache(node& n, fuse_file_info* fi) const;
  // The top bit of a file handle's fh (below it, choose_page_cache's
  // version): opened read-only. FLUSH carries no open flags, and where
  // locks are served a reader's close sends one (needs_no_flush): it must
  // not take or wait for the writers' data.
  static constexpr std::uint64_t k_read_only_handle = 1ULL << 63;
  static void mark_read_only(fuse_file_info* fi) {
    if ((fi->flags & O_ACCMODE) == O_RDONLY) fi->fh |= k_read_only_handle;
  }
  // Flush and release of a handle from choose_page_cache: records the
  // version it vouches for. Takes meta_mutex_ (the _locked one: caller
  // holds it, as a reader at least).
  void vouch_for_cache(node& n, const fuse_file_info* fi);
  void vouch_for_cache_locked(node& n, const fuse_file_info* fi);
  // -o relatime: sets n's atime to now when it is not newer than mtime or
  // ctime or is a day old (-o strictatime: always); true if it did (the caller then invalidates the
  // kernel's attributes, outside the mutex). Caller holds meta_mutex_.
  bool touch_atime(node& n) const;
  // sync_all, then the store synced: fsync, fsyncdir, `densefs sync`.
  int sync_everything(const node* own);

  mount_options options_;
  request_counts requests_;
  idle_spinner spinner_;
  stall_watchdog watchdog_;
  fuse_session* session_ = nullptr;
  std::unique_ptr<store::store> store_;
  std::unique_ptr<worker_pool> workers_;
  // fsync and fsyncdir run here, off the FUSE thread: over io_uring a
  // ring's thread runs each request's handler itself, so a stat or a read
  // from the same core would wait for the fsync's commits (a round trip
  // each on PostgreSQL). Not the encoders' pool: an fsync waits for them.
  std::unique_ptr<worker_pool> syncs_;
  static constexpr unsigned k_sync_threads = 4;  // more fsyncs queue: one commit serves them
  // Requests handed off the io_uring rings (hands_off): a pool per ring
  // thread, as many threads as the ring has entries, so a job never queues
  // behind another that waits (a ring entry stays taken until its request
  // is answered). Null where nothing is handed off.
  std::unique_ptr<ring_helpers> ring_jobs_;
  std::atomic<std::uint64_t> requests_off_ring_{0};  // densefs stats
  // Runs `sync` on syncs_ (or here before start()), answers req with the
  // errno it returns or throws, and counts the request as `kind`, with its
  // time from now to the answer.
  void run_sync_request(fuse_req_t req, fuse_request kind, const char* op,
                        std::function<int()> sync);
  // Regular files' data: staging, encoding, group commits (data_path.h).
  std::unique_ptr<data_path> data_;
  // `.snapshots` (after store_: it reads through it).
  std::unique_ptr<snapshot_tree> snapshots_;
  // data_path::host, beyond the methods above of the same names.
  meta_lock& meta_mutex() override { return meta_mutex_; }
  void data_committed(bool queued_recompress) override;
  std::unique_ptr<recompressor> recompressor_;
  // Automatic garbage collection (not on a read-only mount).
  std::unique_ptr<garbage_collector> gc_;
  // The control socket's "gc" request (gc_control.cpp).
  void register_gc_handler(control_server& server);
  // The control socket's "sync" request (sync_control.cpp): `densefs sync`.
  void register_sync_handler(control_server& server);
  // The control socket's "snapshot" request (snapshot_control.cpp):
  // `densefs snapshot` on this mount.
  void register_snapshot_handler(control_server& server);
  // Decodes chunks for reads that miss the chunk cache (one thread per core).
  std::unique_ptr<worker_pool> decoders_;
  // Sequential read detection and prefetch (none without a chunk cache).
  std::unique_ptr<read_ahead> read_ahead_;
  // Writers take it whole; readers (getattr, lookup, open, ...) may pass
  // a commit's store call (fs/meta_lock.h, filesystem::commit).
  meta_lock meta_mutex_;
  // Nodes forgotten or closed while a commit let readers in: released
  // once it has applied (maybe_release may commit). Guarded by
  // meta_mutex_.
  std::vector<std::shared_ptr<node>> release_after_commit_;
  // maybe_release(n) now, or after the commit that let readers in; caller
  // holds meta_mutex_ (as a reader at least).
  void release_when_unused(const std::shared_ptr<node>& n);
  // Queues n for the release at the end of the current commit; the
  // overload without a node makes those releases (logging failures).
  void release_after_commit(const std::shared_ptr<node>& n);
  void release_after_commit() noexcept;
  // Bumped after every commit (all of which change inodes or entries under
  // meta_mutex_): lookup and readdirplus read the store without the mutex,
  // then take it and check this did not move, or read again under it. A
  // commit that lets readers in bumps it once it has the mutex back; what
  // such a reader read meanwhile is the same before and after the commit
  // (filesystem::commit).
  std::atomic<std::uint64_t> meta_gen_{0};
  // The kernel opens directories without asking (FUSE_CAP_NO_OPENDIR_SUPPORT):
  // opendir answers ENOSYS once.
  bool no_opendir_ = false;
  // The kernel leaves clearing suid and sgid to us (FUSE_CAP_HANDLE_KILLPRIV_V2,
  // set in init): a WRITE says so with kill_suidgid, a truncate or chown
  // with FUSE_SET_ATTR_KILL_SUID, any other change with a SETATTR of no
  // attribute (ops_attr.cpp, suid_sgid_to_kill).
  bool kills_suid_sgid_ = false;
  // The kernel opens files without asking (FUSE's no_open; a read-only
  // mount, set in init): OPEN and FLUSH answer ENOSYS once, and after that
  // no open or close of a file is a request. docs/read-path.md, "Opens".
  bool kernel_opens_ = false;
  // --- locks (ops_lock.cpp) ---
  // Set by init(): this mount keeps flock and fcntl locks in the volume's
  // database (a volume in PostgreSQL, without -o local_locks).
  bool serves_locks_ = false;
  std::unique_ptr<lock_waiters> lock_waiters_;  // with serves_locks_
  void set_lock(fuse_req_t req, const store::lock_request& r, bool wait);
  // Whether a close of `ino` may let go of a lock kept in the volume's
  // database (release_locks then costs a round trip).
  bool close_may_unlock(fuse_ino_t ino);
  // At a FLUSH (`last_of_handle` false) or a RELEASE: the locks that go
  // with that close; `last_here`: the file's last close on this client.
  void release_locks(fuse_ino_t ino, const fuse_file_info& fi, bool last_of_handle,
                     bool last_here = false);
  // The kernel enforces POSIX ACLs (FUSE_CAP_POSIX_ACL) and leaves the umask
  // to us (FUSE_CAP_DONT_MASK): set in init when it offers both. Without
  // them ACL xattrs are refused (EOPNOTSUPP), never stored unenforced.
  bool posix_acl_ = false;
  inode_table table_;
  // Nodes kept in memory before idle ones are parked, and the count that
  // starts the next park (raised while many nodes stay busy, so that a
  // park does not look at them after every request).
  const std::size_t resident_limit_;
  std::atomic<std::size_t> park_above_;
  // A node nothing needs in full: what parking it loses (its record, page
  // state, listing) is in the store or known fresh. Caller holds meta_mutex_.
  bool parkable(node& n) const;
};

// The current time as a store timestamp.
store::timestamp now();

}  // namespace densefs::fs
