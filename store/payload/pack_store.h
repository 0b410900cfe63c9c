// payload_store over append-only pack files (docs/packs.md, byte layout in
// docs/format.md "Pack files", store/payload/pack_format.h). Payloads of
// k_min_pack_payload bytes and more are appended as self-describing records
// to pack files; smaller ones stay in the metadata engine. Either way its
// `payloads` table holds one versioned value per chunk: the inline bytes, or
// the index entry (pack id, offset, record length) of its pack record.
//
// Where the pack files live is its pack_home (pack_home.h): this machine's
// disk (local_pack_home, STORE/packs) or an object store (object_pack_home,
// a scale-out volume, docs/scale-out.md). pack_store asks the home for a
// new pack, an open local file or records it has no local file for, and
// never which home it is.
//
// Crash safety: put() writes the record (pwrite) before the caller commits
// the batch naming it, and sync() has the home make every pack appended to
// durable before the caller syncs the write-ahead log, so an index entry
// never names bytes a kill -9 (or, after sync, a power loss) could lose.
// Bytes written but never committed are dead space that compact() reclaims.
//
// Gathering (a scale-out volume's writer): an object per group commit would
// be a few hundred KB (an object store charges and waits per request), so
// the records of small commits are gathered in the pack being filled across
// many commits, and until it is uploaded their index entries carry the
// bytes themselves (an inline value, durable in the metadata engine with
// the commit). Between two syncs at most k_gather_window bytes are gathered
// (a commit of big files would send them all through the metadata engine
// otherwise). The pack is uploaded once it holds options::gather_bytes, or
// when a record that is not gathered (past the window, a compaction's copy)
// lands in it; then move_gathered() turns each entry that still holds what
// put() wrote into a pack ref, in one commit. A crash
// before that leaves inline entries, which are complete; the staged or
// uploaded pack is dead bytes (staging is emptied at open, gc deletes an
// object nothing names).
//
// Threading: put/remove/sync/get/get_many are safe from any thread. Readers
// hold a shared lock over index lookup and pack read; compact() takes it
// exclusively only while it commits the moved entries, so once it deletes
// the old pack no reader of this process can still be about to read it.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
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
#include "store/payload/pack_format.h"
#include "store/payload/pack_home.h"
#include "store/payload/payload_store.h"

namespace densefs::store {

class pack_store final : public payload_store {
 public:
  static constexpr std::uint64_t k_default_gather_bytes = 8u << 20;
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
    // With `remote`, a writer: records are gathered (above) until the pack
    // holds this many bytes; 0: every sync uploads what was appended.
    std::uint64_t gather_bytes = k_default_gather_bytes;
  };
  // Borrows the engine, which must outlive this object; its payloads table
  // is the index. The home: `store_dir`/packs (created when the first pack
  // is), or with `remote` an object_pack_home whose cache directory holds
  // staging/, packs/ and records/.
  pack_store(metadata_engine& engine, std::filesystem::path store_dir, options o);
  ~pack_store() override;

