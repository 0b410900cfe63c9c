// payload_store over append-only pack files (docs/packs.md, byte layout in
// docs/format.md "Pack files"). Payloads of k_min_pack_payload bytes and more
// are appended as self-describing records to STORE/packs/NNNNNNNN.pack;
// smaller ones stay in the metadata engine. Either way its `payloads` table holds
// one versioned value per chunk: the inline bytes, or the index entry (pack
// id, offset, record length) of its pack record.
//
// Crash safety: put() writes the record (pwrite) before the caller commits
// the batch naming it, and sync() fdatasyncs every pack appended to before
// the caller syncs the write-ahead log, so an index entry never names bytes
// a kill -9 (or, after sync, a power loss) could lose. Bytes written but never
// committed are dead space that compact() reclaims.
//
// Scale-out volumes (options::remote, docs/scale-out.md): the packs are
// objects in an object store. A pack is written to the local staging
// directory as above, and sync() seals it and uploads it whole; so an index
// entry (committed after sync) only ever names an uploaded pack. Pack numbers
// come from the metadata engine. Reads take a record from the pack if this
// client still has it, else from the payload cache (store/cache/payload_cache.h),
// else with a ranged GET, checked against its header and XXH3 before it is
// used or cached.
//
// Threading: put/remove/sync/get/get_many are safe from any thread. Readers
// hold a shared lock over index lookup and pack read; compact() takes it
// exclusively only while it commits the moved entries and forgets the old
// pack, so a reader never reads a deleted pack.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "store/cache/payload_cache.h"
#include "store/object/object_store.h"
#include "store/payload/batched_reader.h"
#include "store/payload/payload_store.h"

namespace densefs::store {

// Payloads at least this big go to packs (the blob design's threshold: below
// it a RocksDB value is cheaper than a pack record's 64-byte header and a
// separate read).
inline constexpr std::uint64_t k_min_pack_payload = 4096;
// A pack is closed once it reaches this size (the next record starts a new
// one), so compaction rewrites at most about this much at a time.
inline constexpr std::uint64_t k_default_pack_size_cap = 64u << 20;
inline constexpr std::uint64_t k_pack_header_size = 32;
inline constexpr std::uint64_t k_pack_record_header_size = 64;
// Upper bound for a stored payload (a 4 MiB chunk's encoding, with room for
// codecs that expand): lengths read from untrusted bytes are checked
// against it before anything is allocated.
inline constexpr std::uint64_t k_max_pack_payload = (8u << 20) + (1u << 20);
// A lepton_file payload holds a whole JPEG of up to 64 MiB
// (codec::k_lepton_file_max_bytes), Lepton-encoded, so it saves at least
// min_savings: records of that codec may be this large.
inline constexpr std::uint64_t k_max_lepton_file_pack_payload = (64u << 20) + (1u << 20);
inline constexpr std::uint64_t max_pack_payload(codec::codec_id codec) {
  return codec == codec::codec_id::lepton_file ? k_max_lepton_file_pack_payload
                                               : k_max_pack_payload;
}

// Where a pack record is: pack id, offset of the record header, and the
// record's whole length (header + payload).
struct pack_ref {
  std::uint32_t pack = 0;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
  bool operator==(const pack_ref&) const = default;
};

// A record found by scanning a pack file.
struct pack_record_info {
  chunk_hash hash;
  codec::codec_id codec = codec::codec_id::raw;
  std::uint32_t plain_size = 0;
  std::uint32_t stored_size = 0;
  std::uint64_t checksum = 0;  // XXH3 of the payload, from the header
  bool payload_ok = false;     // the payload's XXH3 matches the header's
  pack_ref where;
};

// Values of the payloads column family in a pack store.
std::string encode_inline_payload(std::string_view stored);
std::string encode_pack_ref(const pack_ref& ref);
struct payload_value {
  std::optional<std::string_view> inline_bytes;  // set for inline payloads
  pack_ref ref;                                  // otherwise
};
// Throws store_error(EIO) naming the chunk for a value that does not decode.
payload_value decode_payload_value(const chunk_hash& hash, std::string_view value);

std::string pack_file_name(std::uint32_t id);  // "00000001.pack"

class pack_store final : public payload_store {
 public:
  struct options {
    std::uint64_t pack_size_cap = k_default_pack_size_cap;
    io_mode io = io_mode::automatic;
    bool read_only = false;
    // Set for a scale-out volume: where the packs are ("packs/NNNNNNNN.pack").
    std::shared_ptr<object_store> remote;
    // With `remote`: the local cache and staging directory (default
    // `store_dir`/cache) and the cache's bound.
    std::filesystem::path cache_dir;
    std::uint64_t cache_bytes = k_default_payload_cache_bytes;
    // With read_only: the cache still fills (a follower mount, which owns
    // its client directory), instead of being only read (a tool looking at
    // a mounted volume, whose daemon owns the cache).
    bool fill_cache = false;
  };
  // Borrows the engine, which must outlive this object; its payloads table
  // is the index. `store_dir`/packs holds the pack files (created when the
  // first pack is); with `remote`, the cache directory holds staging/,
  // packs/ and records/.
  pack_store(metadata_engine& engine, std::filesystem::path store_dir, options o);
  ~pack_store() override;

