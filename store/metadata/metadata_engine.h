// Where a store's records live: an ordered key-value engine with one table
// per kind of record. The store (store/store.h) speaks records (inodes,
// dirents, extents, xattrs, chunks with refcounts, the re-encoding queue,
// inode allocation); records.h turns them into the keys and values
// docs/format.md specifies, and an engine keeps those bytes. Every engine
// holds the same bytes, so the record spec, fsck's record checks and the
// golden files are one for all of them.
//
// Two implementations: rocksdb_engine (store/metadata/rocksdb_engine.h, embedded, the
// default; one column family per table) and the PostgreSQL engine for
// scale-out volumes (docs/scale-out.md; one table per kind, key and value as
// bytea). Keys compare bytewise in both (RocksDB's default comparator,
// PostgreSQL's bytea ordering), which the store relies on: big-endian numbers
// in keys make directory listings and extent scans range scans.
//
// Threading: every method is safe from any thread. Reads see every write
// that returned before they started.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/error.h"

namespace densefs::store {

// The tables, in the order RocksDB opens them as column families (their
// names, records.h's k_cf_*, are part of the format).
// The numbers are on disk (the `pre/` rows of snapshots, docs/format.md):
// never renumber.
enum class table : std::uint8_t {
  meta,      // settings, inode counter, orphans, re-encoding queue
  inodes,    // inode number -> inode record
  dirents,   // parent + name -> dirent record
  extents,   // inode + file offset -> extent record
  chunks,    // chunk hash -> chunk record (codec, sizes, refcount, checksum)
  payloads,  // chunk hash -> payload bytes, or where a payload store keeps them
  xattrs,    // inode + name -> value
};
inline constexpr std::size_t k_table_count = 7;
// "default", "inodes", ...: the column family names of records.h.
const char* table_name(table t);

// Thrown by metadata_engine::write when an expectation of the batch
// (metadata_batch::expect) did not hold: another writer of a shared volume
// changed the record after it was read. Nothing was applied; the caller
// reads again and builds the batch anew.
class write_conflict : public store_error {
 public:
  explicit write_conflict(const std::string& what) : store_error(EAGAIN, what) {}
};

// The writes of one commit: applied together or not at all by
// metadata_engine::write. Built in one thread.
class metadata_batch {
 public:
  virtual ~metadata_batch() = default;
  // Throw store_error(EIO) only for absurd sizes (a batch over 4 GiB).
  virtual void put(table t, std::string_view key, std::string_view value) = 0;
  virtual void erase(table t, std::string_view key) = 0;
  virtual bool empty() const = 0;
  // A note for the volume's other clients, delivered to their watch()
  // callbacks if and only if this batch commits (PostgreSQL: a NOTIFY in
  // the batch's transaction). Short ASCII text (under 8,000 bytes). Engines
  // without other clients ignore it.
  virtual void set_notice(std::string) {}
  // A condition of the batch: record `key` of `t` holds `value` (nullopt:
  // there is none) when the batch applies, else write() applies nothing and
  // throws write_conflict. For read-modify-writes (a chunk's refcount, the
  // inode counter) that several writers of one volume may do at once.
  // Engines with one writer check nothing: the store serialises its
  // commits, so what it read is what is there (RocksDB, whose store lock
  // admits one process).
  virtual void expect(table, std::string_view /*key*/, std::optional<std::string_view> /*value*/) {}
};

// Which keys a scan visits: those in [lower, upper) (an empty upper: no
// bound), from `start` on (empty: from lower; a start below lower is lower).
struct key_range {
  std::string lower;
  std::string upper;
};
// The bounds of every key that starts with `prefix`: [prefix, next) where
// next is the first key past them ("orphan0" for "orphan/").
key_range prefix_range(std::string_view prefix);

enum class scan_order : std::uint8_t {
  forward,  // ascending from the first key >= start
  // Ascending from the last key <= start when there is one in range (a
  // record that begins before `start` may still cover it: an extent), else
  // from the first key >= start.
  forward_from_floor,
  // Descending from the last key <= start (an empty start: from the last key
  // in range).
  backward,
};

struct scan_options {
  std::string_view start;
  scan_order order = scan_order::forward;
  // False for one pass over records nobody reads again soon (stats, gc,
  // fsck): they should not push the working set out of the engine's cache.
  bool fill_cache = true;
  // Rows the caller expects to read, for engines that fetch a scan in pages
  // (PostgreSQL: the first page's size); 0: a small first page.
  std::size_t expected_rows = 0;
};

// The reads of a read-modify-write (metadata_engine::write_locked): they see
// every batch committed before the write began, and none of its section's
// writers commits until its batch has applied.
class locked_reads {
 public:
  virtual ~locked_reads() = default;
  // As metadata_engine::get_many: one result per key, in order.
  virtual std::vector<std::optional<std::string>> get_many(table t,
                                                           std::span<const std::string> keys,
                                                           std::string_view what) = 0;
  std::optional<std::string> get(table t, std::string_view key, std::string_view what) {
    const std::string k(key);
    return std::move(get_many(t, std::span(&k, 1), what)[0]);
  }
  // The rows of `range` in key order; more than `limit` of them is
  // corruption (store_error EIO naming `what`): memory stays bounded
  // whatever the table holds.
  virtual std::vector<std::pair<std::string, std::string>> scan(table t, const key_range& range,
                                                                std::size_t limit,
                                                                std::string_view what) = 0;
};

// write_locked's sections, by the records their writers read and write.
// "commit": chunk records and the pack index (the store's commits, gc's
// moves of pack records); a sharing writer's plain writes take it too.
inline constexpr std::string_view k_commit_section = "commit";
// "counters": the inode and pack counters, reserved in blocks. Kept apart
// from "commit" so that a pack started inside a commit can take a number.
inline constexpr std::string_view k_counters_section = "counters";

class metadata_engine {
 public:
  virtual ~metadata_engine() = default;