  void put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
           const payload_meta& meta) override;
  void remove(metadata_batch& batch, const chunk_hash& hash) override;
  std::string get(const chunk_hash& hash) override;
  std::vector<std::string> get_many(std::span<const chunk_hash> hashes) override;
  bool writes_at_put() const override { return true; }
  void sync() override;

  // Gathering (above): whether uploaded packs have records whose entries
  // may still be inline, due to be moved now.
  bool has_moves_ready() const;
  // Commits those moves: each entry still holding the inline bytes put()
  // wrote (its size and XXH3) becomes the ref of its record, in one commit
  // (write_locked, so another writer's change in between keeps its value).
  // Call with the store's commit mutex held, as compact() takes it. An
  // entry not there yet (its commit still to come, or its chunk gone) is
  // looked for again 1, 2, 4 ... 16 s later, then given up (the inline
  // entry stays). `every_record`: those not due yet too (at close).
  // Throws store_error; what did not move is tried again. Returns the
  // entries moved.
  std::uint64_t move_gathered(bool every_record = false);
  // Gathered records of uploaded packs waiting for a move.
  std::size_t moves_pending();
  // At close: the pack being gathered into is uploaded by the next sync(),
  // however small, so that its entries can move and no bytes stay in the
  // metadata engine for good.
  void seal_gathered();

  std::string_view reader_kind() const { return reader_->kind(); }
  // The object store of a scale-out volume, or null.
  const object_store* remote() const { return home_->objects(); }
  // The local cache's directory and bytes (scale-out volumes; else empty, 0).
  std::filesystem::path cache_dir() const { return home_->cache_dir(); }
  std::uint64_t cache_bytes() const { return home_->cache_bytes(); }
  pack_home::cache_reads cache_counts() const { return home_->cache_counts(); }
  // "/store/packs/00000001.pack", or "packs/00000001.pack in s3://b/p at ...".
  std::string pack_location(std::uint32_t id) const { return home_->location(id); }

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
  // file_bytes() when it is known without I/O (pack_home::known_bytes).
  std::optional<std::uint64_t> known_file_bytes() const { return home_->known_bytes(); }

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
  // (id, bytes) of every pack: the directory's files, or the remote objects.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> pack_sizes() const { return home_->sizes(); }
  // The whole record of `ref` (header and payload), its header and payload
  // checksum checked; from the local pack or from the home.
  std::string read_whole_record(const chunk_hash& hash, const pack_ref& ref);
  // Appends `iov` (one whole record) to the current pack, starting a new
  // pack first when there is none or it is full. `named`: an index entry
  // will name it, so sync() uploads its pack (gathering). append_mutex_ held.
  pack_ref append_locked(const struct iovec* iov, int count, std::uint32_t length,
                         bool named = true);
  // Whether a put() of a `length`-byte record gathers it. append_mutex_ held.
  bool gathers_locked(std::uint64_t length) const;
  // Packs whose gathered records are not all moved yet: compaction leaves
  // them (most of their bytes look dead until the move).
  std::set<std::uint32_t> packs_with_moves_pending();
  // Packs `ids` were uploaded: their gathered records may move now.
  void gathered_packs_uploaded(std::span<const std::uint32_t> ids);
  void roll_locked();  // append_mutex_ held
  // Starts the write-back of what was appended since the last call once
  // there is enough of it (RocksDB's bytes_per_sync). append_mutex_ held.
  void start_writeback_locked();
  [[noreturn]] void fail_read(const chunk_hash& hash, std::uint32_t pack,
                              const std::string& why) const;
  // Throws store_error(EIO) naming chunk and pack unless `header` is a
  // valid record header of `hash` with the length `ref` says.
  void check_header(const chunk_hash& hash, const pack_ref& ref, std::string_view header) const;

  metadata_engine& engine_;
  options options_;
  std::unique_ptr<batched_reader> reader_;
  std::unique_ptr<pack_home> home_;  // uses reader_

  mutable std::shared_mutex index_lock_;  // see the threading note above

  // Packs emptied while the grace was not 0, and when; compact() deletes
  // those past it first and plans around the rest. In memory only: after
  // a restart, the next compaction finds such an object named by nothing
  // and empties it again.
  std::function<std::chrono::seconds()> delete_grace_;
  std::mutex emptied_mutex_;
  std::map<std::uint32_t, std::chrono::steady_clock::time_point> emptied_;

  std::mutex append_mutex_;
  std::shared_ptr<pack_file> current_;  // the pack appended to, or null
  std::uint64_t current_size_ = 0;
  std::uint64_t writeback_from_ = 0;  // current_: write-back started below this
  static constexpr std::uint64_t k_writeback_step = 8u << 20;
  // Packs appended to (and whether one was created) since the last sync.
  packs_to_make_durable unsynced_;
  std::mutex sync_mutex_;  // one sync() at a time, so none returns early

  // Gathering (above).
  struct gathered_record {
    chunk_hash hash;
    pack_ref ref;
    std::uint64_t size = 0;  // of the stored bytes, and their stored_checksum
    std::uint64_t checksum = 0;
    unsigned tries = 0;            // moves that found no entry yet
    std::int64_t retry_at_ms = 0;  // steady clock: the next move not before
  };
  static constexpr std::uint64_t k_gather_window = 1u << 20;
  static constexpr unsigned k_move_tries = 6;
  static constexpr std::int64_t k_no_move = std::numeric_limits<std::int64_t>::max();
  const bool gathers_;
  // append_mutex_: records of packs not uploaded yet, and the packs an
  // index entry names (uploaded by the next sync).
  std::map<std::uint32_t, std::vector<gathered_record>> gathered_;
  std::set<std::uint32_t> named_;
  std::uint64_t gathered_since_sync_ = 0;
  // Records of uploaded packs whose entries may still be inline, and their
  // packs.
  std::mutex moves_mutex_;
  std::vector<gathered_record> moves_ready_;
  std::set<std::uint32_t> packs_moving_;
  // The earliest retry_at_ms of moves_ready_ (k_no_move: none).
  std::atomic<std::int64_t> next_move_ms_{k_no_move};
  // next_move_ms_ and packs_moving_ from moves_ready_. moves_mutex_ held.
  void set_next_move_locked();
};

}  // namespace densefs::store
