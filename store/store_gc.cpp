// Garbage: what is dead, and collecting it.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "store/log.h"
#include "store/metadata/metadata_engine.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/payload/pack_store.h"
#include "store/records_detail.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

namespace {
namespace fs = std::filesystem;

// gc rewrites a pack once this share of its bytes is dead: each rewrite
// copies at most 4x the space it gives back.
constexpr double k_pack_dead_share = 0.2;
// A requested collection also rewrites packs with less, until the dead
// bytes left are at most this share of the pack files (store.h, gc_depth).
constexpr double k_requested_dead_left = 0.05;

// The dead share from which a collection rewrites a pack
// (pack_store::compact). Requested: the packs with the least dead share
// stay, as many as keep their dead bytes within k_requested_dead_left of
// the pack bytes left after the collection; the rest, from the next pack's
// share up, are rewritten (their dead bytes go).
double pack_dead_share_to_rewrite(const std::vector<pack_store::pack_usage>& packs,
                                  store::gc_depth depth) {
  if (depth == store::gc_depth::automatic) return k_pack_dead_share;
  std::vector<std::pair<double, std::uint64_t>> shares;  // (dead share, dead bytes)
  std::uint64_t file_bytes = 0, dead_bytes = 0;
  for (const pack_store::pack_usage& u : packs) {
    if (u.file_bytes == 0) continue;
    file_bytes += u.file_bytes;
    dead_bytes += u.dead_bytes();
    shares.emplace_back(static_cast<double>(u.dead_bytes()) / static_cast<double>(u.file_bytes),
                        u.dead_bytes());
  }
  std::sort(shares.begin(), shares.end());
  std::uint64_t kept_dead = 0;
  for (const auto& [share, dead] : shares) {
    kept_dead += dead;
    const std::uint64_t left = file_bytes - (dead_bytes - kept_dead);
    // From this pack up, every pack is rewritten. Its share is above 5%
    // (every kept pack's share is at most its own, so the kept dead bytes
    // could not pass 5% otherwise): a requested rewrite copies at most ~19
    // bytes per byte it gives back, never a pack without dead bytes.
    if (static_cast<double>(kept_dead) > k_requested_dead_left * static_cast<double>(left))
      return std::min(share, k_pack_dead_share);
  }
  return k_pack_dead_share;
}
}  // namespace

namespace {

// What RocksDB adds to every value it puts in a blob file: the record
// header (key and value sizes, expiration, two CRCs) and the key (our 32-byte
// chunk hash). Used only to estimate the garbage in blob files.
constexpr std::uint64_t k_blob_record_overhead = 32 + chunk_hash::k_size;

// Adds the store directory's files to `r`, by kind (RocksDB's file names),
// except those under `skip` (a scale-out volume's cache, whose packs are
// copies).
void add_file_sizes(const fs::path& dir, const fs::path& skip, gc_report& r) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!skip.empty() && it->path() == skip) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) != 0 || S_ISDIR(sb.st_mode)) continue;
    // Apparent sizes (du -sb): while the store is open RocksDB preallocates
    // its write-ahead log and MANIFEST (fallocate, up to ~18 and 4 MiB) and
    // gives the rest back at close, so allocated blocks would make the same
    // store look bigger while mounted.
    const auto bytes = static_cast<std::uint64_t>(sb.st_size);
    const std::string name = it->path().filename().string();
    r.disk_bytes += bytes;
    if (name.ends_with(".blob") || name.ends_with(".pack")) {
      r.payload_file_bytes += bytes;
    } else if (name.ends_with(".sst")) {
      r.table_file_bytes += bytes;
    } else if (name.ends_with(".log")) {
      r.wal_bytes += bytes;
    } else if (name == "LOG") {
      r.info_log_bytes += bytes;
    } else if (name.starts_with("LOG.old.")) {
      r.old_info_log_bytes += bytes;
    } else {
      r.other_file_bytes += bytes;
    }
  }
}

}  // namespace

