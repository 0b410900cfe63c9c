// The data path of regular files, beside the FUSE adapter (filesystem.h):
// writes are staged per file in 4 MiB slots, handed to the encoders (the
// worker pool) as each slot fills or the file is closed, cut and encoded
// with no lock held, and committed in groups of many files by the committer
// (write_back.h, group_commit.h); reads are served from staging until the
// data lands, then from the store; a truncate is planned against what is
// committed. docs/design.md, "Write-behind".
//
// What it asks of the file system around it (the metadata lock, commits
// with the file system's own rows, a file's record as it may be changed,
// the new-file rule, releasing files nobody can reach) is its `host`.
//
// Locking: every per-file call is made with the file's node::data_mutex
// held (the lock is passed where the call may release it while it waits);
// the data path takes the host's metadata mutex after it, only to read or
// commit metadata, never across encoding or a pack write: a group's
// payloads go to the packs before it takes any lock (write_payloads_ahead).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/inode_table.h"
#include "fs/latency_histogram.h"
#include "fs/meta_lock.h"
#include "fs/mount.h"
#include "fs/worker_pool.h"
#include "fs/write_back.h"
#include "store/store.h"

namespace densefs::fs {

// A read's reply as pieces (data_path::gather_data).
struct read_gather {
  std::vector<struct iovec> iov;
  std::vector<std::shared_ptr<const std::string>> hold;
};

class data_path {
  friend class group_commit;  // the committer's steps (group_commit.h)

 public:
  // What the data path needs from the file system it serves.
  class host {
   public:
    virtual ~host() = default;
    // Guards every node's record; taken after a file's data_mutex.
    virtual meta_lock& meta_mutex() = 0;
    // Commits `txn` with the file system's own pending rows; `fill` runs
    // inside the store's commit lock beside other writers (store::commit).
    // Caller holds meta_mutex() as a writer; `others`: whether readers may
    // take it during the store's round trip (filesystem::commit).
    virtual void commit(store::transaction& txn, bool sync,
                        const std::function<void(store::transaction&)>& fill,
                        store::payloads_ahead* ahead, while_committing others) = 0;
    // Inside a commit's fill, meta_mutex() held: the record of `n` to
    // change and store (fs_error(ENOENT) when another writer removed it).
    virtual store::inode_record record_to_edit(node& n) = 0;
    // Whether `n` stops being new with a commit that leaves nothing of it
    // staged (`settled`) or some. Caller holds n.data_mutex and meta_mutex().
    virtual bool new_file_ends(const node& n, bool settled) const = 0;
    // Drops `n` once nothing uses it; deletes it when it has no links.
    // Caller holds meta_mutex().
    virtual void maybe_release(const std::shared_ptr<node>& n) = 0;
    // The kernel's cached attributes of `ino` are stale (st_blocks moved).
    virtual void invalidate_attributes(std::uint64_t ino) = 0;
    // A group committed (no lock held); `queued_recompress`: it queued
    // chunks for the background re-encoder.
    virtual void data_committed(bool queued_recompress) = 0;
  };

  // Borrows everything, which must outlive it. `settle` is the committer's
  // (write_back::settle_fn).
  data_path(const mount_options& options, store::store& store, worker_pool& encoders, host& host,
            write_back::settle_fn settle);
  ~data_path();
  data_path(const data_path&) = delete;
  data_path& operator=(const data_path&) = delete;

  // The committer (settle_soon); valid until stop_committer().
  write_back& committer() { return *committer_; }
  // Commits what is queued and stops the committer (unmount, once every
  // file is flushed): a version encoded later commits on its own thread.
  void stop_committer() { committer_.reset(); }

  // --- what -o metrics= serves (docs/metrics.md) ---
  // Each group commit of file data, from its start to its end.
  const latency_histogram& group_commits() const { return group_commits_; }
  // File-data versions (slots) those groups committed: with their count,
  // the mean size of a group.
  std::uint64_t group_commit_slots() const { return group_slots_.load(std::memory_order_relaxed); }
  // Bytes written and handed to the encoders, not committed yet.
  std::size_t staged_bytes() const;

  // --- writes (n.data_mutex held) ---
  // Waits, with the file's lock released, until the bytes staged in flight
  // over all files are under -o max_staged.
  void wait_for_staging_room(std::unique_lock<std::mutex>& lock, node& n);
  void stage_write(std::unique_lock<std::mutex>& lock, node& n, std::uint64_t offset,
                   std::string_view data);
  // Hands every dirty slot of `n` to the encoders.
  void submit_dirty_slots(node& n);
  // Submits every dirty slot and waits until all are committed; returns
  // the first error a background commit hit (0 if none), and clears it
  // when `take_error` (the caller reports it to this file's user).
  int flush_data(std::unique_lock<std::mutex>& lock, node& n, bool take_error = true);
  // close(2) and release: submits the dirty slots and returns without
  // waiting (write-behind); returns an error a background commit hit since
  // the last close or fsync, and clears it if `take_error` (a FLUSH, whose
  // close(2) returns it; a RELEASE without one leaves it for the file's
  // next write, fsync or rename). Takes n.data_mutex.
  int write_behind(node& n, bool take_error = true);
  // The same where it would not wait (filesystem::flush_here and
  // release_here, on a ring's thread): nullopt, having done nothing, where
  // close commits (another client has the volume) or the file's record is
  // to be stored. Caller holds n.data_mutex and the metadata mutex (as a
  // reader at least).
  std::optional<int> write_behind_here(node& n, bool take_error);