  // "rocksdb", "postgresql": for messages and `densefs info`.
  virtual std::string_view kind() const = 0;
  // Names the store in error messages ("store /srv/s", "volume v on db").
  virtual const std::string& where() const = 0;

  // nullopt: no such key. Failures throw store_error naming `what`.
  virtual std::optional<std::string> get(table t, std::string_view key,
                                         std::string_view what) const = 0;
  // One result per key, in the same order: one round trip for many keys (a
  // readdirplus batch of inodes, a batch of chunk records).
  virtual std::vector<std::optional<std::string>> get_many(table t,
                                                           std::span<const std::string> keys,
                                                           std::string_view what) const = 0;
  // Payload bytes: the same as get_many, but the engine may skip its own
  // checksum of the value, which the caller checks itself (a payload's
  // XXH3 against its chunk record).
  virtual std::vector<std::optional<std::string>> get_payloads(std::span<const std::string> keys,
                                                               std::string_view what) const {
    return get_many(table::payloads, keys, what);
  }
  // Visits the keys of `range` in `options.order`; `fn` returns false to
  // stop. Keys and values are valid during the call only.
  virtual void scan(
      table t, const key_range& range, const scan_options& options, std::string_view what,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) const = 0;

  // Visits every record of `tables`, table by table in key order, all as of
  // one state of the volume: a commit is in it whole or not at all, even
  // while others write (a dump of a volume in use, store/dump/). `fn`
  // throws to stop. Keys and values are valid during the call only.
  virtual void scan_consistent(std::span<const table> tables, std::string_view what,
                               const std::function<void(table t, std::string_view key,
                                                        std::string_view value)>& fn) const = 0;