gc_report store::garbage() const {
  gc_report r;
  r.payload_backend = payload_backend_name(settings_.payloads);
  r.garbage_since_collect = garbage_bytes_.load();
  scan_prefix(table::chunks, {}, {}, "scanning chunks",
              [&](std::string_view key, std::string_view value) {
                if (gc_canceled_.load(std::memory_order_relaxed))
                  throw store_error(ECANCELED, "scanning the chunks of store " + dir_.string() +
                                                   ": canceled (the store is closing)");
                const chunk_record c =
                    detail::decode_chunk(value, "chunk " + chunk_hash::from_bytes(key).hex());
                ++r.chunks;
                r.live_payload_bytes += c.stored_size;
                if (!packs_ && c.stored_size >= k_min_blob_size)
                  r.live_blob_payload_bytes += c.stored_size + k_blob_record_overhead;
                return true;
              });
  add_file_sizes(dir_, packs_ && packs_->remote() ? packs_->cache_dir() : fs::path(), r);
  if (packs_ && packs_->remote()) {
    const std::uint64_t objects = packs_->file_bytes();
    r.payload_file_bytes += objects;
    r.disk_bytes += objects;
  }
  if (packs_) {
    // Exact: the index says which pack bytes are live. Everything else in
    // the pack files is garbage; the write-ahead log holds no pack payloads.
    std::uint64_t live_and_headers = 0;
    for (const pack_store::pack_usage& u : packs_->usage(&gc_canceled_)) {
      r.live_blob_payload_bytes += u.live_bytes;
      if (u.file_bytes > 0) {
        ++r.pack_files;
        live_and_headers += u.live_bytes + k_pack_header_size;
      }
    }
    r.payload_garbage_bytes =
        r.payload_file_bytes > live_and_headers ? r.payload_file_bytes - live_and_headers : 0;
    r.reclaimable_bytes = r.payload_garbage_bytes + r.info_log_bytes + r.old_info_log_bytes;
    return r;
  }
  // Every payload is in the write-ahead log until a flush moves it to a
  // blob file (a log file goes once every column family has flushed past
  // it, so it often holds payloads that are in blob files already): after
  // collect_garbage's flush, blob files hold the live payloads and the log
  // nothing.
  const std::uint64_t payload_bytes = r.payload_file_bytes + r.wal_bytes;
  if (payload_bytes > r.live_blob_payload_bytes)
    r.payload_garbage_bytes = payload_bytes - r.live_blob_payload_bytes;
  r.reclaimable_bytes = r.payload_garbage_bytes + r.info_log_bytes + r.old_info_log_bytes;
  return r;
}

