// A densefs store: a directory holding a FORMAT marker file, a lock file and
// the store's records in a metadata engine (store/metadata/metadata_engine.h; the
// embedded RocksDB one, store/metadata/rocksdb_engine.h), chunk payloads in a payload
// store (store/payload/payload_store.h). The store speaks records (records.h) and
// chunks (codecs, refcounts, the decoded-chunk cache); the engines keep
// bytes.
//
// Threading: every read method is safe from any thread. Changes are made by
// filling a `transaction` and calling commit(); commits are serialised by one
// mutex because chunk refcounts are read-modify-write (encoding happens
// before, outside that mutex, so it is held only for the engine's write).
#pragma once

#include <sys/statvfs.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "codec/codec.h"
#include "codec/policy.h"
#include "store/check/damaged_chunks.h"
#include "store/crypto/volume_key.h"
#include "store/error.h"
#include "store/hash.h"
#include "store/membership/volume_membership.h"
#include "store/metadata/metadata_engine.h"
#include "store/object/object_store.h"
#include "store/payload/batched_reader.h"
#include "store/records.h"
#include "store/snapshot/pre_image_writer.h"
#include "store/snapshot/registry.h"
#include "store/snapshot/tree_diff.h"

namespace densefs::store {

class payload_store;
class payload_sealer;
struct payload_meta;
class pack_store;
class chunk_cache;
struct chunk_cache_reads;
class entry_cache;
class rocksdb_engine;

// The payload backend `densefs mkfs` uses without --payloads: the faster one
// in the measurements of docs/packs.md. DENSEFS_DEFAULT_PAYLOADS=pack|blob
// overrides it (tests run suites against both backends with it).
inline constexpr payload_backend k_default_payload_backend = payload_backend::pack;
payload_backend default_payload_backend();
// "pack" or "blob"; throws store_error(EINVAL) for anything else.
payload_backend parse_payload_backend(std::string_view name);

// A chunk ready to be referenced: hashed, and encoded unless the caller knew
// the chunk already exists.
struct prepared_chunk {
  chunk_hash hash;
  std::uint32_t plain_size = 0;
  std::optional<codec::encoded_chunk> encoded;  // absent: "should already exist"
};

// The records of several chunks, read together (store::get_chunks).
// `as_of` lets a caller that keeps them across other commits ask whether
// they may have changed since (store::records_still_current).
struct chunk_records {
  std::map<chunk_hash, std::optional<chunk_record>> of;
  std::uint64_t as_of = 0;          // store::chunk_record_changes_
  std::uint64_t retakes_as_of = 0;  // metadata_engine::lock_retakes()
  // The record read of `hash` (empty: none stored); nullptr if `hash` was
  // not asked for.
  const std::optional<chunk_record>* find(const chunk_hash& hash) const;
};

// A chunk waiting for background re-encoding, and the file that wrote it.
struct recompress_item {
  chunk_hash hash;
  std::uint64_t ino = 0;
};

struct store_open_options {
  bool read_only = false;  // no lock taken; used by `densefs stats STORE`
  // On a volume whose records are in PostgreSQL: open read-only, as a
  // mount beside the volume's one writer (`densefs mount -o ro`, on any
  // machine). It writes only its session row, and hears the writer's
  // change notices (watch()). Ignored for the embedded store, whose -o ro
  // mounts open it read-write (`-o remount,rw` may make them writable).
  bool follower = false;
  // On a volume whose records are in PostgreSQL: write beside the volume's
  // other shared writers instead of alone (the volume's lock taken shared).
  // Every read-modify-write of records others may change too (a commit's
  // chunk refcounts, the inode and pack counters, gc's moves of pack
  // records) reads and writes in one locked transaction
  // (metadata_engine::write_locked), so no update is lost (`densefs mount
  // -o shared`, docs/scale-out.md, "Several writers"). Ignored for the
  // embedded store, whose lock admits one process.
  bool shared_writer = false;
  // On a volume whose records are in PostgreSQL: what to do when another
  // client holds the volume's lock, for the one-line error that names who
  // holds it (a mount says -o shared or -o ro; empty: a tool's hint).
  std::string in_use_hint{};
  // Decoded-chunk cache shared by all files (bytes of plain data).
  std::size_t chunk_cache_bytes = 256u << 20;
  // RocksDB block cache for metadata.
  std::size_t block_cache_bytes = 64u << 20;
  // How pack files are read (store/payload/batched_reader.h; mount option io=).
  io_mode io = io_mode::automatic;
  // Scale-out volumes: the local payload cache (mount options cache_dir=,
  // cache_size=; default STORE/cache, 10 GiB).
  std::filesystem::path cache_dir{};
  std::uint64_t cache_bytes = 10ull << 30;
  // An encrypted volume's secret (a passphrase or a key file's bytes;
  // docs/encryption.md). A wrong one fails the open (EACCES) before
  // anything is written. Without it an encrypted volume opens only
  // read-only, and every payload access fails (ENOKEY).
  std::optional<std::string> key_secret{};
  // Opens the volume as it was when the snapshot of this name was taken
  // (docs/backup.md, "Snapshots"): read-only, whatever read_only says.
  // ENOENT when there is none.
  std::optional<std::string> snapshot{};
};

// What `densefs mkfs --encrypt` gives a new volume: its secret, and the
// scrypt cost of the key derived from it (tests lower it).
struct volume_encryption {
  std::string secret;
  key_cost cost{};
};

// Changes that become visible and durable together (one RocksDB WriteBatch).
// Not thread-safe; build it in one thread, then commit it.
class transaction {
 public:
  transaction();
  ~transaction();
  transaction(transaction&&) noexcept;
  transaction& operator=(transaction&&) noexcept;

  void put_inode(const inode_record& r);
  void delete_inode(std::uint64_t ino);
  void put_dirent(std::uint64_t parent, std::string_view name, const dirent_record& r);
  void delete_dirent(std::uint64_t parent, std::string_view name);
  void put_extent(std::uint64_t ino, std::uint64_t file_offset, const extent_record& r);
  void delete_extent(std::uint64_t ino, std::uint64_t file_offset);
  void put_xattr(std::uint64_t ino, std::string_view name, std::string_view value);
  void delete_xattr(std::uint64_t ino, std::string_view name);
  void add_orphan(std::uint64_t ino);
  void remove_orphan(std::uint64_t ino);
  // A file created as `name` in `parent` whose data is not all committed
  // yet (records.h, k_new_file_prefix), and the end of that. `writer`: the
  // session of a writer beside others (volume_membership::session_id()), so that the
  // others can remove its unfinished files once it is gone.
  void mark_new_file(std::uint64_t ino, std::uint64_t parent, std::string_view name,
                     std::string_view writer = {});
  void clear_new_file(std::uint64_t ino);
  // Inode `ino`, put in this transaction, is new: it has no extents and,
  // a directory, no entries, so after the commit the store knows both
  // without a read (a lookup in it, its extents at unlink; store/cache/
  // entry_cache.h). Writes no record.
  void made_inode(std::uint64_t ino, bool directory);