  virtual std::unique_ptr<metadata_batch> new_batch() const = 0;
  // Applies `batch` atomically; `sync` also makes it (and every earlier
  // write) durable before returning. Throws store_error: ENOSPC when the
  // disk is full (nothing applied), write_conflict when an expectation did
  // not hold (nothing applied), EIO or the engine's errno otherwise.
  // After a failed write the engine recovers on the next write when it can.
  virtual void write(metadata_batch& batch, bool sync) = 0;
  // A read-modify-write that the volume's other writers cannot come
  // between: `build` reads through its locked_reads and fills the batch,
  // which then applies as write() would. For several writers of one volume
  // (a chunk's refcount, a counter): from before the first read until the
  // batch has applied, no other engine commits a write_locked of the same
  // `section` or a plain write() while it writes beside others
  // (postgres_engine_options::volume_lock shared). `build` may run more than
  // once (a connection lost before the commit) and must not write itself:
  // a plain write() would wait for this one, which waits for `build`.
  // Engines with one writer per volume (RocksDB, whose store lock admits one
  // process that serialises its own commits) read and write as usual.
  virtual void write_locked(std::string_view section,
                            const std::function<void(locked_reads&, metadata_batch&)>& build,
                            bool sync);
  // A read-modify-write of rows no commit of the file system reads (the
  // file locks of docs/scale-out.md, "Locks across clients"), as
  // write_locked but serialised on `section` alone among every client of
  // the volume, followers included: it neither waits for the volume's
  // commits nor checks the volume's lock, so a lock request never queues
  // behind a data commit. Durable when it returns. RocksDB: as
  // write_locked (one process).
  virtual void update_apart(std::string_view section,
                            const std::function<void(locked_reads&, metadata_batch&)>& build) {
    write_locked(section, build, false);
  }
  // Makes every write so far durable.
  virtual void sync() = 0;
  // Whether every write is durable when it returns, sync or not
  // (PostgreSQL). Then a write must not name bytes outside the engine (a
  // pack record) before they are durable themselves; an engine whose
  // unsynced writes become durable later (RocksDB: at a log sync or a
  // memtable flush) orders that itself (rocksdb_engine::set_before_flush).
  virtual bool writes_are_durable() const { return false; }
  // Whether each read is a round trip to a server rather than a lookup in
  // this process (PostgreSQL): its callers batch reads (get_many), and
  // skip those that would save less than they cost.
  virtual bool reads_are_round_trips() const { return false; }
  // Round trips to the server so far (PostgreSQL: each pipeline of
  // statements sent and answered); 0 for an engine in this process. What
  // -o metrics= serves.
  virtual std::uint64_t round_trips() const { return 0; }
  // How many times this engine took its volume's lock again after losing
  // it (PostgreSQL: a restarted server, a dropped connection). Another
  // client may have written in between, so what its user caches of the
  // records must go when this moves. 0 for an engine that cannot lose it.
  virtual std::uint64_t lock_retakes() const { return 0; }

  // Drops what the engine caches of its records (the cold rows of densefs
  // bench). Nothing for an engine without a cache of its own.
  virtual void drop_caches() const {}

  // Calls `fn` from a thread of the engine with the notice of every batch
  // other clients commit (metadata_batch::set_notice), in commit order, and
  // with "" when notices may have been missed (a lost connection: anything
  // may have changed). Runs until unwatch() or the engine's destruction.
  // False: the engine has no other clients (RocksDB).
  virtual bool watch(std::function<void(std::string_view notice)>) { return false; }
  // Stops the watch; when it returns, `fn` runs no more.
  virtual void unwatch() {}
  // Writes `batch` while listening for notices, then waits up to `timeout`
  // for one that `answer` accepts (a question to the other clients that
  // one of them answers with a notice). The listening starts before the
  // write, so an answer cannot come too early to be heard. Returns whether
  // one came. Engines without other clients just write (false).
  virtual bool write_and_await(metadata_batch& batch,
                               const std::function<bool(std::string_view notice)>& answer,
                               std::chrono::milliseconds timeout) {
    (void)answer;
    (void)timeout;
    write(batch, false);
    return false;
  }
};

}  // namespace densefs::store