  // --- reads (n.data_mutex held) ---
  // [offset, offset + length) of `n` as pieces to reply with
  // (fuse_reply_iov) instead of a copy: pointers into cached chunks and
  // in-flight slots (kept alive by `hold`), copies of dirty slots, and a
  // shared buffer of zeros. With `cached_only`, returns false (out partly
  // filled) instead of decoding a chunk that is not in the chunk cache.
  bool gather_data(node& n, std::uint64_t offset, std::size_t length, read_gather& out,
                   bool cached_only);
  // The same, copied into `out`.
  bool read_data(node& n, std::uint64_t offset, std::size_t length, char* out,
                 bool cached_only = false);

  // --- truncation, in three steps so that a truncate and the attribute
  // changes that come with it are one commit (n.data_mutex held) ---
  // 1. Waits for the encodes in flight.
  void wait_in_flight(std::unique_lock<std::mutex>& lock, node& n);
  // 2. Adds the extent changes to the caller's transaction; returns the
  //    new stored_bytes.
  std::uint64_t plan_truncate(node& n, std::uint64_t stored_bytes, std::uint64_t new_size,
                              store::transaction& txn);
  // 3. After the commit: applies it to the staged data.
  void apply_truncate(node& n, std::uint64_t new_size);

  // Adds to txn the removal of every extent of `ino` that starts in
  // [begin, end), dropping its chunk reference; returns the stored bytes
  // those extents accounted for (to subtract from the inode's stored_bytes).
  std::uint64_t drop_extents(store::transaction& txn, std::uint64_t ino, std::uint64_t begin,
                             std::uint64_t end) const;
  // The same for the given extents of `ino`.
  std::uint64_t drop_extents(store::transaction& txn, std::uint64_t ino,
                             const store::extent_list& extents) const;

 private:
  // How a chunk of a file of `type` is encoded at write time.
  struct chunk_encoding {
    codec::codec_options options;
    bool queue_recompress = false;  // stored fast now, re-encoded in the background
    bool fast_ingest = false;       // -o ingest=fast (not Lepton's own path)
  };
  // `small_file`: the chunk is of a file ingested fast by -o ingest=auto.
  chunk_encoding encoding_for(codec::file_type type, std::string_view plain,
                              bool small_file = false) const;
  // Whether encoding with `options` costs less than a round trip to a
  // metadata server would save: raw, or zstd at a fast level.
  static bool encodes_fast(const codec::codec_options& options);
  void submit_slot(node& n, std::uint64_t slot_index);
  // Moves the slot's dirty buffer in flight and returns the job that
  // encodes it (to submit, or to run with n.data_mutex released).
  std::function<void()> take_slot(node& n, std::uint64_t slot_index);
  // The last bytes of slot index - 1 the chunker looks at before slot
  // `index`, if that slot is staged (a copy); null otherwise.
  std::shared_ptr<const std::string> staged_context(node& n, std::uint64_t index) const;
  // On a worker: cuts and encodes one slot version and hands it to the
  // committer. `before`: the end of the previous slot, as staged when this
  // one was submitted (null: the committed bytes are read), so
  // content-defined cuts line up across slots (codec::chunk_ends).
  void encode_slot(std::shared_ptr<node> n, std::uint64_t slot_index, std::uint64_t gen,
                   std::shared_ptr<const std::string> data, codec::file_type type,
                   std::shared_ptr<const std::string> before, bool small_file);
  // Encodes chunk `c` of a slot's `data`, named already (store::name_chunk).
  void encode_slot_chunk(slot_chunk& c, const std::string& data, codec::file_type type,
                         bool small_file) const;
  // On the committer thread: one transaction for a group of encoded slot
  // versions of any files (group_commit.h).
  void commit_group(std::vector<encoded_slot>& group);
  // Before a group commit takes its locks: the payloads its commit may
  // store (store::write_payloads_ahead). Empty when that fails (the commit
  // then writes them itself and reports the error).
  // `known`: the records of the group's chunks, read since.
  store::payloads_ahead write_payloads_ahead(const std::vector<encoded_slot>& group,
                                             const store::chunk_records* known);
  // With nothing staged: stores the record if the size or attributes in
  // memory are ahead of the store. Takes the metadata mutex.
  void store_record_if_settled(node& n);
  // Caller holds the metadata mutex; `others`: readers_pass lets readers
  // in during the store call while `n` is open (then it stays in the table).
  void store_record_if_settled_locked(node& n, while_committing others);
  // Whether there is such a record (or a new file's end) to store; caller
  // holds the metadata mutex, as a reader at least.
  bool record_unsettled(const node& n) const;
  // Bytes in flight are handed back by a group commit (after its locks).
  void release_in_flight(std::size_t bytes);

  const mount_options& options_;
  store::store& store_;
  worker_pool& encoders_;
  host& host_;
  // Group commits of encoded file data (write_back.h); null once stopped.
  std::unique_ptr<write_back> committer_;

  // Global bound on bytes in flight (handed to the encoders, not yet
  // committed) across all files: -o max_staged.
  mutable std::mutex staging_mutex_;
  std::condition_variable staging_cv_;
  std::size_t in_flight_bytes_ = 0;

  latency_histogram group_commits_;
  std::atomic<std::uint64_t> group_slots_{0};
};

}  // namespace densefs::fs
