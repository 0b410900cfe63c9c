#include "store/payload/pack_store.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "store/error.h"
#include "store/log.h"
#include "store/payload/local_pack_home.h"
#include "store/payload/object_pack_home.h"
#include "store/records.h"

namespace densefs::store {
namespace fs = std::filesystem;

namespace {

std::string_view key_of(const chunk_hash& hash) {
  return hash.view();
}

void write_all(int fd, const struct iovec* iov, int count, std::uint64_t offset,
               const fs::path& path) {
  std::vector<struct iovec> v(iov, iov + count);
  std::size_t first = 0;
  while (first < v.size()) {
    const ssize_t n = ::pwritev(fd, v.data() + first, static_cast<int>(v.size() - first),
                                static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw store_error(e, "writing pack " + path.string() + ": " + errno_text(e));
    }
    offset += static_cast<std::uint64_t>(n);
    auto left = static_cast<std::size_t>(n);
    while (first < v.size() && left >= v[first].iov_len) left -= v[first++].iov_len;
    if (first < v.size()) {
      v[first].iov_base = static_cast<char*>(v[first].iov_base) + left;
      v[first].iov_len -= left;
    }
  }
}

}  // namespace

pack_store::pack_store(metadata_engine& engine, fs::path store_dir, options o)
    : engine_(engine),
      options_(o),
      reader_(make_batched_reader(o.io)),
      gathers_(o.remote && !o.read_only && o.gather_bytes > 0) {
  if (!o.remote) {
    home_ = std::make_unique<local_pack_home>(store_dir / "packs");
    return;
  }
  object_pack_home::options h;
  h.objects = o.remote;
  h.cache_dir = o.cache_dir.empty() ? store_dir / "cache" : o.cache_dir;
  h.cache_bytes = o.cache_bytes;
  h.read_only = o.read_only;
  h.fill_cache = o.fill_cache;
  h.pack_size_cap = o.pack_size_cap;
  home_ = std::make_unique<object_pack_home>(engine, *reader_, std::move(h));
}

pack_store::~pack_store() = default;

void pack_store::roll_locked() {
  if (options_.read_only) throw store_error(EROFS, "pack store is read-only");
  current_ = home_->create();
  unsynced_.created = true;
  current_size_ = k_pack_header_size;
  writeback_from_ = 0;
  unsynced_.packs.push_back(current_);
}

pack_ref pack_store::append_locked(const struct iovec* iov, int count, std::uint32_t length,
                                   bool named) {
  if (!current_ || current_size_ >= options_.pack_size_cap) roll_locked();
  try {
    write_all(current_->fd, iov, count, current_size_, current_->path);
  } catch (const store_error&) {
    // Part of the record may be on disk: the next record starts a new
    // pack, so a scan of this one never runs into bytes after a torn one.
    current_.reset();
    throw;
  }
  const pack_ref ref{current_->id, current_size_, length};
  current_size_ += length;
  if (named && gathers_) named_.insert(current_->id);
  if (unsynced_.packs.empty() || unsynced_.packs.back() != current_)
    unsynced_.packs.push_back(current_);
  start_writeback_locked();
  return ref;
}

void pack_store::put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
                     const payload_meta& meta) {
  if (stored.size() < k_min_pack_payload) {
    batch.put(table::payloads, key_of(hash), encode_inline_payload(stored));
    return;
  }
  if (stored.size() > max_pack_payload(meta.codec))
    throw store_error(EIO, "chunk " + hash.hex() + ": stored size " +
                               std::to_string(stored.size()) + " too large for a pack record");
  char header[k_pack_record_header_size];
  write_record_header(header, hash, meta, stored);
  struct iovec iov[2] = {{header, sizeof(header)},
                         {const_cast<char*>(stored.data()), stored.size()}};
  const auto length = static_cast<std::uint32_t>(sizeof(header) + stored.size());
  const std::uint64_t checksum = gathers_ ? stored_checksum(stored) : 0;
  pack_ref ref;
  bool gathered = false;
  {
    std::lock_guard lock(append_mutex_);
    gathered = gathers_locked(length);
    ref = append_locked(iov, 2, length, !gathered);
    if (gathered) {
      gathered_[ref.pack].push_back({hash, ref, stored.size(), checksum, 0});
      gathered_since_sync_ += length;
    }
  }
  // A gathered record's entry carries its bytes until its pack is uploaded.
  batch.put(table::payloads, key_of(hash),
            gathered ? encode_inline_payload(stored) : encode_pack_ref(ref));
}