  // Chunk references. Several calls for one hash add up. At commit a chunk
  // whose count reaches 0 is deleted with its payload; a chunk that does not
  // exist yet is created from `chunk.encoded` (commit throws
  // chunk_missing if it is absent, and the caller encodes and retries).
  void ref_chunk(const prepared_chunk& chunk);
  void unref_chunk(const chunk_hash& hash);

  // The background re-encoding queue (persisted, so a crash or unmount
  // loses no work). A chunk deleted at refcount 0 leaves the queue too.
  void queue_recompress(const chunk_hash& hash, std::uint64_t ino);
  void drop_recompress(const chunk_hash& hash);
  // Swaps a chunk's stored encoding for `encoded` (same plain content, so no
  // extent changes). Applied only if the chunk still exists with payload
  // checksum `expected_checksum` at commit time; otherwise silently skipped
  // (it was deleted or swapped meanwhile). The caller has verified that
  // `encoded` decodes to the chunk's plain content.
  //
  // A chunk marked damaged (store/check/damaged_chunks.h) is swapped only by a
  // swap made from bytes whose SHA-256 the caller checked against the
  // chunk's name (`content_checked`: fsck --repair-from), which also clears
  // the mark; a re-encoding, which starts from the damaged payload, is
  // skipped.
  void replace_payload(const chunk_hash& hash, std::uint64_t expected_checksum,
                       codec::encoded_chunk encoded, bool content_checked = false);
  // Several swaps applied all together or not at all: the chunks of one
  // JPEG becoming one Lepton file (a lepton_file payload on the first chunk,
  // lepton_member payloads on the others; codec/lepton_file.h). Skipped
  // whole unless every chunk still has its expected checksum and none is
  // referenced in this transaction. A lepton_member payload takes a
  // reference on the chunk it names, which must be a lepton_file after the
  // swap; a member deleted or swapped away gives it back in the same
  // commit. A lepton_file payload is never swapped again (its members
  // depend on it).
  struct payload_swap {
    chunk_hash hash;
    std::uint64_t expected_checksum = 0;
    codec::encoded_chunk encoded;
    bool content_checked = false;  // see replace_payload
  };
  void replace_payloads(std::vector<payload_swap> swaps);

  // Puts `earlier`'s changes before this transaction's, as if they had
  // been made first (a later put of the same key wins). `earlier` holds no
  // chunk references or payload swaps (std::logic_error otherwise).
  void prepend(transaction&& earlier);

  bool empty() const;

