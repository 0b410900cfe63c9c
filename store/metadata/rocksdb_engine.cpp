#include "store/metadata/rocksdb_engine.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/listener.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/debug.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/durable_file.h"
#include "store/error.h"
#include "store/log.h"
#include "store/metadata/fault_injection.h"
#include "store/metadata/rocksdb_info_log.h"

namespace densefs::store {

// Calls the store's hook before RocksDB flushes a memtable (see
// rocksdb_engine::set_before_flush).
class rocksdb_flush_listener : public rocksdb::EventListener {
 public:
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override {
    std::lock_guard lock(mutex_);
    if (!before_flush_) return;
    try {
      before_flush_();
    } catch (const std::exception& e) {
      log_error(std::string("before a memtable flush: ") + e.what());
    }
  }
  void set(std::function<void()> fn) {
    std::lock_guard lock(mutex_);
    before_flush_ = std::move(fn);
  }

 private:
  std::mutex mutex_;
  std::function<void()> before_flush_;
};

namespace {

namespace fs = std::filesystem;

constexpr std::size_t k_payloads_cf = static_cast<std::size_t>(table::payloads);

rocksdb::Slice slice(std::string_view s) {
  return {s.data(), s.size()};
}
std::string_view view(const rocksdb::Slice& s) {
  return {s.data(), s.size()};
}

bool is_no_space(const rocksdb::Status& s) {
  // RocksDB reports ENOSPC from the WAL writer as a plain IOError on some
  // paths, so also look at the message.
  return s.IsNoSpace() || (s.IsIOError() && s.ToString().find("No space") != std::string::npos);
}

// The errno a RocksDB failure is reported as at the FUSE boundary.
int errno_of(const rocksdb::Status& s) {
  if (is_no_space(s)) return ENOSPC;
  const std::string text = s.ToString();
  if (s.IsPathNotFound()) return ENOENT;
  // A damaged table, log or manifest: fsck --repair salvages it.
  if (s.IsCorruption()) return EUCLEAN;
  if (text.find("Permission denied") != std::string::npos) return EACCES;
  if (text.find("Read-only file system") != std::string::npos) return EROFS;
  if (text.find("lock") != std::string::npos &&
      text.find("Resource temporarily unavailable") != std::string::npos)
    return EBUSY;
  return EIO;
}

// Turns off RocksDB's automatic recovery from a full disk: it polls for free
// space in the background and, while it waits, a manual Resume() only answers
// "busy", so a writer would keep getting ENOSPC for seconds after space came
// back. write() resumes on demand instead.
class manual_recovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// RocksDB options for a densefs store. Both mkfs and open use this, so the
// column families are always configured the same way.
struct db_config {
  rocksdb::DBOptions db;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  std::shared_ptr<rocksdb::Cache> block_cache;
  std::shared_ptr<rocksdb_flush_listener> flush_listener;
};

db_config make_config(std::size_t block_cache_bytes, bool blob_files) {
  db_config c;
  c.db.create_if_missing = false;
  c.db.create_missing_column_families = false;
  // The machine has few cores and our own encoder pool needs them; RocksDB's
  // default (2) is kept explicit.
  c.db.max_background_jobs = 2;
  // RocksDB's diagnostics go to densefs's log, not to LOG files beside the
  // payloads (rocksdb_info_log.h).
  c.db.info_log = make_rocksdb_info_log();
  // Its periodic statistics would only be dropped there.
  c.db.stats_dump_period_sec = 0;
  // After a write error (disk full) the store recovers in write() by
  // calling Resume() itself, at the moment a writer wants to write; RocksDB's
  // own background retries (and its free-space polling, see manual_recovery)
  // would make commits fail with "busy" while they run.
  c.db.max_bgerror_resume_count = 0;
  // Payload bytes go through the WAL before a flush moves them to blob files;
  // a column family that is rarely written (xattrs, say) would otherwise pin
  // old WAL files, and the store would hold every payload twice on disk.
  c.db.max_total_wal_size = 128u << 20;
  // Replaying the WAL at open keeps what it finds in memtables instead of
  // flushing it, so a store on a full disk still mounts (and files can be
  // deleted).
  c.db.avoid_flush_during_recovery = true;
  // RocksDB's default (true) marks every table and blob file
  // POSIX_FADV_RANDOM, which turns off the kernel's readahead: a cold
  // sequential read of a big file then waits for one small disk read per
  // chunk payload, one after the other (perf: most of the daemon's time in
  // io_schedule under BlobFileReader::ReadFromFile; docs/read-path.md).
  // Payloads of a file written in order sit in order in the blob files, so
  // readahead serves most of them from the page cache; a lone point lookup
  // is still read as is (the kernel only reads ahead on sequential misses).
  c.db.advise_random_on_open = false;
  c.db.listeners.push_back(std::make_shared<manual_recovery>());
  c.flush_listener = std::make_shared<rocksdb_flush_listener>();
  c.db.listeners.push_back(c.flush_listener);
  // Test-only faults under every file of the database (store/metadata/fault_injection.h);
  // RocksDB's default Env unless DENSEFS_FAULT_INJECTION is set.
  if (rocksdb::Env* env = fault_injection_env()) c.db.env = env;

  // One block cache shared by every metadata column family, so a walk of a
  // big tree and a stream of reads compete for one budget.
  c.block_cache = rocksdb::NewLRUCache(block_cache_bytes);
  rocksdb::BlockBasedTableOptions meta_table;
  meta_table.block_cache = c.block_cache;
  // Lookups of names that do not exist (create, rsync's probes) are common:
  // a bloom filter answers most of them without reading a data block.
  meta_table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions meta;
  meta.table_factory.reset(rocksdb::NewBlockBasedTableFactory(meta_table));
  // Metadata records are small; RocksDB preallocates each WAL file at 1.1x
  // the largest write buffer, so oversized buffers show up as disk usage of
  // an empty store.
  meta.write_buffer_size = 16u << 20;
  // Metadata blocks are mostly chunk hashes, small numbers and names; zstd
  // keeps 16% fewer bytes of them than RocksDB's default Snappy on a copy of
  // /usr/share/man (docs/format.md, "Metadata bytes per file"). RocksDB names
  // the compression in each block, so tables written with Snappy still read.
  meta.compression = rocksdb::kZSTD;

  rocksdb::ColumnFamilyOptions payloads;
  rocksdb::BlockBasedTableOptions payload_table;
  // Payload SSTs hold blob references and small (< 4 KiB) payloads; decoded
  // chunks are cached above, so they get no block cache of their own.
  payload_table.no_block_cache = true;
  payloads.table_factory.reset(rocksdb::NewBlockBasedTableFactory(payload_table));
  payloads.write_buffer_size = 16u << 20;
  // Pack stores keep only small payloads and pack index entries here. (A
  // pack store is opened with the blob setting first and switches it off
  // once its settings are read: the choice is recorded in the database.)
  payloads.enable_blob_files = blob_files;
  payloads.min_blob_size = k_min_blob_size;
  // Payloads are already compressed by our codecs; compressing again would
  // spend CPU for nothing.
  payloads.blob_compression_type = rocksdb::kNoCompression;
  payloads.compression = rocksdb::kNoCompression;
  // Reclaims the space of deleted chunks from blob files during compaction.
  payloads.enable_blob_garbage_collection = true;

  for (std::size_t i = 0; i < k_table_count; ++i)
    c.cfs.emplace_back(table_name(static_cast<table>(i)), i == k_payloads_cf ? payloads : meta);
  return c;
}

void close_db(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*>& handles,
              const std::string& where) {
  if (!db) return;
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  handles.clear();
  const rocksdb::Status s = db->Close();
  if (!s.ok()) log_error("closing " + where + ": " + s.ToString());
}

// Keeps a database that must not be closed (see ~rocksdb_engine) reachable
// until the process exits, so the leak is deliberate and LeakSanitizer does
// not report it; a daemon abandons at most one store, at unmount.
void abandon_db(std::unique_ptr<rocksdb::DB> db, std::vector<rocksdb::ColumnFamilyHandle*> cfs) {
  struct abandoned {
    rocksdb::DB* db;
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  };
  static std::mutex mutex;
  static std::vector<abandoned>* kept = new std::vector<abandoned>;
  std::lock_guard lock(mutex);
  kept->push_back({db.release(), std::move(cfs)});
}

class rocksdb_batch final : public metadata_batch {
 public:
  explicit rocksdb_batch(const std::vector<rocksdb::ColumnFamilyHandle*>& cfs) : cfs_(cfs) {}
  void put(table t, std::string_view key, std::string_view value) override {
    check(batch_.Put(cfs_[static_cast<std::size_t>(t)], slice(key), slice(value)));
  }
  void erase(table t, std::string_view key) override {
    check(batch_.Delete(cfs_[static_cast<std::size_t>(t)], slice(key)));
  }
  bool empty() const override { return batch_.Count() == 0; }
  rocksdb::WriteBatch& batch() { return batch_; }