  void put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
           const payload_meta& meta) override;
  void remove(metadata_batch& batch, const chunk_hash& hash) override;
  std::string get(const chunk_hash& hash) override;
  std::vector<std::string> get_many(std::span<const chunk_hash> hashes) override;
  bool writes_at_put() const override { return true; }
  void sync() override;

  std::string_view reader_kind() const { return reader_->kind(); }
  const std::filesystem::path& pack_dir() const { return pack_dir_; }
  // The object store of a scale-out volume, or null.
  const object_store* remote() const { return remote_.get(); }
  // The local cache's directory and bytes (scale-out volumes; else empty, 0).
  std::filesystem::path cache_dir() const { return cache_dir_; }
  std::uint64_t cache_bytes() const { return cache_ ? cache_->bytes() : 0; }
  // "/store/packs/00000001.pack", or "packs/00000001.pack in s3://b/p at ...".
  std::string pack_location(std::uint32_t id) const;

  // Space per pack: file size and the bytes of records the index names.
  struct pack_usage {
    std::uint32_t id = 0;
    std::uint64_t file_bytes = 0;
    std::uint64_t live_bytes = 0;  // whole records (header + payload)
    std::uint64_t live_records = 0;
    std::uint64_t dead_bytes() const {
      const std::uint64_t used = live_bytes + k_pack_header_size;
      return file_bytes > used ? file_bytes - used : 0;
    }
  };
  // A walk of the index and a listing of the pack directory. Throws
  // store_error(ECANCELED) once `cancel` (when given) is set.
  std::vector<pack_usage> usage(const std::atomic<bool>* cancel = nullptr) const;
  // Sizes of the pack files, by pack id (a directory listing only; the
  // objects' sizes, listed once and then kept, on a scale-out volume).
  std::vector<std::uint64_t> file_sizes() const;
  // Their sum.
  std::uint64_t file_bytes() const;

  // Rewrites every closed pack whose dead share is at least `dead_share`
  // (0..1): its live records are copied to the current pack, the pack files
  // are synced, the index entries are moved in one synced commit (under
  // `commit_mutex`, so no commit changes them in between; an entry that
  // changed since it was copied keeps its new value and the copy is dead),
  // and then the old pack file is deleted. A crash at any step leaves every
  // index entry naming a complete record. Returns the packs deleted.
  // Scale-out: how long an emptied pack object must outlive its last index
  // entry before compaction deletes it (0: at once). Other clients look a
  // record up in the index and fetch it after: the grace covers that (a
  // follower's read, its retries), so the writer's gc never deletes what
  // a live follower is about to read. Asked at each compaction.
  void set_delete_grace(std::function<std::chrono::seconds()> grace) {
    delete_grace_ = std::move(grace);
  }
  struct compaction {
    std::uint64_t packs_deleted = 0;
    std::uint64_t packs_deferred = 0;  // emptied, deleted by a later compaction
    std::uint64_t records_moved = 0;
    std::uint64_t bytes_moved = 0;
  };
  // `ahead_gate`, taken exclusively while it plans (before `commit_mutex`):
  // held shared by the payloads written ahead of their commit (store::
  // payloads_ahead), whose pack would look dead until then.
  compaction compact(double dead_share, std::shared_mutex& ahead_gate, std::mutex& commit_mutex,
                     const std::atomic<bool>& cancel,
                     const std::function<void(std::string_view)>& progress = {});

  // Every record of every pack file in (pack, offset) order; bytes that do
  // not parse as a record are skipped (the scan resumes at the next record
  // magic) and reported through `bad` with the pack and offset. For fsck and
  // index rebuilds; the pack files are mapped, not read into memory.
  void scan_packs(const std::function<void(const pack_record_info&)>& fn,
                  const std::function<void(const std::string&)>& bad) const;

  // The records' bytes of `ref` checked against their header (magic,
  // version, header checksum, hash, lengths); throws store_error(EIO) naming
  // the chunk and pack otherwise. Returns the payload.
  std::string read_record(const chunk_hash& hash, const pack_ref& ref);

