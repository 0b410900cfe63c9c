// The embedded metadata engine (the default): a RocksDB database in the store
// directory, one column family per table (store/metadata/metadata_engine.h). Also
// what only RocksDB has and the store uses on it: blob files for payloads,
// memtable flushes (which pack stores order after their pack syncs), forced
// compactions for gc, and recovery after a write error.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/metadata/metadata_engine.h"

namespace rocksdb {
class DB;
class Cache;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace densefs::store {

class rocksdb_flush_listener;

struct rocksdb_engine_options {
  bool read_only = false;  // no writes; RocksDB's read-only open (no lock needed)
  // mkfs: creates the database and its column families; the directory must
  // exist and hold no database.
  bool create = false;
  std::size_t block_cache_bytes = 64u << 20;  // metadata blocks
  // The payloads table keeps values of 4 KiB and more in blob files (blob
  // stores). Pack stores turn it off (set_blob_payloads) once their
  // settings are read.
  bool blob_payloads = true;
};

// Payloads below this stay inline in the table files; larger ones go to
// blob files, which compaction does not rewrite.
inline constexpr std::uint64_t k_min_blob_size = 4096;

class rocksdb_engine final : public metadata_engine {
 public:
  // Throws store_error with a one-line message when the database cannot be
  // opened (or created).
  static std::unique_ptr<rocksdb_engine> open(const std::filesystem::path& dir,
                                              const rocksdb_engine_options& options);
  // A database that does not open because a table, log or manifest file is
  // damaged (store_error EUCLEAN): keeps a copy of every database file in
  // `keep` (created; the store's own files, not its packs), then rebuilds
  // the manifest from the files RocksDB can read (RocksDB's RepairDB).
  // Table files it cannot read go to DIR/lost with their records; records
  // in readable tables and log files stay. Returns one line per file set
  // aside. docs/fsck.md, "Damaged metadata".
  //
  // A table file set aside whose copy is in the metadata backup (below)
  // gives its records back from that copy: where the database still has
  // no record under a key, the copy's is put.
  struct salvage_result {
    std::vector<std::string> set_aside;  // table and log files whose records are gone
    std::vector<std::string> restored;   // "NAME: N records from the metadata backup"
  };
  static salvage_result salvage(const std::filesystem::path& dir,
                                const std::filesystem::path& keep);

  // The metadata backup: every live table file copied to
  // DIR/metadata-backup (once: table files never change), its checksums
  // verified, copies of tables no longer live removed. Done at every
  // read-write close, and on a thread of its own at open and every hour
  // while open (DENSEFS_METADATA_BACKUP_SECONDS; 0: only at close).
  // Skipped when the disk has too little free space for the copies. A
  // table damaged later comes back whole at a salvage. docs/fsck.md.
  // Errors are logged: a backup is never worth failing a mount for.
  // `stoppable`: ends between two files once the engine is closing.
  void back_up_tables(bool stoppable = false);
  // Reads every table file and checks its block checksums (fsck): empty
  // when all are sound, else RocksDB's message naming the damaged file.
  std::string verify_checksums() const;
  // Flushes every memtable (so no write-ahead log stays behind) and closes,
  // unless a write error could not be recovered from: then the database is
  // left open, as a crash would leave it, and the next open recovers it
  // from its log.
  ~rocksdb_engine() override;

  std::string_view kind() const override { return "rocksdb"; }
  const std::string& where() const override { return where_; }
  std::optional<std::string> get(table t, std::string_view key,
                                 std::string_view what) const override;
  std::vector<std::optional<std::string>> get_many(table t, std::span<const std::string> keys,
                                                   std::string_view what) const override;
  std::vector<std::optional<std::string>> get_payloads(std::span<const std::string> keys,
                                                       std::string_view what) const override;
  void scan(
      table t, const key_range& range, const scan_options& options, std::string_view what,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) const override;
  void scan_consistent(std::span<const table> tables, std::string_view what,
                       const std::function<void(table t, std::string_view key,
                                                std::string_view value)>& fn) const override;
  std::unique_ptr<metadata_batch> new_batch() const override;
  void write(metadata_batch& batch, bool sync) override;
  void sync() override;
  void drop_caches() const override;

  // --- RocksDB only.
  // Whether the payloads table puts large values in blob files from now on.
  void set_blob_payloads(bool on);
  // Called before every memtable flush: the flush makes the entries in it
  // durable in a table file, which a later log sync does not order against
  // bytes outside the database they name (pack files). Errors it throws are
  // logged. Set it to {} before what it calls goes away.
  void set_before_flush(std::function<void()> fn);
  // Bytes of the payload table's blob files.
  std::uint64_t blob_file_bytes() const;
  // Memtables to table and blob files (frees the write-ahead log).
  void flush();
  // Every table compacted to the bottommost level (tombstones and the values
  // they hide dropped); for the payloads table, blob GC forced over every
  // blob file when `rewrite_blobs`. Stops with store_error(ECANCELED) once
  // `cancel` is set. `phase` gets a name before each table.
  void compact_all(bool rewrite_blobs, std::atomic<bool>& cancel,
                   const std::function<void(const std::string&)>& phase);

 private:
  rocksdb_engine() = default;
  void resume_after_write_error();
  // Waits (at most a few seconds, or until `cancel`) until the blob files
  // in the directory that the database no longer names are gone
  // (compact_all says why).
  void wait_for_dead_blob_files(const std::atomic<bool>& cancel) const;

  std::filesystem::path dir_;
  std::string where_;
  bool read_only_ = false;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs_;  // owned; indexed by table
  std::shared_ptr<rocksdb::Cache> block_cache_;
  std::shared_ptr<rocksdb_flush_listener> flush_listener_;
  // A write failed (disk full, EIO): RocksDB refuses writes until Resume(),
  // which write() and sync() call first (resume_after_write_error, the only
  // place that clears it). Atomic: set by writes on different threads.
  std::atomic<bool> needs_resume_{false};
  std::mutex resume_mutex_;

  void backup_loop(std::chrono::seconds interval);
  bool backup_stopping();
  std::mutex backup_mutex_;  // one back_up_tables at a time
  std::mutex backup_wait_mutex_;
  std::condition_variable backup_wake_;
  bool backup_stopping_ = false;  // under backup_wait_mutex_
  std::thread backup_thread_;
};

// The metadata backup's directory inside a store (rocksdb_engine::back_up_tables).
inline constexpr const char* k_metadata_backup_dir = "metadata-backup";

}  // namespace densefs::store