 private:
  // WriteBatch only fails on absurd sizes (> 4 GiB batches).
  static void check(const rocksdb::Status& s) {
    if (!s.ok()) throw store_error(EIO, "building a commit: " + s.ToString());
  }
  const std::vector<rocksdb::ColumnFamilyHandle*>& cfs_;
  rocksdb::WriteBatch batch_;
};

// Payload reads skip RocksDB's CRC32C of the blob record: the caller checks
// every payload's size and XXH3 against its chunk record (store::
// read_stored_chunk), which the SST block checksums protect. Debian's
// RocksDB has only the table-driven CRC32C (Slow_CRC32: 7.6% of the
// daemon's CPU on a cold read of 32 KiB chunks, perf), so the second check
// was the costly one.
rocksdb::ReadOptions payload_read_options() {
  rocksdb::ReadOptions o;
  o.verify_checksums = false;
  return o;
}

// How often an open store backs its tables up (back_up_tables).
std::chrono::seconds backup_interval() {
  if (const char* env = std::getenv("DENSEFS_METADATA_BACKUP_SECONDS"); env && *env)
    return std::chrono::seconds(std::strtoll(env, nullptr, 10));
  return std::chrono::hours(1);
}

// Reads a table file whole and checks every block's checksum: empty when
// sound, else why not.
std::string table_problem(const fs::path& p) {
  rocksdb::Options o;
  rocksdb::SstFileReader reader(o);
  rocksdb::Status s = reader.Open(p.string());
  if (s.ok()) s = reader.VerifyChecksum();
  return s.ok() ? std::string() : s.ToString();
}

// A table file RepairDB set aside, given back from its copy in the
// metadata backup: each record of the copy whose key the salvaged database
// has no version of at all is put. A key it holds, or whose deletion it
// holds, came from a table that survived, which may be newer: the copy's
// record could be one since replaced or deleted (a renamed entry, a
// truncated extent). Returns what was restored ("N records from PATH"), or
// "" when there is no sound copy.
std::string restore_table(rocksdb::DB& db, const std::vector<rocksdb::ColumnFamilyHandle*>& cfs,
                          const fs::path& copy) {
  std::error_code ec;
  if (!fs::is_regular_file(copy, ec)) return {};
  rocksdb::Options o;
  rocksdb::SstFileReader reader(o);
  if (!reader.Open(copy.string()).ok() || !reader.VerifyChecksum().ok()) {
    log_warning("salvage: the backup copy " + copy.string() + " is damaged too");
    return {};
  }
  const auto props = reader.GetTableProperties();
  rocksdb::ColumnFamilyHandle* cf = nullptr;
  for (auto* h : cfs)
    if (props && h->GetName() == props->column_family_name) cf = h;
  if (!cf) return {};
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
  rocksdb::WriteBatch batch;
  std::uint64_t restored = 0;
  std::vector<rocksdb::KeyVersion> versions;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    versions.clear();
    const rocksdb::Status g =
        rocksdb::GetAllKeyVersions(&db, cf, it->key(), it->key(), 1, &versions);
    if (!g.ok() || !versions.empty()) continue;
    batch.Put(cf, it->key(), it->value());
    ++restored;
    if (batch.Count() >= 1000) {
      if (!db.Write(rocksdb::WriteOptions(), &batch).ok()) return {};
      batch.Clear();
    }
  }
  if (!it->status().ok()) {
    log_warning("salvage: cannot read the backup copy " + copy.string() + ": " +
                it->status().ToString());
    return {};
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (!db.Write(sync, &batch).ok()) return {};
  return std::to_string(restored) + " records from " + copy.string();
}

}  // namespace

std::unique_ptr<rocksdb_engine> rocksdb_engine::open(const fs::path& dir,
                                                     const rocksdb_engine_options& options) {
  std::unique_ptr<rocksdb_engine> self(new rocksdb_engine());
  self->dir_ = dir;
  self->where_ = "store " + dir.string();
  self->read_only_ = options.read_only;
  db_config config = make_config(options.block_cache_bytes, options.blob_payloads);
  if (options.create) {
    config.db.create_if_missing = true;
    config.db.create_missing_column_families = true;
    config.db.error_if_exists = true;
  }
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  const rocksdb::Status s =
      options.read_only
          ? rocksdb::DB::OpenForReadOnly(config.db, dir.string(), config.cfs, &handles, &raw)
          : rocksdb::DB::Open(config.db, dir.string(), config.cfs, &handles, &raw);
  if (!s.ok()) {
    if (options.create)
      throw store_error(errno_of(s),
                        "cannot create the database in " + dir.string() + ": " + s.ToString());
    if (s.IsCorruption())
      throw store_error(EUCLEAN, "cannot open store " + dir.string() + ": " + s.ToString() +
                                     "; `densefs fsck --repair " + dir.string() +
                                     "` salvages what can be read (docs/fsck.md)");
    throw store_error(errno_of(s), "cannot open store " + dir.string() + ": " + s.ToString());
  }
  self->db_.reset(raw);
  self->cfs_ = std::move(handles);
  self->block_cache_ = config.block_cache;
  self->flush_listener_ = config.flush_listener;
  // A backup right away on its own thread (a store last closed by a crash
  // has none of its newest tables), then hourly.
  if (!options.read_only && !options.create) {
    const std::chrono::seconds interval = backup_interval();
    if (interval.count() > 0)
      self->backup_thread_ = std::thread([e = self.get(), interval] { e->backup_loop(interval); });
  }
  return self;
}

rocksdb_engine::salvage_result rocksdb_engine::salvage(const fs::path& dir, const fs::path& keep) {
  // The originals first: nothing RepairDB drops or rewrites is lost.
  std::error_code ec;
  fs::create_directories(keep, ec);
  if (ec) throw store_error(ec.value(), "cannot create " + keep.string() + ": " + ec.message());
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool database_file = name.ends_with(".sst") || name.ends_with(".log") ||
                               name.ends_with(".blob") || name.starts_with("MANIFEST-") ||
                               name.starts_with("OPTIONS-") || name == "CURRENT" ||
                               name == "IDENTITY";
    if (!database_file || !e.is_regular_file()) continue;
    fs::copy_file(e.path(), keep / name, fs::copy_options::overwrite_existing, ec);
    if (ec)
      throw store_error(ec.value(),
                        "cannot keep a copy of " + e.path().string() + ": " + ec.message());
  }
  std::set<std::string> lost_before;
  for (const auto& e : fs::recursive_directory_iterator(dir / "lost", ec))
    lost_before.insert(e.path().string());
  db_config config = make_config(8u << 20, false);
  rocksdb::ColumnFamilyOptions unknown;
  const rocksdb::Status s = rocksdb::RepairDB(dir.string(), config.db, config.cfs, unknown);
  if (!s.ok())
    throw store_error(errno_of(s), "cannot salvage the database in " + dir.string() + ": " +
                                       s.ToString() + " (the originals are in " + keep.string() +
                                       ")");
  salvage_result result;
  std::vector<fs::path> set_aside;
  for (const auto& e : fs::recursive_directory_iterator(dir / "lost", ec))
    if (e.is_regular_file() && !lost_before.contains(e.path().string()))
      set_aside.push_back(e.path());
  // Newest first (a higher file number is a later table): where two copies
  // hold a key, the newer one's record is the one put.
  std::sort(set_aside.begin(), set_aside.end(), [](const fs::path& a, const fs::path& b) {
    return std::strtoull(a.filename().c_str(), nullptr, 10) >
           std::strtoull(b.filename().c_str(), nullptr, 10);
  });
  // Column families without a table file (never flushed, or all of their
  // tables lost) are not in the rebuilt manifest: made again, empty.
  {
    config.db.create_missing_column_families = true;
    rocksdb::DB* raw = nullptr;
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    const rocksdb::Status o =
        rocksdb::DB::Open(config.db, dir.string(), config.cfs, &handles, &raw);
    if (!o.ok())
      throw store_error(errno_of(o), "cannot open the salvaged database in " + dir.string() + ": " +
                                         o.ToString() + " (the originals are in " + keep.string() +
                                         ")");
    for (const fs::path& lost : set_aside) {
      const std::string name = lost.filename().string();
      const std::string from = restore_table(*raw, handles, dir / k_metadata_backup_dir / name);
      if (from.empty()) {
        result.set_aside.push_back(lost.string());
      } else {
        result.restored.push_back(name + ": " + from);
      }
    }
    // Every table rewritten: a damaged block RepairDB's scan does not read
    // (a filter or index block of a table it kept) is left behind.
    // Best effort: a table that cannot be read keeps its records as they are.
    for (auto* h : handles) {
      const rocksdb::Status compacted = raw->CompactRange({}, h, nullptr, nullptr);
      if (!compacted.ok())
        log_warning("salvage: cannot rewrite the tables of column family " + h->GetName() + ": " +
                    compacted.ToString());
    }
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    const rocksdb::Status c = raw->Close();
    delete raw;
    if (!c.ok())
      throw store_error(errno_of(c), "cannot close the salvaged database in " + dir.string() +
                                         ": " + c.ToString());
  }
  return result;
}