 private:
  friend class store;
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Payloads written before the commit that names them (store::
// write_payloads_ahead): the pack writes of a commit, done before the caller
// takes the locks its readers wait on, so that the commit only writes
// metadata. Until it is committed or destroyed it holds pack compaction off
// (a pack holding bytes no index entry names yet would look dead). One
// that is never committed leaves dead bytes in a pack, for gc. Move-only;
// for one commit, from the thread that made it.
class payloads_ahead {
 public:
  payloads_ahead();
  ~payloads_ahead();
  payloads_ahead(payloads_ahead&&) noexcept;
  payloads_ahead& operator=(payloads_ahead&&) noexcept;
  // Whether any payload was written (nothing was new, or the payload store
  // writes payloads with the commit: RocksDB blobs).
  bool empty() const;

 private:
  friend class store;
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Thrown by commit() when a transaction references a chunk that neither
// exists nor was supplied with its payload. Nothing was written.
class chunk_missing : public store_error {
 public:
  explicit chunk_missing(const chunk_hash& h);
  chunk_hash hash;
};

struct store_stats {
  std::uint64_t files = 0;  // regular files
  std::uint64_t directories = 0;
  std::uint64_t logical_bytes = 0;       // sum of regular file sizes
  std::uint64_t referenced_bytes = 0;    // plain bytes referenced by extents (holes excluded)
  std::uint64_t chunks = 0;              // unique chunks
  std::uint64_t unique_plain_bytes = 0;  // plain bytes of unique chunks
  std::uint64_t stored_bytes = 0;        // stored bytes of unique chunks
  std::uint64_t dedup_saved_bytes = 0;   // referenced_bytes - unique_plain_bytes
  std::uint64_t chunks_by_codec[codec::k_codec_count] = {};  // index: codec id
  std::uint64_t stored_by_codec[codec::k_codec_count] = {};
  std::uint64_t plain_by_codec[codec::k_codec_count] = {};
  std::uint64_t disk_bytes = 0;  // bytes the store directory occupies on disk
  // Per file type (index: codec::file_type): regular files, their logical
  // size, their stored_bytes, and how many fell back from the policy codec.
  struct type_stats {
    std::uint64_t files = 0;
    std::uint64_t logical_bytes = 0;
    std::uint64_t stored_bytes = 0;
    std::uint64_t fallbacks = 0;
  };
  type_stats by_type[codec::k_file_type_count] = {};
  std::uint64_t pending_recompress = 0;  // chunks queued for background re-encoding
  std::string policy;                    // the codec policy in effect (codec/policy.h)
  std::string payload_backend;           // "pack" or "blob" (docs/packs.md)
  std::string metadata_engine;           // "rocksdb" or "postgresql" (docs/scale-out.md)
  std::string metadata_location;         // the engine's description (no password)
  // Scale-out volumes: where the pack objects are, their bytes, and the
  // local cache's bytes and bound. Empty and 0 otherwise.
  std::string payload_location;
  std::uint64_t payload_object_bytes = 0;
  std::uint64_t cache_bytes = 0;
  std::uint64_t cache_capacity = 0;
  // With payload_location: the object store requests this client sent since
  // the store was opened (object_store::requests).
  object_store::request_counts object_requests;
  std::uint64_t pack_files = 0;     // pack stores: pack files
  std::string pack_reader;          // pack stores: "io_uring" or "pread"
  std::string encryption = "none";  // "aes-256-gcm" on an encrypted volume
  // Snapshots (docs/backup.md), and the stored bytes of the chunks only
  // they keep: what deleting them all would give back to gc.
  std::uint64_t snapshots = 0;
  std::uint64_t snapshot_only_bytes = 0;
};

// The JSON that `densefs stats --json` prints and the user.densefs.stats xattr
// returns: every field above by name, plus "ratio" (stored/logical),
// "codecs": {"raw": {"chunks": N, "plain_bytes": N, "stored_bytes": N,
// "savings": F}, ...} and "types": {"jpeg": {"files": N, "logical_bytes": N,
// "stored_bytes": N, "savings": F, "fallbacks": N}, ...} (types with files).
std::string to_json(const store_stats& s);

// Where a store's disk space goes (store::garbage()). File sizes are
// apparent sizes (what `du -sb` counts), summed by kind of file.
struct gc_report {
  std::string payload_backend;           // "pack" or "blob"
  std::uint64_t disk_bytes = 0;          // every file in the store directory
  std::uint64_t payload_file_bytes = 0;  // *.blob or *.pack: payloads of 4 KiB and more
  std::uint64_t table_file_bytes = 0;    // *.sst: metadata and small payloads
  std::uint64_t wal_bytes = 0;           // *.log: write-ahead log
  // RocksDB's info logs, left by densefs before 2026-12 (its lines go to
  // densefs's log now); gc removes them.
  std::uint64_t info_log_bytes = 0;      // LOG
  std::uint64_t old_info_log_bytes = 0;  // LOG.old.*
  std::uint64_t other_file_bytes = 0;    // MANIFEST, OPTIONS, CURRENT, FORMAT, ...
  std::uint64_t chunks = 0;              // chunk records
  std::uint64_t live_payload_bytes = 0;  // stored sizes of all chunks
  // The part of it that lives in payload files: blob stores, payloads of
  // 4 KiB and more with RocksDB's per-record overhead; pack stores, the pack
  // records the index names (64-byte header included).
  std::uint64_t live_blob_payload_bytes = 0;
  std::uint64_t pack_files = 0;     // pack stores: *.pack files
  std::uint64_t packs_deleted = 0;  // gc_result.after: packs compaction deleted
  // Scale-out, another client mounted: packs emptied now, deleted by a
  // later gc once the grace passed (pack_store::set_delete_grace).
  std::uint64_t packs_deferred = 0;
  std::uint64_t garbage_since_collect = 0;  // store::garbage_since_collect()
  // Blob stores: blob files and write-ahead log minus the live blob payloads
  // (with RocksDB's per-record overhead): replaced and deleted payloads, and
  // copies in the log of payloads already in blob files. An estimate.
  // Pack stores: pack files minus their headers and live records (exact:
  // deleted and replaced payloads, and appends a crash left uncommitted).
  std::uint64_t payload_garbage_bytes = 0;
  // An estimate of what collect_garbage() would give back: payload garbage
  // and info logs an earlier version left. Tombstones in table files are not estimated (they
  // are usually small).
  std::uint64_t reclaimable_bytes = 0;
};

struct gc_result {
  gc_report before;
  gc_report after;
  double seconds = 0;
  // False when free space was too low to copy the live payloads: only blob
  // files without any were deleted.
  bool rewrote_payloads = true;
  std::uint64_t reclaimed_bytes() const {
    return before.disk_bytes > after.disk_bytes ? before.disk_bytes - after.disk_bytes : 0;
  }
};

// {"disk_bytes": N, "payload_file_bytes": N, ...}: every field by name.
std::string to_json(const gc_report& r);
// {"before": {...}, "after": {...}, "reclaimed_bytes": N, "rewrote_payloads":
// B, "seconds": F}.
std::string to_json(const gc_result& r);

class snapshot_reader;

class store {
 public:
  // mkfs: creates a new store in `dir` (created if missing; must be empty).
  // The directory is made private to its owner (0700).
  // `postgres`: a PostgreSQL connection string or URI (without a
  // password: libpq takes it from PGPASSWORD or ~/.pgpass) of an empty
  // database that keeps the store's records instead of the embedded RocksDB
  // (docs/scale-out.md); payloads then live in pack files in `dir`.
  // `data` (needs `postgres`): an s3:// location (store/object/s3_object_store.h,
  // parse_s3_url) whose packs/ prefix is empty; the pack files are objects
  // there (format 6) and `dir` is this client's cache. The bucket is made
  // if missing.
  static void create(const std::filesystem::path& dir,
                     const codec::policy& policy = codec::default_policy(),
                     payload_backend payloads = default_payload_backend(),
                     const std::string& postgres = {}, const std::string& data = {},
                     const std::optional<volume_encryption>& encryption = std::nullopt);

  // Whether `dir`'s FORMAT says the volume is encrypted (so a tool asks
  // for its key before opening it). Cheap, like check().
  static bool is_encrypted(const std::filesystem::path& dir);
  // Seals the volume's master key under `new_secret` instead of
  // `old_secret` (one synced write of one record; no payload changes).
  // EACCES when `old_secret` is wrong, EINVAL when the volume is not
  // encrypted. The caller holds lock() (an embedded store) or the volume is
  // unmounted (docs/encryption.md, "Changing the key").
  static void change_key(const std::filesystem::path& dir, const std::string& old_secret,
                         const volume_encryption& new_key);

  // The local directory of a scale-out volume known by its database
  // (`densefs mount postgresql://... MNT`; docs/scale-out.md): `base`/UUID,
  // where `base` defaults to default_client_base(). Made with a FORMAT
  // naming the database and the pack location the database holds, or, when
  // it exists, checked to belong to that volume. Refuses a connection
  // string with a password (it goes into FORMAT) and a volume without pack
  // objects (format 5: its packs are in one machine's store directory).
  static std::filesystem::path client_directory(const std::string& conninfo,
                                                const std::filesystem::path& base = {});
  // $DENSEFS_CACHE_HOME, else /var/cache/densefs for root, else
  // $XDG_CACHE_HOME/densefs or ~/.cache/densefs.
  static std::filesystem::path default_client_base();

  // Cheap checks without RocksDB (no threads are started, so this is safe
  // before fuse_daemonize()): the directory exists, is a store, and its
  // format is not newer than this build. Throws store_error with a one-line
  // message otherwise.
  static void check(const std::filesystem::path& dir);
  // A store whose RocksDB database does not open because one of its files
  // is damaged (store_error EUCLEAN): keeps copies of the database files
  // in `keep` and rebuilds the database from what can be read
  // (rocksdb_engine::salvage), giving back from the metadata backup the
  // tables it has copies of. Returns the files set aside whose records are
  // gone (and a rebuilt settings record), and the tables restored.
  // Embedded pack stores only; the caller holds the lock.
  struct metadata_salvage {
    std::vector<std::string> lost;
    std::vector<std::string> restored;
  };
  static metadata_salvage salvage_metadata(const std::filesystem::path& dir,
                                           const std::filesystem::path& keep);
  // Every table file of the embedded database read and its checksums
  // checked (fsck): empty when sound or not embedded, else what is damaged.
  std::string verify_metadata_checksums() const;

  // Takes the store's lock (flock on STORE/LOCK.densefs) and returns its fd;
  // throws store_error(EBUSY) "store ... is in use" when held. The lock
  // survives fork() (fuse_daemonize) and is released when the fd closes.
  // The holder's pid is written into the file (docs/format.md).
  static int lock(const std::filesystem::path& dir);

  // What the holder of the lock wrote into LOCK.densefs: its pid, and for a
  // mount its mount point and whether its session has ended (it is
  // writing back and will let go of the lock soon).
  struct lock_holder {
    long pid = 0;
    std::string mountpoint;  // empty: not a mount (fsck, gc, a store tool)
    bool exiting = false;
    std::string snapshot;  // a mount of a snapshot (-o snapshot=): its name
  };
  // Rewrites the record of the lock held through `fd` (from lock()).
  static void record_lock_holder(int fd, const lock_holder& holder);
  // The record in `dir`'s lock file; nullopt when it has none (a store
  // locked by an older densefs, or by nobody since).
  static std::optional<lock_holder> read_lock_holder(const std::filesystem::path& dir);

  // Opens RocksDB (starts its background threads). For read-write opens the
  // caller must hold lock(). Purges nothing by itself: see orphans().
  static std::unique_ptr<store> open(const std::filesystem::path& dir,
                                     const store_open_options& options = {});
  ~store();

  const store_settings& settings() const { return settings_; }
  // The volume's payloads are sealed (format 7, docs/encryption.md).
  bool encrypted() const { return encrypted_; }
  // Where the records live: "rocksdb" or "postgresql", and the engine's
  // description of itself (no password).
  std::string_view metadata_engine_kind() const { return engine_->kind(); }
  const std::string& metadata_location() const { return engine_->where(); }
  const std::filesystem::path& dir() const { return dir_; }

  // Inode numbers are allocated from a persisted counter.
  std::uint64_t allocate_ino();

  // Reads.
  std::optional<inode_record> get_inode(std::uint64_t ino) const;
  // Several inodes in one RocksDB MultiGet (a readdirplus batch): one
  // result per number, in the same order.
  std::vector<std::optional<inode_record>> get_inodes(const std::vector<std::uint64_t>& inos) const;
  std::optional<dirent_record> get_dirent(std::uint64_t parent, std::string_view name) const;
  // Entries in name order (bytewise), starting after `after` when given.
  // The callback returns false to stop.
  void list_dir(std::uint64_t parent, std::optional<std::string_view> after,
                const std::function<bool(std::string_view name, const dirent_record&)>& fn) const;
  bool dir_is_empty(std::uint64_t parent) const;
  // Extents overlapping [begin, end), in offset order, as (file_offset, extent).
  // The last `limit` extents that start at or after `begin`, in offset
  // order (a truncate of a huge file drops them from the end, in batches).
  std::vector<std::pair<std::uint64_t, extent_record>> last_extents(std::uint64_t ino,
                                                                    std::uint64_t begin,
                                                                    std::size_t limit) const;
  // At most `limit` of them.
  std::vector<std::pair<std::uint64_t, extent_record>> extents(
      std::uint64_t ino, std::uint64_t begin, std::uint64_t end,
      std::size_t limit = std::numeric_limits<std::size_t>::max()) const;
  // Engines with round trips: reads the extent lists of `inodes` (a
  // directory's files, about to be read) into the cache extents() keeps,
  // with range scans over runs of nearby inode numbers instead of a scan
  // per file. A hint: bounded, and a failure only leaves them uncached.
  void prefetch_extents(std::span<const std::uint64_t> inodes) const;
  // A follower whose open found `ino` changed before the writer's notice
  // came: its cached extent list goes (extents()).
  void forget_extents(std::uint64_t ino) const;
  // `ino`, just allocated (allocate_ino) for an inode whose create is not
  // committed yet (fs/deferred_names.h), has no extents: extents() knows
  // it without a scan until a commit gives it some, as after made_inode.
  void has_no_extents_yet(std::uint64_t ino) const;
  // `dir`, just allocated for a directory whose mkdir is not committed yet
  // (fs/deferred_names.h), has no entries: get_dirent knows every name in
  // it absent without a read, as after the commit that makes it.
  void has_no_entries_yet(std::uint64_t dir) const;
  std::optional<std::string> get_xattr(std::uint64_t ino, std::string_view name) const;
  std::vector<std::string> list_xattrs(std::uint64_t ino) const;
  std::optional<chunk_record> get_chunk(const chunk_hash& hash) const;
  // The records of several chunks, read together: one round trip on a
  // server where get_chunk would take one each.
  chunk_records get_chunks(std::span<const chunk_hash> hashes) const;
  // No commit of this store has changed a chunk record since `read` (its
  // refcount included), nor has the engine taken the volume's lock again
  // (another client may have written in between). Beside other writers
  // their commits are not seen here: read inside the commit instead.
  bool records_still_current(const chunk_records& read) const {
    return chunk_record_changes_.load() == read.as_of &&
           engine_->lock_retakes() == read.retakes_as_of;
  }
  // Each record read is a round trip to a server (PostgreSQL), not a
  // local lookup: callers batch their reads, and skip those that save less
  // than they cost.
  bool reads_are_round_trips() const { return engine_->reads_are_round_trips(); }
  std::uint64_t engine_round_trips() const { return engine_->round_trips(); }
  std::vector<std::uint64_t> orphans() const;
  // The new-file rows (transaction::mark_new_file): after a crash, files
  // whose data as of their last close was not all committed.
  std::vector<new_file_record> new_files() const;

  // Hashes and encodes plain chunk data (CPU work: call it from a worker
  // pool, not a FUSE thread). Skips encoding when the chunk already exists.
  // `options` is the codec to encode with (see policy()).
  prepared_chunk prepare_chunk(std::string_view plain, const codec::codec_options& options,
                               bool force_encode = false) const;
  // The same with the policy's codec for file_type::other.
  prepared_chunk prepare_chunk(std::string_view plain, bool force_encode = false) const;
  // prepare_chunk in two steps, for a caller that asks whether several
  // chunks exist in one read (get_chunks): the chunk named (hashed), with
  // nothing encoded, which a commit takes as "should already exist"...
  prepared_chunk name_chunk(std::string_view plain) const;
  // ...and its encoding, the plain bytes of `chunk` encoded with `options`.
  void encode_into(prepared_chunk& chunk, std::string_view plain,
                   const codec::codec_options& options) const;

  // The plain content of a chunk: payload fetched, XXH3 checked, decoded,
  // size checked; served from the decoded-chunk cache when present. Throws
  // store_error(EIO) naming the chunk on any mismatch (and logs it).
  std::shared_ptr<const std::string> read_chunk(const chunk_hash& hash) const;
  // The same, but nullptr for a chunk deleted since the caller learned its
  // name (the re-encoder's queue entry racing a rewrite of the file): not
  // an error, and not logged. Every other failure is read_chunk's.
  std::shared_ptr<const std::string> read_chunk_unless_gone(const chunk_hash& hash) const;
  // Loads into the decoded-chunk cache those of `hashes` that are neither
  // cached nor being loaded by another thread: their records in one
  // MultiGet, their payloads in one payload_store::get_many, then each
  // checked and decoded in turn and published as soon as it is (readers
  // waiting for it go on while the rest decode). Errors are not thrown: a
  // chunk that fails is logged, and the read that needs it reads it again
  // with read_chunk and reports. `keep_going` is asked before each decode;
  // false abandons the rest (a prefetch nobody needs any more). Returns how
  // many chunks were decoded. Nothing without a cache.
  std::size_t load_chunks(std::span<const chunk_hash> hashes,
                          const std::function<bool()>& keep_going = {}) const;
  // The decoded chunk if it is in the decoded-chunk cache, else nullptr.
  std::shared_ptr<const std::string> cached_chunk(const chunk_hash& hash) const;
  // Puts the content of a chunk the caller has in hand (the data a commit
  // just stored) in the decoded-chunk cache, so that reading it back asks
  // the engine and the payloads nothing: on a remote volume that is two
  // round trips saved, and during a partition it is an answer at all. The
  // caller vouches that `plain` is the content `hash` names (the commit
  // named the chunk by it).
  void remember_chunk(const chunk_hash& hash, std::shared_ptr<const std::string> plain) const;
  bool caches_chunks() const { return options_.chunk_cache_bytes > 0; }
  // Reads of the decoded-chunk cache so far (chunk_cache::reads).
  chunk_cache_reads chunk_cache_counts() const;
  // Empties the decoded-chunk cache and RocksDB's block cache, so that the
  // next reads are cold as far as this process goes (with the kernel's
  // drop_caches for the files below: densefs bench's cold rows).
  void drop_caches() const;

  // Re-encodes a stored chunk under `target` (densefs recompress and the
  // background re-encoder): decodes it, encodes it with `target` (verified
  // by encode_chunk) and returns the encoding in `smaller` only when it is a
  // `target` encoding smaller than `current` (the chunk's record). Nothing
  // is done when the chunk already uses target's codec, unless
  // `same_codec_too` (a chunk stored fast with zstd -1 whose target is a
  // higher zstd level: the record does not say which level it has).
  struct reencoding {
    std::optional<codec::encoded_chunk> smaller;
    // The target codec refused the chunk (or failed verification).
    std::optional<codec::codec_id> fell_back_from;
    std::string fallback_reason;
    bool gone = false;  // deleted meanwhile (read_chunk_unless_gone): nothing to do
  };
  reencoding reencode_chunk(const chunk_hash& hash, const chunk_record& current,
                            const codec::codec_options& target, bool same_codec_too = false) const;

  // A JPEG of several chunks re-encoded as one Lepton file (densefs
  // recompress and the background re-encoder; codec/lepton_file.h). `file`
  // is the file's extents; they must be the whole file of `file_size`
  // bytes, every chunk whole, in order, on the 4 MiB grid, at most
  // codec::k_lepton_file_max_bytes, at least two chunks, no chunk twice,
  // none already part of a Lepton file. Reads every chunk (payload checksums
  // taken before the reads, so a chunk changed meanwhile makes the commit
  // skip the swap), encodes and verifies the whole JPEG, and returns the
  // swaps for transaction::replace_payloads only when they store less than
  // the chunks do now; else `refusal` says why.
  struct lepton_file_reencoding {
    std::vector<transaction::payload_swap> swaps;
    std::uint64_t stored_before = 0;  // the chunks' stored sizes now
    std::uint64_t stored_after = 0;   // with the swaps
    std::string refusal;
  };
  // Whether `file` has the shape reencode_lepton_file takes (no reads of
  // payloads: records only).
  bool could_be_lepton_file(const extent_list& file, std::uint64_t file_size) const;
  lepton_file_reencoding reencode_lepton_file(const extent_list& file, std::uint64_t file_size,
                                              double min_savings) const;

  // A chunk's stored bytes as they are (not decoded), with their record:
  // payload fetched and XXH3 checked (store_error(EIO) and a log line on a
  // mismatch). For exports that reuse stored encodings (cat --encoding=br).
  struct stored_chunk {
    chunk_record record;
    std::string bytes;
  };
  stored_chunk read_stored_chunk(const chunk_hash& hash) const;
  // The checks and decoding of read_chunk on stored bytes already fetched
  // and XXH3-checked, without the cache lookup for `hash` itself (fsck
  // --deep). A lepton_member is decoded through its first chunk; a decoded
  // Lepton file publishes its other chunks to the cache.
  std::shared_ptr<const std::string> decode_stored_chunk(const chunk_hash& hash,
                                                         const stored_chunk& stored) const;
  // Chunks whose payload failed its check (store/check/damaged_chunks.h): those
  // two mark them; the next commit of the same content stores it afresh.
  std::vector<chunk_hash> damaged_chunk_list() const;
  bool is_damaged(const chunk_hash& hash) const;
  void mark_damaged(const chunk_hash& hash, std::string_view why) const;

  // Applies a transaction atomically. sync=true also syncs the WAL.
  // Throws store_error: ENOSPC when the disk is full (nothing applied),
  // EIO otherwise; chunk_missing as described above.
  //
  // `fill`, when given, adds the part of the transaction that depends on
  // records other writers of the volume may change (an entry's existence,
  // a parent's link count, a file's extents): it runs inside the commit's
  // locked section (metadata_engine::write_locked), so the store reads it
  // makes see every commit before this one and none can come between them
  // and this commit. It may run more than once (a lost connection, a
  // payload to stage again): each run starts from `txn` as passed, and
  // must not add chunks that bring their own payload. An exception from it
  // applies nothing and leaves the commit. On a store with one writer it
  // runs once, just before the write.
  //
  // `ahead`: payloads written ahead for this commit (write_payloads_ahead);
  // a new payload it lacks is written by the commit, under its lock.
  void commit(transaction& txn, bool sync = false,
              const std::function<void(transaction&)>& fill = {}, payloads_ahead* ahead = nullptr);

  // Writes the payloads of `chunks` that the store does not hold (or holds
  // damaged) to the payload store now, for a commit that will name them:
  // its caller holds no lock meanwhile. Throws store_error (ENOSPC: the
  // disk is full); nothing is lost then, the commit writes them itself.
  // Uploaded first beside other writers, synced first where the engine's
  // writes are durable at once (the commit names them durably).
  // `known`: their records, read since (get_chunks); those it lacks are
  // read here.
  payloads_ahead write_payloads_ahead(std::span<const prepared_chunk* const> chunks,
                                      const chunk_records* known = nullptr);

  // Makes every committed change durable (syncs the WAL).
  void sync();

  // Space for statfs/df: of the file system holding the store; for a
  // volume whose packs are in object storage, the volume's own stored bytes
  // and no limit (docs/scale-out.md, "df").
  struct statvfs statvfs() const;
  // Throws store_error(ENOSPC) unless `bytes` more file data fit on the
  // store's disk now, less the space reserve (check_space_for): fallocate's
  // promise, made before the data (and its compression) exists.
  void check_space_for_data(std::uint64_t bytes) const { check_space_for(bytes); }

  // Walks inodes and chunks (O(store size)); for `densefs stats`.
  store_stats stats() const;

  // How this client takes part in its volume: its role, sessions,
  // heartbeat, leases, holds and change notices
  // (store/membership/volume_membership.h). Made at open; lives as long as
  // the store.
  volume_membership& membership() const { return *membership_; }
  volume_role role() const { return membership_->role(); }
  bool read_only() const { return options_.read_only; }
  // Opened on a snapshot (store_open_options::snapshot): its record.
  const std::optional<snapshot_record>& opened_snapshot() const { return opened_snapshot_; }

  // Snapshots (store_snapshots.cpp; docs/backup.md, "Snapshots"). An
  // instant, read-only state of every record: creating one writes one
  // record, and from then on the first change of each namespace record
  // keeps its value before (pre_image_writer.h). A snapshot's references
  // keep their chunks; deleting it gives back those only it held.
  //
  // Every snapshot, oldest first (a deleting one too, until it is gone).
  std::vector<snapshot_record> snapshots() const;
  // Snapshot `r` (of snapshots()) read beside the live volume: what a live
  // mount's `.snapshots` directory serves (store/snapshot/snapshot_reader.h).
  std::shared_ptr<const snapshot_reader> read_snapshot(const snapshot_record& r) const;
  // Takes one now: what is committed is in it, whole commits only. The
  // caller commits what it wants in it first (a mount syncs). EEXIST when
  // the name is taken; the first snapshot raises the format to 8.
  snapshot_record create_snapshot(std::string_view name);
  // Deletes one: marked deleting, then its pre-images merged into the
  // snapshot before it (or dropped) in bounded batches, each a commit. A
  // deletion cut short (kill -9) is finished by the next open for writing
  // (finish_snapshot_deletions). ENOENT when there is none.
  void delete_snapshot(std::string_view name);
  // Finishes deletions cut short. Returns how many.
  std::size_t finish_snapshot_deletions();
  // What changed from snapshot `from` to snapshot `to` (empty: the live
  // volume), path by path (store/snapshot/tree_diff.h). ENOENT naming a
  // snapshot that does not exist.
  tree_diff_summary diff_snapshots(const std::string& from, const std::string& to,
                                   const std::function<void(const tree_change&)>& fn) const;
  // Opened as a follower (store_open_options::follower) of a shared volume.
  bool follows() const { return membership_->follows(); }
  // Open as one of several writers of a PostgreSQL volume
  // (store_open_options::shared_writer): it hears the others' commits
  // (watch()) and builds its own from what it reads under their lock
  // (commit()'s `fill`).
  bool writes_beside_others() const { return membership_->writes_beside_others(); }
  // volume_membership::watch, after which the store drops what it cached of
  // the records a notice names. unwatch() (also at destruction) returns
  // once `fn` runs no more.
  bool watch(std::function<void(const change_notice&)> fn);
  void unwatch();
  // Scale-out volumes: the pack objects' location (no credential); else "".
  std::string payload_location() const;
  // What `densefs status` shows of a scale-out volume, read from its
  // database alone (no client directory is made, no S3 credential needed).
  // `store_or_uri`: a postgresql:// URI or connection string, or a client
  // or mkfs directory of such a volume. nullopt for a directory of an
  // embedded store.
  struct volume_status {
    std::string metadata_location;  // the engine's description (no password)
    std::string payload_location;   // "s3://bucket/prefix/ at endpoint", or ""
    std::vector<session_record> sessions;
  };
  static std::optional<volume_status> read_volume_status(const std::string& store_or_uri,
                                                         bool is_uri);

  // The codec policy for new chunks (settings, overridable per mount).
  void set_policy(const codec::policy& p) { policy_ = p; }
  const codec::policy& policy() const { return policy_; }

  // Up to `limit` queued re-encodings, in hash order, after `after` if set.
  std::vector<recompress_item> pending_recompress(std::size_t limit,
                                                  const std::optional<chunk_hash>& after) const;
  bool is_queued_for_recompress(const chunk_hash& hash) const;

  // Payload space: bytes of all payload (blob or pack) files.
  std::uint64_t payload_file_bytes() const;
  payload_backend payloads_backend() const { return settings_.payloads; }
  // Pack stores only (else nullptr): for fsck and tests.
  pack_store* packs() const { return packs_; }

  // Garbage collection (docs/gc.md). garbage() looks (a walk of the chunk
  // records, O(chunks), plus a listing of the store directory); it changes
  // nothing and works on a read-only store too. After
  // cancel_garbage_collection() it stops soon with store_error(ECANCELED):
  // the walk is long on a big store and must not hold up an unmount.
  gc_report garbage() const;
  // Gives back the space of deleted and replaced payloads and of deleted
  // metadata: flushes every memtable (so the write-ahead log files can go),
  // compacts every column family to the bottommost level (tombstones and
  // the values they hide are dropped) and forces RocksDB's blob GC over
  // every blob file (live payloads are copied to new blob files, old files
  // deleted), then removes the RocksDB info logs an earlier version left. Safe while
  // the store is in use: RocksDB compactions run beside reads and commits,
  // and a payload a chunk record names is never dropped. Costs I/O in
  // proportion to the live payloads, so callers decide when it is worth it
  // (garbage_since_collect()). `progress` gets a phase name before each
  // step. Concurrent calls run one after the other.
  //
  // How far it goes with pack files, where rewriting a pack copies its live
  // records to give back its dead ones: `automatic` (the daemon's own
  // collection, once garbage is a quarter of the payload files) rewrites
  // the packs whose dead share is at least 20%, so each copy gives back at
  // least a quarter of what it copies; `requested` (`densefs gc`) also
  // rewrites packs with less, most dead first, until what stays dead is at
  // most 5% of the pack files (restic's prune has the same rule, its
  // --max-unused): after `densefs recompress` the replaced payloads are
  // spread thinly over every pack, and a user who asks for the space
  // expects it back.
  enum class gc_depth { automatic, requested };
  gc_result collect_garbage(const std::function<void(std::string_view phase)>& progress = {},
                            gc_depth depth = gc_depth::requested);
  // Payload bytes made garbage by commits since this store was opened or
  // collect_garbage() last started: stored sizes of chunks deleted at
  // refcount 0 and of payloads swapped by replace_payload.
  std::uint64_t garbage_since_collect() const { return garbage_bytes_.load(); }
  // Collections by this store that ended, and the disk bytes they gave
  // back (what -o metrics= serves).
  std::uint64_t collections() const { return gc_runs_.load(std::memory_order_relaxed); }
  std::uint64_t collected_bytes() const {
    return gc_reclaimed_bytes_.load(std::memory_order_relaxed);
  }
  // Makes a collect_garbage() or garbage() in progress, and every later one, stop soon
  // with store_error(ECANCELED); for a daemon that is unmounting. What was
  // compacted so far stays compacted.
  void cancel_garbage_collection();
  // Every inode in number order; the callback returns false to stop.
  void for_each_inode(const std::function<bool(const inode_record&)>& fn) const;

  // --- For fsck (store/check/fsck.cpp) only: raw walks and an outright repair.
  // Every record of one column family (a k_cf_* name from records.h) whose
  // key starts with `prefix`, in key order and undecoded, so that fsck can
  // report a record that does not decode instead of stopping at it. The
  // callback returns false to stop. Throws store_error(EINVAL) for an
  // unknown column family.
  void scan_records(
      std::string_view column_family, std::string_view prefix,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) const;
  // Sets a chunk's refcount outright (a transaction only adds deltas, which
  // cannot fix a count that is wrong); 0 deletes the chunk record with its
  // payload and re-encoding queue entry. Nothing happens if the chunk does
  // not exist. Only for an unmounted store (fsck --repair holds lock()).
  void set_chunk_refcount(const chunk_hash& hash, std::uint64_t refcount);
  // Pack stores: points the payload index entry of every chunk whose
  // payload belongs in a pack (stored size of 4 KiB and more; only those in
  // `only` when given) at the newest pack record with the chunk's hash,
  // stored size and XXH3, found by a scan of every pack. Entries already
  // right, and chunks no pack holds, are left alone. Returns the entries
  // written. Only for an unmounted store (fsck --rebuild-index, --repair).
  std::uint64_t rebuild_pack_index(const std::vector<chunk_hash>* only = nullptr);
  // Chunk records lost with a damaged table (fsck --repair after a
  // salvage): made again from the pack records that hold their payloads
  // (each record's header has the hash, codec, sizes and checksum;
  // docs/format.md) with the number of references in `refs`, and their
  // pack index entries with them. A chunk that has a record, or whose
  // payload no pack holds whole (payloads under 4 KiB live in the
  // database), is left alone. Returns the chunks made again. Pack stores
  // only, unmounted (fsck holds the lock).
  std::vector<chunk_hash> rebuild_chunk_records(const std::map<chunk_hash, std::uint64_t>& refs);

 private:
  // Adds to `batch` the removal of a chunk at refcount 0: its record, its
  // payload and its re-encoding queue entry go together. `queued`: the
  // chunk has a queue entry (in the store, or put by this batch). Only
  // then is the entry deleted: a tombstone for every deleted chunk would
  // leave the queue's key range full of them after a big rm or rewrite,
  // and the re-encoder's every look at the queue steps over each one.
  // Caller holds commit_mutex_.
  void delete_chunk(metadata_batch& batch, const chunk_hash& hash, bool queued);
  store(std::filesystem::path dir, store_open_options options);
  // Throws store_error(ENOSPC) unless `bytes` more payload fit while keeping
  // the space reserve; nothing has been written when it throws.
  void check_space_for(std::uint64_t bytes) const;
  // `gone_is_error` false (a cache fill racing an overwrite): a chunk deleted
  // since its extent was read throws chunk_cache::load_abandoned, unlogged;
  // the read that still needs it reports it.
  stored_chunk read_stored_chunk_once(const chunk_hash& hash, bool retry_on_swap,
                                      bool gone_is_error = true) const;
  // Chunk `index` of the Lepton file stored as chunk `first`'s payload,
  // which must be `hash` with `plain_size` bytes; every chunk of the
  // decoded file is checked against its name and the others published to
  // the decoded-chunk cache. store_error(EIO) on any mismatch.
  std::shared_ptr<const std::string> decode_lepton_file_chunk(const chunk_hash& hash,
                                                              std::uint32_t plain_size,
                                                              const chunk_hash& first,
                                                              std::string_view payload,
                                                              std::uint32_t index) const;
  // Visits, in key order, the records of table `t` whose key starts with
  // `prefix` (all of them when empty), from key `start` on, without filling
  // the engine's cache; `fn` returns false to stop. `what` names the scan in
  // errors.
  void scan_prefix(
      table t, std::string_view prefix, std::string_view start, const char* what,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) const;

  std::filesystem::path dir_;
  store_open_options options_;
  store_settings settings_;
  // What this store writes: fixed for formats 1 and 2, compact for 3.
  record_encoding encoding_ = record_encoding::fixed;
  codec::policy policy_;
  // The live engine below engine_ when the store is opened on a snapshot
  // (engine_ is then its snapshot_view). Declared first: it outlives the view.
  std::unique_ptr<metadata_engine> snapshot_base_;
  std::optional<snapshot_record> opened_snapshot_;
  std::unique_ptr<metadata_engine> engine_;
  // engine_ when it is the embedded RocksDB engine (flushes, compactions and
  // blob files for gc and stats), else nullptr.
  rocksdb_engine* rocksdb_ = nullptr;
  std::string postgres_;  // STORE/FORMAT's postgresql= line, when it has one
  std::string data_;      // STORE/FORMAT's data= line (scale-out volumes)
  std::unique_ptr<payload_store> payloads_;
  // The pack store below payloads_ (payloads_ itself, or the store an
  // encrypted volume's sealed_payload_store seals for), when there is one.
  pack_store* packs_ = nullptr;
  bool encrypted_ = false;
  // An encrypted volume opened with its key: storage names and seals for
  // the pack index rebuilds, which read pack records below payloads_.
  std::shared_ptr<const payload_sealer> sealer_;
  std::unique_ptr<chunk_cache> cache_;
  std::unique_ptr<damaged_chunks> damaged_;
  // Whole-file Lepton decodes running at once (decode_stored_chunk). Each
  // holds its payload, the JPEG (up to 64 MiB) and lepton_jpeg's working
  // set (~200 MiB for 18 megapixels): readers of other chunks of the same
  // photo wait here and then find their chunk in the cache, and readers of
  // different large photos cannot multiply that by the FUSE thread count.
  static constexpr std::ptrdiff_t k_parallel_lepton_file_decodes = 2;
  mutable std::counting_semaphore<k_parallel_lepton_file_decodes> lepton_file_decodes_{
      k_parallel_lepton_file_decodes};
  std::mutex commit_mutex_;
  // commit() in steps (store_commit.cpp): one try of its locked write, and
  // what the commit did, applied to the caches after it.
  class commit_attempt;
  struct commit_outcome;
  void after_commit(const transaction::impl& t, const commit_outcome& done,
                    std::span<const std::uint64_t> extents_changed);
  // Held shared by every payloads_ahead until its commit, exclusively by
  // pack compaction while it plans (before commit_mutex_): a pack holding
  // payloads written ahead looks dead until their commit names them.
  std::shared_mutex ahead_gate_;
  std::mutex gc_mutex_;  // one collect_garbage() at a time
  std::atomic<std::uint64_t> garbage_bytes_{0};
  std::atomic<std::uint64_t> gc_runs_{0}, gc_reclaimed_bytes_{0};
  std::atomic<bool> gc_canceled_{false};
  // Bumped after every write of this store that may have changed a chunk
  // record (a commit, applied or of unknown outcome; an fsck repair), so
  // that records read before it (get_chunks) are known to be stale.
  std::atomic<std::uint64_t> chunk_record_changes_{0};

  // Engines with a round trip per statement (PostgreSQL): the whole extent
  // lists of recently read files with at most k_cached_extents extents (a
  // marker for files with more), so that the sibling prefetch and the
  // reads after it scan a file's extents once, not once each (measured:
  // 2.6 scans per file of a tar of /usr/share/doc). Kept exact: commit()
  // drops the inodes whose extents it changed and bumps extents_gen_ after
  // its write, so a scan that raced the commit is not cached; a follower
  // drops what a change notice names. Bounded: emptied when full.
  struct cached_extents {
    bool too_many = false;
    extent_list list;
  };
  static constexpr std::size_t k_cached_extents = 31;  // a first scan page holds 32
  static constexpr std::size_t k_extent_cache_files = 65536;
  // Not beside other writers: a commit's reads of extents (the ones it
  // drops) must see every other writer's commit, and their notices come late.
  bool caches_extents() const { return membership_->keeps_sessions() && !writes_beside_others(); }
  void drop_cached_extents(std::span<const std::uint64_t> inodes, bool all) const;
  // A shared writer's commit puts the payloads that may be new before its
  // locked transaction (commit()): staged, by the bytes they came from.
  // By chunk; an entry is used only for the same bytes (staged_payload::
  // same_as), so a chunk encoded again after its staging is staged again.
  struct staged_payload;
  using staged_payloads = std::map<chunk_hash, staged_payload>;
  friend class payloads_ahead;  // holds staged_payloads
  void stage_payloads(const transaction::impl& t, staged_payloads& staged, bool every_chunk);
  void stage_payload(staged_payloads& staged, const chunk_hash& hash, const std::string& bytes,
                     const payload_meta& meta);
  // One payload to stage: the bytes of a chunk, kept by the caller.
  struct payload_to_stage;
  // Stages all of `puts` once the disk has room for all of them
  // (check_space_for).
  void stage_all(staged_payloads& staged, std::span<const payload_to_stage> puts);
  // Appends the extent record (`key`, `value`) of `ino` to `c`, or marks it
  // too_many (emptied) past k_cached_extents; false once it is.
  static bool add_cached_extent(cached_extents& c, std::uint64_t ino, std::string_view key,
                                std::string_view value);
  // Keeps `found` unless a commit bumped extents_gen_ since `gen` was read.
  void cache_extents(std::uint64_t gen,
                     std::unordered_map<std::uint64_t, cached_extents> found) const;
  // Files with more extents: the window of extents read by the last ranged
  // scan (up to k_window_extents from the extent at or before the read's
  // start), so that a sequential read scans once per window instead of once
  // per read (a 256 MiB file read warm: 1,526 scans, each a round trip).
  // Every extent with an offset in [first, last] is in `list`; none before
  // `first` reaches past it; `to_end`: none after `last`. Same rules as
  // above; the last k_windows_per_file windows of at most
  // k_extent_windows files (the kernel's reads and the read-ahead's run
  // ahead of each other; one file's windows make way for another's).
  struct extent_window {
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    bool to_end = false;
    extent_list list;
  };
  static constexpr std::size_t k_window_extents = 1024;
  static constexpr std::size_t k_extent_windows = 32;
  static constexpr std::size_t k_windows_per_file = 4;
  // Reads the window of `ino`'s extents from the floor of `begin` and keeps
  // it unless a commit came in since `gen`.
  extent_window read_extent_window(std::uint64_t ino, std::uint64_t begin, std::uint64_t gen) const;
  // The directory entries this client knows (store/cache/entry_cache.h),
  // where a lookup is a round trip and every change is known here: as
  // caches_extents(). Else nullptr.
  std::unique_ptr<entry_cache> entry_cache_;
  static constexpr std::size_t k_entry_cache_names = 1u << 18;
  // After a commit (commit_mutex_ held): when the engine took the volume's
  // lock again since the last look (metadata_engine::lock_retakes), another
  // client may have written meanwhile, so the cached entries and extents go.
  void forget_cached_records_if_lock_retaken();
  std::uint64_t lock_retakes_seen_ = 0;  // under commit_mutex_
  mutable std::mutex extent_cache_mutex_;
  mutable std::unordered_map<std::uint64_t, cached_extents> extent_cache_;
  mutable std::unordered_map<std::uint64_t, std::deque<extent_window>> extent_windows_;
  mutable std::uint64_t extents_gen_ = 0;
  std::unique_ptr<volume_membership> membership_;  // made at open, after engine_
  // The store's format version is k_lepton_file_format_version or newer:
  // Lepton files may be committed without raising it. Under commit_mutex_.
  bool holds_lepton_files_ = false;
  // The latest snapshot's pre-images (store_snapshots.cpp). Under
  // commit_mutex_; each commit first checks the latest snapshot it names
  // (refresh_latest_snapshot).
  pre_image_writer pre_images_;
  // Format 8 or newer (a snapshot was taken): commits look for the latest
  // snapshot. Under commit_mutex_.
  bool may_have_snapshots_ = false;
  // snapshot_latest as pre_images_ has it is current: this store writes
  // alone and has read it since it last changed it. Under commit_mutex_.
  bool latest_known_ = false;
  // Reads the latest snapshot through the commit's locked reads and
  // resets pre_images_ when it changed (another client, a create or a
  // delete). Caller holds commit_mutex_.
  void refresh_latest_snapshot(locked_reads& reads);
  // One step of delete_snapshot, run as a commit's fill: merges up to
  // `limit` pre-images of snapshot `id` (all, when 0) from `cursor` on and
  // moves the cursor past them. Returns whether the scan reached the end.
  bool merge_snapshot_rows(transaction& txn, std::uint64_t id, std::string& cursor,
                           std::size_t limit);
  void finish_snapshot_deletion(std::uint64_t id);
  std::mutex snapshot_delete_mutex_;  // one deletion at a time
  std::mutex ino_mutex_;
  std::uint64_t next_ino_ = 0;      // next number to hand out
  std::uint64_t ino_reserved_ = 0;  // persisted high-water mark
};

}  // namespace densefs::store