 private:
  struct pack_file;
  std::shared_ptr<pack_file> file(std::uint32_t id);
  // (id, bytes) of every pack: the directory's files, or the remote objects.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> pack_sizes() const;
  // Exactly `length` bytes at `offset` of `fd` through the batched reader;
  // an errno (EIO: short) or 0.
  int read_bytes(int fd, std::uint64_t offset, std::uint32_t length, std::string& out) const;
  // The whole record of `ref` (header and payload), its header and payload
  // checksum checked; from the local pack, the cache or the object store.
  std::string read_whole_record(const chunk_hash& hash, const pack_ref& ref);
  // Scale-out: the record from the cache or a ranged GET, checked, cached.
  std::string fetch_remote_record(const chunk_hash& hash, const pack_ref& ref);
  // Scale-out: the cached record, checked (a damaged one is dropped).
  std::optional<std::string> cached_record(const chunk_hash& hash, const pack_ref& ref);
  // Scale-out: records of one pack that follow each other (refs in offset
  // order, each ending where the next starts), with one ranged GET; each
  // checked and cached.
  std::vector<std::string> fetch_run(std::span<const chunk_hash> hashes,
                                     std::span<const pack_ref> refs);
  std::uint32_t allocate_remote_pack_id();
  // Scale-out: uploads sealed pack `f` and moves its file into the cache.
  void upload(const pack_file& f);
  // Deletes pack `id` (compaction): the file, or the object and its cache.
  void delete_pack(std::uint32_t id);
  // Packs emptied while the grace was not 0, and when; compact() deletes
  // those past it first and plans around the rest. In memory only: after
  // a restart, the next compaction finds such an object named by nothing
  // and empties it again. Under files_mutex_.
  std::function<std::chrono::seconds()> delete_grace_;
  std::map<std::uint32_t, std::chrono::steady_clock::time_point> emptied_;
  void roll_locked();  // append_mutex_ held
  void fail_read(const chunk_hash& hash, std::uint32_t pack, const std::string& why) const;
  // Throws store_error(EIO) naming chunk and pack unless `header` is a
  // valid record header of `hash` with the length `ref` says.
  void check_header(const chunk_hash& hash, const pack_ref& ref, std::string_view header) const;

  metadata_engine& engine_;
  std::shared_ptr<object_store> remote_;
  std::filesystem::path cache_dir_;    // scale-out only
  std::filesystem::path staging_dir_;  // scale-out only: packs not yet uploaded
  std::unique_ptr<payload_cache> cache_;
  mutable std::mutex remote_sizes_mutex_;
  // Scale-out: the pack objects' sizes, listed at the first need.
  mutable std::optional<std::map<std::uint32_t, std::uint64_t>> remote_sizes_;
  std::filesystem::path pack_dir_;
  options options_;
  std::unique_ptr<batched_reader> reader_;

  mutable std::shared_mutex index_lock_;  // see the threading note above

  std::mutex files_mutex_;
  std::map<std::uint32_t, std::shared_ptr<pack_file>> files_;

  std::mutex append_mutex_;
  std::shared_ptr<pack_file> current_;  // the pack appended to, or null
  std::uint64_t current_size_ = 0;
  std::uint64_t writeback_from_ = 0;  // current_: write-back started below this
  static constexpr std::uint64_t k_writeback_step = 8u << 20;
  // Scale-out: a pack read from a second time since this store opened is
  // fetched whole (one GET) into the cache, when it is at most
  // k_whole_pack_bytes and the cache holds four such: a tree written
  // together is read together (cp, tar, rsync, a restore), and one GET of
  // a pack replaces one per file (measured: docs/scale-out.md). True when
  // the pack is now a local file.
  bool fetch_whole_pack(std::uint32_t id);
  static constexpr std::uint64_t k_whole_pack_bytes = 24u << 20;
  std::mutex whole_pack_fetch_mutex_;  // one download at a time
  std::mutex remote_reads_mutex_;
  std::map<std::uint32_t, unsigned> remote_reads_;  // reads that missed, by pack
  // The whole record of `ref` from local pack file `f`, checked.
  std::string read_local_record(const pack_file& f, const chunk_hash& hash, const pack_ref& ref);
  // Scale-out: records fetched from the object store at once by one read.
  static constexpr std::size_t k_parallel_fetches = 8;
  // Scale-out: adjacent records are fetched together up to this many bytes.
  static constexpr std::uint64_t k_max_fetch_bytes = 8u << 20;
  // Scale-out: after a GET failed its retries, fetches fail at once for
  // this long (steady clock ms), with the failure's message.
  static constexpr std::int64_t k_remote_down_ms = 5000;
  std::atomic<std::int64_t> remote_down_until_{0};
  std::mutex remote_down_mutex_;
  std::string remote_down_why_;
  void start_writeback_locked();  // append_mutex_ held
  std::uint32_t next_id_ = 1;
  // Packs appended to (and the directory, for new packs) since the last sync.
  std::vector<std::shared_ptr<pack_file>> unsynced_;
  bool dir_unsynced_ = false;
  std::mutex sync_mutex_;  // one sync() at a time, so none returns early
};

}  // namespace densefs::store