void rocksdb_engine::backup_loop(std::chrono::seconds interval) {
  // Optional work, but not SCHED_IDLE: while it copies, deletions of
  // obsolete table files wait for it, so it must not starve behind busy
  // threads.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
  std::unique_lock lock(backup_wait_mutex_);
  do {
    lock.unlock();
    back_up_tables(true);
    lock.lock();
  } while (!backup_wake_.wait_for(lock, interval, [&] { return backup_stopping_; }));
}

bool rocksdb_engine::backup_stopping() {
  std::lock_guard lock(backup_wait_mutex_);
  return backup_stopping_;
}

void rocksdb_engine::back_up_tables(bool stoppable) {
  if (read_only_ || !db_) return;
  std::lock_guard lock(backup_mutex_);
  const fs::path backup = dir_ / k_metadata_backup_dir;
  // Live tables are not deleted while they are copied (a compaction would
  // delete its inputs); deletions wait until EnableFileDeletions.
  if (!db_->DisableFileDeletions().ok()) return;
  std::set<std::string> live;
  std::size_t copied = 0;
  try {
    std::error_code ec;
    fs::create_directories(backup, ec);
    fs::permissions(backup, fs::perms::owner_all, ec);
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    std::uint64_t to_copy = 0;
    for (const rocksdb::LiveFileMetaData& f : files)
      if (!fs::exists(backup / fs::path(f.name).filename(), ec)) to_copy += f.size;
    // Never the copy that fills the disk: the database itself needs the room.
    const fs::space_info space = fs::space(dir_, ec);
    if (!ec && to_copy > 0 && space.available < 2 * to_copy + (256u << 20))
      throw store_error(ENOSPC, "skipped: " + std::to_string(to_copy) +
                                    " bytes of new tables, too little free space");
    for (const rocksdb::LiveFileMetaData& f : files) {
      const std::string name = fs::path(f.name).filename().string();
      live.insert(name);
      if (fs::exists(backup / name, ec)) continue;
      // The engine is closing: its close makes a backup of its own.
      if (stoppable && backup_stopping()) break;
      const fs::path temp = backup / (name + ".tmp");
      fs::copy_file(dir_ / name, temp, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        fs::remove(temp, ec);
        throw store_error(ec.value(), "cannot copy " + (dir_ / name).string() + " to " +
                                          temp.string() + ": " + ec.message());
      }
      // A table damaged before its first copy is not kept as if it were
      // good: fsck --repair salvages it.
      if (const std::string problem = table_problem(temp); !problem.empty()) {
        fs::remove(temp, ec);
        log_warning("metadata backup: table " + name + " of " + where_ + " fails its checksums (" +
                    problem + "); `densefs fsck --repair " + dir_.string() +
                    "` salvages what can be read");
        continue;
      }
      fsync_path(temp, O_RDONLY);
      fs::rename(temp, backup / name, ec);
      if (ec) throw store_error(ec.value(), "cannot rename " + temp.string() + ": " + ec.message());
      ++copied;
    }
    // Copies of tables compacted away since (and a copy cut short): a
    // salvage needs only live ones.
    if (live.size() == files.size()) {
      std::vector<fs::path> stale;
      for (fs::directory_iterator it(backup, ec), end; !ec && it != end; it.increment(ec))
        if (!live.contains(it->path().filename().string())) stale.push_back(it->path());
      for (const fs::path& p : stale) fs::remove(p, ec);
    }
    if (copied > 0) fsync_path(backup, O_RDONLY | O_DIRECTORY);
  } catch (const std::exception& e) {
    log_warning(std::string("metadata backup of ") + where_ + ": " + e.what());
  }
  db_->EnableFileDeletions(false);
}

