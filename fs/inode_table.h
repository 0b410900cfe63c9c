// In-memory inodes the kernel knows about (lookup counts) or that are open,
// and the file data staged for them.
//
// Locking (always in this order, never the reverse):
//   node::data_mutex  -> filesystem::meta_mutex_ -> inode_table::mutex_
//   node::listing_mutex -> filesystem::meta_mutex_
// data_mutex guards a regular file's staged data and `size`; meta_mutex
// guards every node's `record`, lookups, opens, and all metadata commits;
// listing_mutex guards a directory's cached listing (readdir).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/records.h"

namespace densefs::fs {

// One 4 MiB slot of a file (slot i covers [i * k_chunk_size, (i+1) * k_chunk_size)).
struct staged_slot {
  // Bytes written but not yet handed to the encoder, from the slot's start.
  // Bytes past its end (up to the file size) read as zeros. Null when clean.
  std::shared_ptr<std::string> dirty;
  std::uint64_t dirty_gen = 0;
  // Versions handed to the encoder and not yet committed, by generation.
  // Reads use the newest; commits of older generations are dropped.
  // A commit of generation g drops every entry <= g: an older version must
  // never serve a read or become the base of a new write once a newer one
  // has landed.
  std::map<std::uint64_t, std::shared_ptr<const std::string>> in_flight;
  std::uint64_t committed_gen = 0;
  // Encode jobs still running for this slot, obsolete ones included: the
  // slot (and its committed_gen) must outlive them.
  std::size_t jobs = 0;

  bool empty() const { return !dirty && in_flight.empty() && jobs == 0; }
};

// A directory's entries as readdir hands them out: ordered by cookie, a
// hash of the name, so that an offset the kernel (or telldir) got earlier
// still means the same place after entries come and go.
struct dir_listing {
  struct entry {
    std::uint64_t cookie;
    std::string name;
    std::uint64_t ino;
    std::uint32_t type;
  };
  std::vector<entry> entries;
};

struct node : std::enable_shared_from_this<node> {
  explicit node(const store::inode_record& r)
      : ino(r.ino), regular(S_ISREG(r.mode)), record(r), size(r.size), type(r.type) {}

  const std::uint64_t ino;
  const bool regular;  // the type never changes: readable without a lock

  // --- guarded by filesystem::meta_mutex_ ---
  store::inode_record record;        // current attributes (record.size tracks `size`)
  std::uint64_t persisted_size = 0;  // size as committed; never ahead of committed data
  std::uint64_t lookups = 0;
  std::uint32_t opens = 0;
  std::uint32_t writers = 0;  // of `opens`, the handles open for writing
  bool record_dirty = false;  // attributes changed in memory only (mtime from writes)
  // Names of this inode's stored xattrs, loaded on first use, so the
  // security.capability probe the kernel makes on every write is answered
  // from memory.
  std::optional<std::set<std::string>> xattr_names;
  bool purged = false;  // deleted from the store; late background commits are dropped
  // Its records went with its last link while the kernel still knew it
  // (filesystem::purgeable_now): a file handle or a request that raced the
  // unlink reaches it, and gets ESTALE. A removed directory keeps
  // answering (an empty listing, its attributes), as rmdir always did.
  bool gone_for_good() const { return purged && !S_ISDIR(record.mode); }
  // Created by this daemon, and its data as of its last close not all
  // committed yet: the store holds a new-file row for it (a crash removes
  // the file at the next mount rather than leave it empty or cut short;
  // filesystem::settle_new_files). `created` starts the grace after which
  // a file kept open for writing keeps its name anyway.
  bool new_file = false;
  std::chrono::steady_clock::time_point created{};
  // A follower: this file is open here and the writer unlinked it; a hold
  // row keeps its data (fs/shared_orphans.cpp). Under holds_mutex_ and
  // meta_mutex_.
  bool held = false;
  // The data_version when the kernel's cache of this file was last known
  // fresh: taken by an open that made the kernel drop the file's pages (no
  // keep_cache), set once that handle is flushed or released. Opens keep
  // the cache only while data_version equals it
  // (filesystem::choose_page_cache; docs/read-path.md, "Page-cache coherence").
  std::uint64_t cached_version = 0;

  // The directory this file was last looked up or listed in (0: unknown):
  // a cold read of the file prefetches the files after it there
  // (read_ahead::note_cold_file). A hint: hard links and renames may
  // leave it stale, which costs a useless prefetch, never a wrong byte.
  std::atomic<std::uint64_t> parent_hint{0};

  // --- directories ---
  // Bumped (after the commit) by every change to this directory's entries;
  // a cached listing older than this is rebuilt.
  std::atomic<std::uint64_t> dir_version{0};
  std::mutex listing_mutex;
  std::shared_ptr<const dir_listing> listing;  // guarded by listing_mutex
  std::uint64_t listing_version = 0;           // dir_version it was read at

  // --- guarded by data_mutex ---
  std::mutex data_mutex;
  std::condition_variable data_cv;  // signalled when an in-flight slot commits
  std::uint64_t size;               // logical size including staged writes
  // What the file holds (codec::classify on its first bytes and the name it
  // was created with); picks the codec for its chunks. Copied into
  // record.type when a chunk commits.
  codec::file_type type;
  codec::file_type name_type = codec::file_type::unknown;  // from the name at create
  std::map<std::uint64_t, staged_slot> slots;
  std::uint64_t next_gen = 1;
  // Generations of the encode jobs still running. A flush waits only for the
  // ones submitted before it, so a writer that keeps writing to the same
  // file cannot starve another handle's fsync.
  std::set<std::uint64_t> running_jobs;
  // Atomic so maybe_release (under meta_mutex only) can see them; changed
  // only with data_mutex held.
  std::atomic<std::size_t> dirty_slots{0};
  std::atomic<std::size_t> in_flight_slots{0};
  int write_error = 0;  // first failed background commit, reported on flush/fsync