bool pack_store::gathers_locked(std::uint64_t length) const {
  if (!gathers_ || gathered_since_sync_ + length > k_gather_window) return false;
  // A new pack, or the one being filled while it is small and no entry
  // names it (then it is uploaded at the next sync anyway).
  if (!current_ || current_size_ >= options_.pack_size_cap) return true;
  return !named_.contains(current_->id) &&
         current_size_ + length <= std::min(options_.gather_bytes, options_.pack_size_cap);
}

void pack_store::seal_gathered() {
  std::lock_guard lock(append_mutex_);
  if (current_ && gathered_.contains(current_->id)) named_.insert(current_->id);
}

std::set<std::uint32_t> pack_store::packs_with_moves_pending() {
  // gathered_ before packs_moving_: sync() adds a pack to the second before
  // it leaves the first, so a pack in either is seen.
  std::set<std::uint32_t> out;
  {
    std::lock_guard lock(append_mutex_);
    for (const auto& [id, records] : gathered_) out.insert(id);
  }
  std::lock_guard lock(moves_mutex_);
  out.insert(packs_moving_.begin(), packs_moving_.end());
  return out;
}

namespace {

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool pack_store::has_moves_ready() const {
  return steady_ms() >= next_move_ms_.load(std::memory_order_acquire);
}

std::size_t pack_store::moves_pending() {
  std::lock_guard lock(moves_mutex_);
  return moves_ready_.size();
}

void pack_store::set_next_move_locked() {
  std::int64_t next = k_no_move;
  for (const gathered_record& r : moves_ready_) next = std::min(next, r.retry_at_ms);
  next_move_ms_.store(next, std::memory_order_release);
  packs_moving_.clear();
  for (const gathered_record& r : moves_ready_) packs_moving_.insert(r.ref.pack);
}

std::uint64_t pack_store::move_gathered(bool every_record) {
  const std::int64_t now = steady_ms();
  std::vector<gathered_record> todo;
  {
    std::lock_guard lock(moves_mutex_);
    std::vector<gathered_record> later;
    for (gathered_record& r : moves_ready_)
      (every_record || r.retry_at_ms <= now ? todo : later).push_back(std::move(r));
    moves_ready_ = std::move(later);
    set_next_move_locked();
    // packs_moving_ keeps the packs of `todo` until they are settled.
    for (const gathered_record& r : todo) packs_moving_.insert(r.ref.pack);
  }
  if (todo.empty()) return 0;
  std::vector<bool> finished(todo.size(), false);
  std::uint64_t moved = 0;
  try {
    engine_.write_locked(
        k_commit_section,
        [&](locked_reads& reads, metadata_batch& batch) {
          moved = 0;
          std::vector<std::string> keys;
          keys.reserve(todo.size());
          for (const gathered_record& r : todo) keys.emplace_back(key_of(r.hash));
          const std::vector<std::optional<std::string>> values =
              reads.get_many(table::payloads, keys, "the gathered payloads moving to their pack");
          for (std::size_t i = 0; i < todo.size(); ++i) {
            finished[i] = false;
            if (!values[i]) continue;  // not committed yet, or the chunk went
            finished[i] = true;
            payload_value v;
            try {
              v = decode_payload_value(todo[i].hash, *values[i]);
            } catch (const store_error&) {
              continue;  // fsck reports it
            }
            // Another value (a pack ref, new bytes of a recompression) stays.
            if (!v.inline_bytes || v.inline_bytes->size() != todo[i].size ||
                stored_checksum(*v.inline_bytes) != todo[i].checksum)
              continue;
            batch.put(table::payloads, keys[i], encode_pack_ref(todo[i].ref));
            ++moved;
          }
        },
        false);
  } catch (...) {
    std::lock_guard lock(moves_mutex_);
    moves_ready_.insert(moves_ready_.end(), todo.begin(), todo.end());
    set_next_move_locked();
    throw;
  }
  // An entry not there yet is looked for again later, less and less often:
  // its commit (a group written ahead of it) may still be to come.
  std::lock_guard lock(moves_mutex_);
  for (std::size_t i = 0; i < todo.size(); ++i) {
    if (finished[i] || ++todo[i].tries >= k_move_tries) continue;
    todo[i].retry_at_ms = now + (std::int64_t{1000} << (todo[i].tries - 1));
    moves_ready_.push_back(todo[i]);
  }
  set_next_move_locked();
  return moved;
}

// Starts the write-back of what was appended since the last call once there
// is enough of it, without waiting (RocksDB's bytes_per_sync): otherwise a
// big write leaves it all to the fdatasync of the next fsync, which then
// waits for the whole file (write-big: 14.9 s instead of 9.5 s with blob
// files, whose flushes write back while the data streams in).
void pack_store::start_writeback_locked() {
  if (current_size_ < writeback_from_ + k_writeback_step) return;
  ::sync_file_range(current_->fd, static_cast<off_t>(writeback_from_),
                    static_cast<off_t>(current_size_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
  writeback_from_ = current_size_;
}

void pack_store::remove(metadata_batch& batch, const chunk_hash& hash) {
  // The record stays in its pack as dead bytes until compaction.
  batch.erase(table::payloads, key_of(hash));
}

void pack_store::sync() {
  std::lock_guard serial(sync_mutex_);
  packs_to_make_durable pending;
  {
    std::lock_guard lock(append_mutex_);
    std::swap(pending, unsynced_);
    gathered_since_sync_ = 0;
    const auto current = std::find(pending.packs.begin(), pending.packs.end(), current_);
    if (current_ && current != pending.packs.end() && home_->seals_when_durable()) {
      if (gathers_ && !named_.contains(current_->id)) {
        // Only gathered records, whose entries carry their bytes: it goes
        // on filling, and is uploaded by a later sync.
        pending.packs.erase(current);
        unsynced_.packs.push_back(current_);
      } else {
        // A pack the home seals when it is made durable takes no more
        // records: the next record starts a new pack.
        current_.reset();
      }
    }
  }
  std::vector<std::uint32_t> uploading;
  for (const auto& f : pending.packs) uploading.push_back(f->id);
  try {
    home_->make_durable(pending);
  } catch (const store_error&) {
    // What is still not durable is made so by the next sync; the commit
    // waiting for this one fails now with this error. Those uploaded
    // before the failure may move their gathered records.
    if (gathers_) {
      std::erase_if(uploading, [&](std::uint32_t id) {
        return std::any_of(pending.packs.begin(), pending.packs.end(),
                           [&](const auto& f) { return f->id == id; });
      });
      gathered_packs_uploaded(uploading);
    }
    std::lock_guard lock(append_mutex_);
    unsynced_.packs.insert(unsynced_.packs.begin(), pending.packs.begin(), pending.packs.end());
    unsynced_.created = unsynced_.created || pending.created;
    throw;
  }
  if (gathers_) gathered_packs_uploaded(uploading);
}

void pack_store::gathered_packs_uploaded(std::span<const std::uint32_t> ids) {
  // Into packs_moving_ before out of gathered_ (packs_with_moves_pending).
  std::vector<gathered_record> records;
  {
    std::lock_guard lock(append_mutex_);
    for (const std::uint32_t id : ids) {
      named_.erase(id);
      if (auto it = gathered_.find(id); it != gathered_.end())
        records.insert(records.end(), it->second.begin(), it->second.end());
    }
  }
  if (!records.empty()) {
    std::lock_guard lock(moves_mutex_);
    moves_ready_.insert(moves_ready_.end(), records.begin(), records.end());
    set_next_move_locked();
  }
  std::lock_guard lock(append_mutex_);
  for (const std::uint32_t id : ids) gathered_.erase(id);
}

void pack_store::fail_read(const chunk_hash& hash, std::uint32_t pack,
                           const std::string& why) const {
  throw_pack_read_error(hash, home_->location(pack), why);
}

void pack_store::check_header(const chunk_hash& hash, const pack_ref& ref,
                              std::string_view header) const {
  if (header.size() != k_pack_record_header_size)
    fail_read(hash, ref.pack, "short read at offset " + std::to_string(ref.offset));
  const std::string why = record_header_problem(header.data(), ref.length);
  if (!why.empty()) fail_read(hash, ref.pack, why + " at offset " + std::to_string(ref.offset));
  if (std::memcmp(header.data() + 8, hash.bytes.data(), chunk_hash::k_size) != 0)
    fail_read(hash, ref.pack,
              "the record at offset " + std::to_string(ref.offset) + " is of another chunk");
}

std::string pack_store::read_whole_record(const chunk_hash& hash, const pack_ref& ref) {
  const std::shared_ptr<pack_file> f = home_->local_file(ref.pack);
  if (!f) return std::move(home_->fetch(std::span(&hash, 1), std::span(&ref, 1)).front());
  return read_checked_record(*reader_, *f, hash, ref, home_->location(ref.pack));
}

std::string pack_store::read_record(const chunk_hash& hash, const pack_ref& ref) {
  const std::shared_ptr<pack_file> f = home_->local_file(ref.pack);
  if (!f) {
    std::string record = std::move(home_->fetch(std::span(&hash, 1), std::span(&ref, 1)).front());
    record.erase(0, k_pack_record_header_size);
    return record;
  }
  home_->read_locally(ref.pack);
  std::string out;
  const int error = reader_->read_one(f->fd, ref.offset, ref.length, out);
  if (error == EIO)
    fail_read(hash, ref.pack,
              "the record at offset " + std::to_string(ref.offset) + " (" +
                  std::to_string(ref.length) +
                  " bytes) passes the end of the pack, or the disk failed");
  if (error != 0) fail_read(hash, ref.pack, errno_text(error));
  check_header(hash, ref,
               std::string_view(out).substr(
                   0, std::min<std::size_t>(out.size(), k_pack_record_header_size)));
  out.erase(0, k_pack_record_header_size);
  return out;
}

std::string pack_store::get(const chunk_hash& hash) {
  std::vector<std::string> v = get_many(std::span(&hash, 1));
  return std::move(v[0]);
}

std::vector<std::string> pack_store::get_many(std::span<const chunk_hash> hashes) {
  if (hashes.empty()) return {};
  std::shared_lock lock(index_lock_);
  const std::vector<std::optional<std::string>> values = payload_values(engine_, hashes, false);

  std::vector<std::string> out(hashes.size());
  // Two ranges per record, header and payload, so the payload lands in its
  // own string without a copy (a 4 MiB memmove per chunk otherwise).
  std::vector<read_range> ranges;
  std::vector<std::size_t> which;  // record k is the payload of hashes[which[k]]
  std::vector<pack_ref> refs;
  std::vector<std::shared_ptr<pack_file>> held;
  std::vector<std::size_t> fetched;  // scale-out: in no local pack
  std::vector<pack_ref> fetched_refs;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!values[i])
      throw store_error(EIO, "payload of chunk " + hashes[i].hex() + " is missing from the store");
    const payload_value v = decode_payload_value(hashes[i], *values[i]);
    if (v.inline_bytes) {
      out[i] = std::string(*v.inline_bytes);
      continue;
    }
    std::shared_ptr<pack_file> f = home_->local_file(v.ref.pack);
    if (!f) {
      fetched.push_back(i);
      fetched_refs.push_back(v.ref);
      continue;
    }
    home_->read_locally(v.ref.pack);
    ranges.push_back({f->fd, v.ref.offset, static_cast<std::uint32_t>(k_pack_record_header_size)});
    ranges.push_back({f->fd, v.ref.offset + k_pack_record_header_size,
                      static_cast<std::uint32_t>(v.ref.length - k_pack_record_header_size)});
    which.push_back(i);
    refs.push_back(v.ref);
    held.push_back(std::move(f));
  }
  std::vector<std::string> headers(refs.size());
  std::vector<int> errors(refs.size(), 0);
  reader_->read_all(ranges, [&](std::size_t r, std::string&& bytes, int error) {
    const std::size_t k = r / 2;
    if (error != 0 && errors[k] == 0) errors[k] = error;
    if (error != 0) return;
    if (r % 2 == 0) {
      headers[k] = std::move(bytes);
    } else {
      out[which[k]] = std::move(bytes);
    }
  });
  for (std::size_t k = 0; k < refs.size(); ++k) {
    const chunk_hash& hash = hashes[which[k]];
    if (errors[k] == EIO)
      fail_read(hash, refs[k].pack,
                "the record at offset " + std::to_string(refs[k].offset) + " (" +
                    std::to_string(refs[k].length) +
                    " bytes) passes the end of the pack, or the disk failed");
    if (errors[k] != 0) fail_read(hash, refs[k].pack, errno_text(errors[k]));
    check_header(hash, refs[k], headers[k]);
  }
  if (!fetched.empty()) {
    std::vector<chunk_hash> fetched_hashes;
    fetched_hashes.reserve(fetched.size());
    for (const std::size_t i : fetched) fetched_hashes.push_back(hashes[i]);
    std::vector<std::string> records = home_->fetch(fetched_hashes, fetched_refs);
    for (std::size_t k = 0; k < fetched.size(); ++k) {
      records[k].erase(0, k_pack_record_header_size);
      out[fetched[k]] = std::move(records[k]);
    }
  }
  return out;
}

std::vector<pack_store::pack_usage> pack_store::usage(const std::atomic<bool>* cancel) const {
  std::map<std::uint32_t, pack_usage> by_id;
  scan_options o;
  o.fill_cache = false;
  engine_.scan(table::payloads, {}, o, "scanning the pack index",
               [&](std::string_view k, std::string_view value) {
                 if (cancel && cancel->load(std::memory_order_relaxed))
                   throw store_error(ECANCELED,
                                     "scanning the pack index: canceled (the store is closing)");
                 if (k.size() != chunk_hash::k_size) return true;
                 payload_value v;
                 try {
                   v = decode_payload_value(chunk_hash::from_bytes(k), value);
                 } catch (const store_error&) {
                   return true;  // fsck reports it (the chunk's payload is unreadable)
                 }
                 if (v.inline_bytes) return true;
                 pack_usage& u = by_id[v.ref.pack];
                 u.id = v.ref.pack;
                 u.live_bytes += v.ref.length;
                 ++u.live_records;
                 return true;
               });
  for (const auto& [id, bytes] : pack_sizes()) {
    pack_usage& u = by_id[id];
    u.id = id;
    u.file_bytes = bytes;
  }
  std::vector<pack_usage> out;
  for (auto& [id, u] : by_id) out.push_back(u);
  return out;
}

std::vector<std::uint64_t> pack_store::file_sizes() const {
  std::vector<std::uint64_t> sizes;
  for (const auto& [id, bytes] : pack_sizes()) sizes.push_back(bytes);
  return sizes;
}

std::uint64_t pack_store::file_bytes() const {
  std::uint64_t bytes = 0;
  for (const std::uint64_t size : file_sizes()) bytes += size;
  return bytes;
}

pack_store::compaction pack_store::compact(double dead_share, std::shared_mutex& ahead_gate,
                                           std::mutex& commit_mutex,
                                           const std::atomic<bool>& cancel,
                                           const std::function<void(std::string_view)>& progress) {
  if (options_.read_only) throw store_error(EROFS, "pack store is read-only");
  compaction result;
  const std::chrono::seconds grace = delete_grace_ ? delete_grace_() : std::chrono::seconds(0);
  // Packs emptied earlier whose grace has passed go first; the others
  // wait (and are not planned again).
  std::set<std::uint32_t> waiting;
  {
    std::vector<std::uint32_t> due;
    {
      std::lock_guard lock(emptied_mutex_);
      const auto now = std::chrono::steady_clock::now();
      for (const auto& [id, when] : emptied_) {
        if (now - when >= grace)
          due.push_back(id);
        else
          waiting.insert(id);
      }
    }
    for (const std::uint32_t id : due) {
      home_->remove(id);
      std::lock_guard lock(emptied_mutex_);
      emptied_.erase(id);
      ++result.packs_deleted;
    }
  }
  // Plan under the commit mutex: a commit whose record went to a pack that
  // has been closed since has committed by then, so the scan sees its entry.
  // And with no payload written ahead of its commit outstanding: those that
  // come later go to the current pack or a newer one, never one planned here.
  std::map<std::uint32_t, std::vector<std::pair<chunk_hash, pack_ref>>> moves;
  {
    std::unique_lock ahead(ahead_gate);
    std::lock_guard commit(commit_mutex);
    // A pack whose gathered records have not moved yet looks dead.
    const std::set<std::uint32_t> gathering = packs_with_moves_pending();
    for (const pack_usage& u : usage(&cancel)) {
      if (u.file_bytes == 0 || waiting.contains(u.id) || gathering.contains(u.id)) continue;
      const double share = static_cast<double>(u.dead_bytes()) / static_cast<double>(u.file_bytes);
      if (u.live_records == 0 || share >= dead_share) moves[u.id];
    }
    if (moves.empty()) return result;
    {
      // The pack being appended to is closed if it is rewritten: no commit
      // is in flight (we hold the commit mutex), so nothing else lands in it.
      std::lock_guard lock(append_mutex_);
      if (current_ && moves.count(current_->id)) current_.reset();
    }
    engine_.scan(table::payloads, {}, {}, "scanning the pack index",
                 [&](std::string_view k, std::string_view value) {
                   if (k.size() != chunk_hash::k_size) return true;
                   const chunk_hash hash = chunk_hash::from_bytes(k);
                   payload_value v;
                   try {
                     v = decode_payload_value(hash, value);
                   } catch (const store_error&) {
                     return true;
                   }
                   if (v.inline_bytes) return true;
                   if (auto m = moves.find(v.ref.pack); m != moves.end())
                     m->second.emplace_back(hash, v.ref);
                   return true;
                 });
  }

  for (auto& [id, entries] : moves) {
    if (cancel) throw store_error(ECANCELED, "pack compaction canceled (the store is closing)");
    if (progress) progress("compacting pack " + pack_file_name(id));
    // 1. Copy the live records, verbatim (a record does not say where it is).
    struct moved {
      chunk_hash hash;
      pack_ref from, to;
    };
    std::vector<moved> copies;
    bool all_copied = true;
    for (const auto& [hash, ref] : entries) {
      if (cancel) throw store_error(ECANCELED, "pack compaction canceled (the store is closing)");
      // Header and payload checked before a copy spreads damage.
      std::string record;
      try {
        record = read_whole_record(hash, ref);
      } catch (const store_error& e) {
        // An object store that does not answer ends the compaction (the
        // probe throws); a damaged record is left where it is for fsck to
        // report, and its pack stays.
        home_->check_reachable(id);
        log_error(std::string("gc: keeping pack ") + pack_file_name(id) + ": " + e.what());
        all_copied = false;
        continue;
      }
      struct iovec iov[1] = {{record.data(), record.size()}};
      {
        std::lock_guard lock(append_mutex_);
        copies.push_back({hash, ref, append_locked(iov, 1, ref.length)});
      }
      result.bytes_moved += ref.length;
    }
    // 2. The copies durable before an index entry names them.
    sync();
    // 3. The entries moved in one synced commit; an entry a commit changed
    //    since the plan keeps its new value.
    //    Read and written in one locked transaction: another writer of a
    //    shared volume may change an entry meanwhile too.
    {
      std::lock_guard commit(commit_mutex);
      std::unique_lock readers(index_lock_);
      std::uint64_t moved_now = 0;
      try {
        engine_.write_locked(
            k_commit_section,
            [&](locked_reads& reads, metadata_batch& batch) {
              moved_now = 0;
              std::vector<std::string> keys;
              keys.reserve(copies.size());
              for (const moved& m : copies) keys.emplace_back(key_of(m.hash));
              const std::vector<std::optional<std::string>> values =
                  reads.get_many(table::payloads, keys, "the pack index entries being moved");
              for (std::size_t i = 0; i < copies.size(); ++i) {
                if (values[i] != encode_pack_ref(copies[i].from)) continue;
                batch.put(table::payloads, keys[i], encode_pack_ref(copies[i].to));
                ++moved_now;
              }
            },
            true);
      } catch (const store_error& e) {
        throw store_error(e.error_number(),
                          "gc: committing moved pack records: " + std::string(e.what()));
      }
      result.records_moved += moved_now;
    }
    // 4. Nothing names the old pack any more (readers that looked it up have
    //    finished: they hold index_lock_ shared).
    //    Other clients do not hold that lock: while one may be reading, the
    //    object outlives the grace first.
    if (all_copied && grace.count() > 0) {
      std::lock_guard lock(emptied_mutex_);
      emptied_.emplace(id, std::chrono::steady_clock::now());
      ++result.packs_deferred;
    } else if (all_copied) {
      home_->remove(id);
      ++result.packs_deleted;
    }
  }
  return result;
}

void pack_store::scan_packs(const std::function<void(const pack_record_info&)>& fn,
                            const std::function<void(const std::string&)>& bad) const {
  for (const auto& [pack, size] : pack_sizes()) {
    const std::uint32_t id = pack;  // a copy: clang 14 captures no structured binding
    const std::string label = home_->location(id);
    bool scanning = false;
    try {
      home_->read_whole(id, size, [&](std::string_view bytes) {
        scanning = true;
        scan_pack_bytes(id, label, bytes, fn, bad);
      });
    } catch (const store_error& e) {
      if (scanning) throw;  // from `fn` or `bad`, not from reading the pack
      bad(label + ": " + e.what());
    }
  }
}

}  // namespace densefs::store