std::string rocksdb_engine::verify_checksums() const {
  const rocksdb::Status s = db_->VerifyChecksum();
  return s.ok() ? std::string() : s.ToString();
}

rocksdb_engine::~rocksdb_engine() {
  if (backup_thread_.joinable()) {
    {
      std::lock_guard lock(backup_wait_mutex_);
      backup_stopping_ = true;
    }
    backup_wake_.notify_all();
    backup_thread_.join();
  }
  if (flush_listener_) flush_listener_->set({});
  if (db_ && !read_only_ && needs_resume_) {
    try {
      resume_after_write_error();
    } catch (const store_error& e) {
      // RocksDB does not recover from a failed write to its log without a
      // reopen, and closing it then trips an assertion inside RocksDB
      // (Debian builds it with assertions on) on the log writer that saw the
      // error. Leave it open instead, as a crash would: everything
      // acknowledged is in the log, and the next open recovers it.
      log_error("closing " + where_ +
                " without flushing after a write error it could not recover from (" + e.what() +
                "); the next mount recovers it from its write-ahead log");
      abandon_db(std::move(db_), std::move(cfs_));
      return;
    }
  }
  if (db_ && !read_only_) {
    // Memtables to table and blob files now: otherwise their write-ahead
    // logs stay on disk until some later mount fills a memtable, and every
    // mount's recovery adds one more (a store of 30 MiB of photos was seen
    // using 80 MiB on disk).
    rocksdb::FlushOptions fo;
    fo.wait = true;
    const rocksdb::Status s = db_->Flush(fo, cfs_);
    if (!s.ok()) log_error("flushing " + where_ + " at close: " + s.ToString());
    back_up_tables();  // with what that flush wrote
  }
  close_db(db_.get(), cfs_, where_);
  db_.reset();
}