  bool has_staged() const { return dirty_slots != 0 || in_flight_slots != 0; }
  // Nothing here needs it: no kernel reference, open handle or staged data.
  bool unused() const { return lookups == 0 && opens == 0 && !has_staged(); }

  // Bumped when the file's bytes change as seen by a READ (a write, zeroing
  // fallocate or copy_file_range staged or committed, a truncate), with
  // data_mutex held, after the change. Never by background re-encoding or
  // commits of staged data, which do not change what a READ returns.
  // Atomic so that open reads it under meta_mutex_ alone.
  std::atomic<std::uint64_t> data_version{0};
  void bytes_changed() { data_version.fetch_add(1); }
};

// The nodes in memory, and the inodes the kernel remembers that need no
// node: "parked" ones, kept as their lookup count and parent hint (~56
// bytes with the hash table's own, instead of a node's ~700), so that a walk of millions
// of files does not need a node for each (docs/design.md, "Inodes in
// memory"). A parked inode is loaded again from the store when a request
// names it; its node takes over the lookup count.
class inode_table {
 public:
  std::shared_ptr<node> find(std::uint64_t ino) const;
  // Returns the node already there if present. A new node of a parked
  // inode takes over its lookup count, its parent hint and whether the
  // kernel's cached pages of it were known fresh.
  std::shared_ptr<node> insert(std::shared_ptr<node> n);
  // The same, but null (nothing inserted) when `stale()`, asked under the
  // table's mutex, says n's record may be out of date.
  template <typename Stale>
  std::shared_ptr<node> insert_unless(std::shared_ptr<node> n, Stale&& stale);
  void erase(std::uint64_t ino);
  std::vector<std::shared_ptr<node>> all() const;

  // Nodes in memory (read without the lock: a hint).
  std::size_t resident() const { return resident_.load(std::memory_order_relaxed); }
  std::size_t parked() const;
  bool is_parked(std::uint64_t ino) const;
  // The kernel forgot `nlookup` lookups of an inode without a node: false
  // when it is not parked either.
  bool forget_parked(std::uint64_t ino, std::uint64_t nlookup);
  // Moves nodes out of memory until at most `keep` remain or every node was
  // looked at once: those that nothing but the table holds (no request,
  // job or handle has them) and that `idle` accepts. One the kernel no
  // longer remembers (no lookups) is dropped; the others are parked. The
  // caller holds filesystem::meta_mutex_, which guards what `idle` reads.
  // Returns the nodes left in memory.
  template <typename Idle>
  std::size_t park(std::size_t keep, Idle&& idle);

 private:
  // A parked inode's lookups, with this bit set when the kernel's pages of
  // it were known fresh (node::cached_version == node::data_version), and
  // node::parent_hint (the read-ahead's prefetch of its siblings).
  static constexpr std::uint64_t k_cache_fresh = std::uint64_t{1} << 63;
  struct parked_inode {
    std::uint64_t lookups_and_fresh;
    std::uint64_t parent_hint;
  };

  // insert's work, mutex_ held.
  std::shared_ptr<node> insert_locked(std::shared_ptr<node> n);

  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<node>> nodes_;
  std::unordered_map<std::uint64_t, parked_inode> parked_;
  std::atomic<std::size_t> resident_{0};
  // Where the next park goes on (a bucket of nodes_), so that nodes that
  // stay busy are not looked at first every time.
  std::size_t cursor_ = 0;
};

template <typename Stale>
std::shared_ptr<node> inode_table::insert_unless(std::shared_ptr<node> n, Stale&& stale) {
  std::lock_guard lock(mutex_);
  if (const auto it = nodes_.find(n->ino); it != nodes_.end()) return it->second;
  if (stale()) return nullptr;
  return insert_locked(std::move(n));
}

template <typename Idle>
std::size_t inode_table::park(std::size_t keep, Idle&& idle) {
  std::lock_guard lock(mutex_);
  const std::size_t buckets = nodes_.bucket_count();
  std::vector<std::uint64_t> leaving;  // of one bucket
  for (std::size_t looked = 0; looked < buckets && nodes_.size() > keep; ++looked) {
    const std::size_t bucket = cursor_++ % buckets;
    leaving.clear();
    for (auto it = nodes_.begin(bucket); it != nodes_.end(bucket); ++it) {
      // use_count is exact here: new references come only from this table,
      // under mutex_.
      if (it->second.use_count() == 1 && idle(*it->second)) leaving.push_back(it->first);
    }
    for (const std::uint64_t ino : leaving) {
      const auto it = nodes_.find(ino);
      const node& n = *it->second;
      if (n.lookups > 0)
        parked_[ino] = {n.lookups | (n.cached_version == n.data_version.load() ? k_cache_fresh : 0),
                        n.parent_hint.load(std::memory_order_relaxed)};
      nodes_.erase(it);
    }
  }
  // Buckets are never given back on their own: after a burst of nodes an
  // emptier table would cost every later park a walk over empty buckets.
  if (nodes_.bucket_count() > 8 * (nodes_.size() + 64)) nodes_.rehash(0);
  resident_.store(nodes_.size(), std::memory_order_relaxed);
  return nodes_.size();
}

}  // namespace densefs::fs