gc_result store::collect_garbage(const std::function<void(std::string_view phase)>& progress,
                                 gc_depth depth) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  std::lock_guard lock(gc_mutex_);
  // Beside other writers one collects at a time.
  if (!membership_->take_lease(volume_membership::k_lease_gc))
    throw store_error(EBUSY, "collecting garbage in " + engine_->where() +
                                 ": another writer of the volume is collecting it");
  const auto started = std::chrono::steady_clock::now();
  const auto throw_if_canceled = [&] {
    if (gc_canceled_)
      throw store_error(ECANCELED, "collecting garbage in store " + dir_.string() +
                                       ": canceled (the store is closing)");
  };
  const auto phase = [&](std::string_view what) {
    throw_if_canceled();
    if (progress) progress(what);
  };
  gc_result result;
  std::uint64_t packs_deleted = 0;
  std::uint64_t packs_deferred = 0;
  phase("measuring");
  result.before = garbage();

  // Copying the live payloads needs their size in free space (the old blob
  // files go only at the end), on top of the reserve RocksDB needs for its
  // flushes (check_space_for). Without that room a compaction would hit
  // ENOSPC, which stops every write until Resume(); so then only what needs
  // no copy is done: tombstones dropped, and blob files holding nothing
  // live deleted.
  bool rewrite_payloads = true;
  bool compact = true;
  try {
    check_space_for(result.before.live_blob_payload_bytes + result.before.table_file_bytes);
  } catch (const store_error& e) {
    log_info("gc: " + std::string(e.what()) + "; collecting only blob files without live payloads");
    rewrite_payloads = false;
    // Even without blob GC, a forced compaction rewrites the table files.
    try {
      check_space_for(result.before.table_file_bytes);
    } catch (const store_error&) {
      compact = false;
    }
  }
  result.rewrote_payloads = rewrite_payloads;

  // 0. Pack stores: packs with enough dead bytes rewritten (their live
  //    records copied to the current pack, the index moved in one synced
  //    commit, the old pack deleted). Needs room for the copies only.
  //    Not while writing beside other writers of the volume: another
  //    writer's packs are uploaded before the commit that names them (its
  //    staged payloads), so a pack this process sees without a live record
  //    may be about to get some. That waits for one gc at a time across
  //    the writers (a lease; docs/scale-out.md, "Several writers").
  if (packs_ && writes_beside_others())
    log_info("gc: not compacting packs beside other writers of the volume");
  if (packs_ && !writes_beside_others()) {
    const std::vector<pack_store::pack_usage> usage = packs_->usage(&gc_canceled_);
    // The live bytes a compaction from `share` copies; the same test as
    // pack_store::compact's, so the room asked for is the room it takes.
    const auto live_to_move = [&](double share) {
      std::uint64_t bytes = 0;
      for (const pack_store::pack_usage& u : usage)
        if (u.file_bytes > 0 &&
            static_cast<double>(u.dead_bytes()) / static_cast<double>(u.file_bytes) >= share)
          bytes += u.live_bytes;
      return bytes;
    };
    // The copies may use the space reserve (check_space_for) but not all of
    // it: compaction is how a full pack store gets space back (each rewritten
    // pack frees more than its copies take), while RocksDB still needs room
    // for the index commit and its flushes. A requested collection that
    // does not fit falls back to the automatic one's packs before giving up
    // copying: on a full disk that is where most space comes back per byte
    // copied.
    double dead_share = pack_dead_share_to_rewrite(usage, depth);
    bool room = true;
    struct ::statvfs sv {};
    if (::statvfs(dir_.c_str(), &sv) == 0) {
      const std::uint64_t block = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
      const std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * block;
      const auto fits = [&](std::uint64_t bytes) {
        return free >= bytes + k_min_space_reserve / 4;
      };
      std::uint64_t to_move = live_to_move(dead_share);
      if (!fits(to_move) && dead_share < k_pack_dead_share) {
        const std::uint64_t fifth_dead = live_to_move(k_pack_dead_share);
        if (fits(fifth_dead)) {
          log_info("gc: " + std::to_string(free) + " bytes free, too few to copy " +
                   std::to_string(to_move) +
                   " live pack bytes; rewriting only packs with a fifth dead or more");
          dead_share = k_pack_dead_share;
          to_move = fifth_dead;
        }
      }
      if (!fits(to_move)) {
        log_info("gc: " + std::to_string(free) + " bytes free, too few to copy " +
                 std::to_string(to_move) +
                 " live pack bytes; deleting only packs without live records");
        room = false;
      }
    }
    phase("compacting packs");
    // Without room, a threshold above 1 selects only packs with nothing live.
    const pack_store::compaction c = packs_->compact(room ? dead_share : 2.0, ahead_gate_,
                                                     commit_mutex_, gc_canceled_, progress);
    packs_deleted = c.packs_deleted;
    packs_deferred = c.packs_deferred;
    if (!room) result.rewrote_payloads = rewrite_payloads = false;
  }

  // 1. Memtables to table and blob files. A write-ahead log file is deleted
  //    once every column family has flushed past it, so this is what frees
  //    the log (which holds every payload written since the last flush).
  phase("flushing");
  if (rocksdb_) rocksdb_->flush();

  // 2. Every column family compacted to its bottommost level: only there do
  //    tombstones (deleted chunks, extents, inodes, dirents) and the values
  //    they hide go away. For the payloads, blob GC forced over every blob
  //    file (age cutoff 1.0): the live payloads of a file that holds any
  //    garbage are copied to a new blob file, and a file whose payloads are
  //    all garbage is deleted. RocksDB's own blob GC (enable_blob_garbage_
  //    collection) only looks at the oldest files, and only when a
  //    compaction happens to touch them.
  //    (PostgreSQL's autovacuum does this for its tables.)
  if (compact && rocksdb_)
    rocksdb_->compact_all(rewrite_payloads, gc_canceled_,
                          [&](const std::string& what) { phase(what); });

  // 3. RocksDB's info logs, which densefs before 2026-12 kept in the store
  //    (LOG and a few LOG.old.*); nothing reads them, and nothing writes
  //    them now (rocksdb_info_log.h).
  phase("removing old info logs");
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != "LOG" && !name.starts_with("LOG.old.")) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
    if (rm) log_error("gc: cannot remove " + it->path().string() + ": " + rm.message());
  }

  // Garbage made since the measurement above is left for the next
  // collection (the compactions may or may not have seen it). A partial or
  // failed collection (an exception above) subtracts nothing, so the
  // collector tries again. Only collections subtract, one at a time, so
  // this cannot wrap.
  if (rewrite_payloads && compact) garbage_bytes_ -= result.before.garbage_since_collect;

  phase("measuring");
  result.after = garbage();
  result.after.packs_deleted = packs_deleted;
  result.after.packs_deferred = packs_deferred;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  gc_runs_.fetch_add(1, std::memory_order_relaxed);
  gc_reclaimed_bytes_.fetch_add(result.reclaimed_bytes(), std::memory_order_relaxed);
  return result;
}

void store::cancel_garbage_collection() {
  gc_canceled_ = true;
}

// Every field under its own name (`densefs gc --json`).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(gc_report, payload_backend, disk_bytes, payload_file_bytes,
                                   pack_files, packs_deleted, packs_deferred, table_file_bytes,
                                   wal_bytes, info_log_bytes, old_info_log_bytes, other_file_bytes,
                                   chunks, live_payload_bytes, live_blob_payload_bytes,
                                   payload_garbage_bytes, garbage_since_collect, reclaimable_bytes)

std::string to_json(const gc_report& r) {
  return nlohmann::json(r).dump();
}

std::string to_json(const gc_result& r) {
  nlohmann::json j;
  j["before"] = r.before;
  j["after"] = r.after;
  j["reclaimed_bytes"] = r.reclaimed_bytes();
  j["rewrote_payloads"] = r.rewrote_payloads;
  j["seconds"] = r.seconds;
  return j.dump();
}

bool store::is_queued_for_recompress(const chunk_hash& hash) const {
  return engine_->get(table::meta, recompress_key(hash), "the re-encoding queue").has_value();
}

}  // namespace densefs::store