// After a failed write RocksDB stays read-only until told to resume, which
// succeeds once the cause is gone (space is back). A failed write to the
// write-ahead log itself cannot be resumed: RocksDB answers with the original
// error until the store is reopened (docs/testing.md, "Faults under the
// store").
void rocksdb_engine::resume_after_write_error() {
  if (!needs_resume_) return;
  std::lock_guard lock(resume_mutex_);
  if (!needs_resume_) return;
  const rocksdb::Status s = db_->Resume();
  if (!s.ok())
    throw store_error(errno_of(s), where_ +
                                       " cannot resume after an earlier write error (unmount "
                                       "and mount it again): " +
                                       s.ToString());
  log_info(where_ + ": writing again after an earlier write error");
  needs_resume_ = false;
}

std::optional<std::string> rocksdb_engine::get(table t, std::string_view key,
                                               std::string_view what) const {
  std::string value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), cfs_[static_cast<std::size_t>(t)], slice(key), &value);
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok())
    throw store_error(errno_of(s),
                      "reading " + std::string(what) + " in " + where_ + ": " + s.ToString());
  return value;
}

namespace {

std::vector<std::optional<std::string>> rocksdb_multi_get(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf, const rocksdb::ReadOptions& ro,
    std::span<const std::string> keys, std::string_view what, const std::string& where) {
  std::vector<std::optional<std::string>> out(keys.size());
  if (keys.empty()) return out;
  std::vector<rocksdb::Slice> slices;
  slices.reserve(keys.size());
  for (const auto& k : keys) slices.push_back(slice(k));
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  db.MultiGet(ro, cf, keys.size(), slices.data(), values.data(), statuses.data());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok())
      throw store_error(errno_of(statuses[i]), "reading " + std::string(what) + " in " + where +
                                                   ": " + statuses[i].ToString());
    out[i].emplace(view(values[i]));
  }
  return out;
}

}  // namespace

std::vector<std::optional<std::string>> rocksdb_engine::get_many(table t,
                                                                 std::span<const std::string> keys,
                                                                 std::string_view what) const {
  return rocksdb_multi_get(*db_, cfs_[static_cast<std::size_t>(t)], rocksdb::ReadOptions(), keys,
                           what, where_);
}

std::vector<std::optional<std::string>> rocksdb_engine::get_payloads(
    std::span<const std::string> keys, std::string_view what) const {
  return rocksdb_multi_get(*db_, cfs_[k_payloads_cf], payload_read_options(), keys, what, where_);
}

void rocksdb_engine::scan(
    table t, const key_range& range, const scan_options& options, std::string_view what,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  rocksdb::ReadOptions ro;
  ro.fill_cache = options.fill_cache;
  const rocksdb::Slice lower = slice(range.lower);
  const rocksdb::Slice upper = slice(range.upper);
  if (!range.lower.empty()) ro.iterate_lower_bound = &lower;
  if (!range.upper.empty()) ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_[static_cast<std::size_t>(t)]));
  const std::string_view start = options.start.empty() || options.start < range.lower
                                     ? std::string_view(range.lower)
                                     : options.start;
  // A start at or past the upper bound: from the last key in range.
  const bool start_past_end = !range.upper.empty() && start >= std::string_view(range.upper);
  switch (options.order) {
    case scan_order::forward:
      it->Seek(slice(start));
      break;
    case scan_order::forward_from_floor:
      if (start_past_end) {
        it->SeekToLast();
      } else {
        it->SeekForPrev(slice(start));
        if (!it->Valid() && it->status().ok()) it->Seek(slice(start));
      }
      break;
    case scan_order::backward:
      if (options.start.empty() || start_past_end)
        it->SeekToLast();
      else
        it->SeekForPrev(slice(start));
      break;
  }
  const bool backward = options.order == scan_order::backward;
  for (; it->Valid(); backward ? it->Prev() : it->Next())
    if (!fn(view(it->key()), view(it->value()))) return;
  if (!it->status().ok())
    throw store_error(errno_of(it->status()),
                      std::string(what) + " in " + where_ + ": " + it->status().ToString());
}

void rocksdb_engine::scan_consistent(
    std::span<const table> tables, std::string_view what,
    const std::function<void(table t, std::string_view key, std::string_view value)>& fn) const {
  // One snapshot for every table: a write batch is in it whole or not at all.
  struct snapshot_guard {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snapshot;
    ~snapshot_guard() { db->ReleaseSnapshot(snapshot); }
  } guard{db_.get(), db_->GetSnapshot()};
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;  // one pass over everything
  ro.snapshot = guard.snapshot;
  for (const table t : tables) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_[static_cast<std::size_t>(t)]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) fn(t, view(it->key()), view(it->value()));
    if (!it->status().ok())
      throw store_error(errno_of(it->status()),
                        std::string(what) + " in " + where_ + ": " + it->status().ToString());
  }
}

std::unique_ptr<metadata_batch> rocksdb_engine::new_batch() const {
  return std::make_unique<rocksdb_batch>(cfs_);
}

void rocksdb_engine::write(metadata_batch& batch, bool sync) {
  if (read_only_) throw store_error(EROFS, where_ + " is open read-only");
  resume_after_write_error();
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  const rocksdb::Status s = db_->Write(wo, &static_cast<rocksdb_batch&>(batch).batch());
  if (!s.ok()) {
    needs_resume_ = true;
    if (is_no_space(s)) throw store_error(ENOSPC, where_ + " is out of space: " + s.ToString());
    throw store_error(errno_of(s), "committing to " + where_ + ": " + s.ToString());
  }
  // needs_resume_ stays as it is: only a successful Resume() clears it. A
  // sync or write on another thread may have failed while this write was
  // in flight, and RocksDB is then stopped however this one ended.
}

void rocksdb_engine::sync() {
  if (read_only_) return;
  // Not after an unrecovered write error: syncing the log writer that saw it
  // trips an assertion inside RocksDB (see ~rocksdb_engine).
  resume_after_write_error();
  const rocksdb::Status s = db_->FlushWAL(true);
  if (!s.ok()) {
    needs_resume_ = true;  // RocksDB stops writing after a failed sync too
    throw store_error(errno_of(s), "syncing " + where_ + ": " + s.ToString());
  }
}

void rocksdb_engine::drop_caches() const {
  // Blocks pinned by a running read stay until it releases them.
  if (block_cache_) block_cache_->EraseUnRefEntries();
}

void rocksdb_engine::set_blob_payloads(bool on) {
  const rocksdb::Status s =
      db_->SetOptions(cfs_[k_payloads_cf], {{"enable_blob_files", on ? "true" : "false"}});
  if (!s.ok()) throw store_error(EIO, "configuring " + where_ + ": " + s.ToString());
}

void rocksdb_engine::set_before_flush(std::function<void()> fn) {
  flush_listener_->set(std::move(fn));
}

std::uint64_t rocksdb_engine::blob_file_bytes() const {
  std::uint64_t bytes = 0;
  if (!db_->GetIntProperty(cfs_[k_payloads_cf], "rocksdb.total-blob-file-size", &bytes)) return 0;
  return bytes;
}

void rocksdb_engine::flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  const rocksdb::Status s = db_->Flush(fo, cfs_);
  if (!s.ok()) throw store_error(errno_of(s), "flushing " + where_ + ": " + s.ToString());
}

void rocksdb_engine::compact_all(bool rewrite_blobs, std::atomic<bool>& cancel,
                                 const std::function<void(const std::string&)>& phase) {
  for (std::size_t cf = 0; cf < k_table_count; ++cf) {
    const std::string name = table_name(static_cast<table>(cf));
    if (phase) phase("compacting " + name);
    rocksdb::CompactRangeOptions o;
    o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    // Automatic compactions (and so writes, which would stall without
    // them) go on meanwhile: a mounted store stays usable.
    o.exclusive_manual_compaction = false;
    o.canceled = &cancel;
    if (cf == k_payloads_cf) {
      // Without room to copy live payloads, no blob GC at all (the column
      // family's own setting would still copy those of the oldest files).
      o.blob_garbage_collection_policy = rewrite_blobs
                                             ? rocksdb::BlobGarbageCollectionPolicy::kForce
                                             : rocksdb::BlobGarbageCollectionPolicy::kDisable;
      o.blob_garbage_collection_age_cutoff = 1.0;  // every blob file
    }
    const rocksdb::Status s = db_->CompactRange(o, cfs_[cf], nullptr, nullptr);
    if (s.IsIncomplete() && cancel)  // CompactRange stopped by `cancel`
      throw store_error(ECANCELED,
                        "collecting garbage in " + where_ + ": canceled (the store is closing)");
    if (!s.ok())
      throw store_error(errno_of(s), "collecting garbage in " + where_ + ": compacting " + name +
                                         ": " + s.ToString());
  }
  // CompactRange returns once its compaction is installed; the thread that
  // ran it deletes the blob files left without a live payload after waking
  // the waiter. gc measures the disk right after this: without the wait a
  // loaded machine showed the space not yet back (gc_cli_test, 5 of 20).
  if (rewrite_blobs) wait_for_dead_blob_files(cancel);
}

void rocksdb_engine::wait_for_dead_blob_files(const std::atomic<bool>& cancel) const {
  // The dead files of the first look only: a flush or compaction running
  // meanwhile may make new ones, which are not this wait's business.
  std::set<std::string> waiting;
  std::chrono::steady_clock::time_point deadline;
  for (bool first = true;; first = false) {
    std::set<std::uint64_t> live;
    for (auto* cf : cfs_) {
      rocksdb::ColumnFamilyMetaData meta;
      db_->GetColumnFamilyMetaData(cf, &meta);
      for (const auto& b : meta.blob_files) live.insert(b.blob_file_number);
    }
    std::set<std::string> dead;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.ends_with(".blob") && !live.contains(std::strtoull(name.c_str(), nullptr, 10)) &&
          (first || waiting.contains(name)))
        dead.insert(name);
    }
    waiting = std::move(dead);
    if (waiting.empty() || cancel) return;
    if (first) {
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    } else if (std::chrono::steady_clock::now() > deadline) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace densefs::store
