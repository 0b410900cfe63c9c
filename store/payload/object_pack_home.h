// pack_home in an object store, for a scale-out volume (docs/scale-out.md):
// pack N is the object "packs/N.pack" of any object_store (s3_object_store;
// directory_object_store in tests and on a shared disk).
//
// A pack is appended in the local staging directory (CACHE/staging), and
// make_durable() uploads it whole and seals it, so an index entry (committed
// after that) only ever names an uploaded pack; the uploaded file then
// becomes an entry of the payload cache. Pack numbers come from a counter in
// the metadata engine, which writers beside each other share.
//
// Reads of a pack with no local copy: the record from the payload cache
// (store/cache/payload_cache.h), else with a ranged GET, checked against
// its header and XXH3 before it is used or cached. Records that follow each
// other in a pack come with one GET, several GETs at once; a pack read from
// a second time comes whole. After a GET failed its retries, reads fail at
// once for a few seconds with that failure's message.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "store/cache/payload_cache.h"
#include "store/metadata/metadata_engine.h"
#include "store/payload/batched_reader.h"
#include "store/payload/pack_home.h"

namespace densefs::store {

class object_pack_home final : public pack_home {
 public:
  struct options {
    std::shared_ptr<object_store> objects;
    // The local cache and staging directory, and the cache's bound.
    std::filesystem::path cache_dir;
    std::uint64_t cache_bytes = k_default_payload_cache_bytes;
    // A read-only open keeps the staging directory (the volume may be
    // mounted) and only reads the cache, unless `fill_cache` (a follower
    // mount, which owns its client directory).
    bool read_only = false;
    bool fill_cache = false;
    // The packs' size cap: what read_whole() accepts for one pack.
    std::uint64_t pack_size_cap = k_default_pack_size_cap;
  };
  // Borrows `engine` (the pack counter) and `reader` (local files), which
  // must outlive this object.
  object_pack_home(metadata_engine& engine, batched_reader& reader, options o);

  std::string location(std::uint32_t id) const override;
  std::shared_ptr<pack_file> create() override;
  void make_durable(packs_to_make_durable& p) override;
  bool seals_when_durable() const override { return true; }
  std::shared_ptr<pack_file> local_file(std::uint32_t id) override { return files_.get(id); }
  void read_locally(std::uint32_t id) override {
    cache_->touch_pack(id);
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
  }
  std::vector<std::string> fetch(std::span<const chunk_hash> hashes,
                                 std::span<const pack_ref> refs) override;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> sizes() const override;
  std::optional<std::uint64_t> known_bytes() const override;
  void read_whole(std::uint32_t id, std::uint64_t size,
                  const std::function<void(std::string_view)>& use) override;
  void remove(std::uint32_t id) override;
  void check_reachable(std::uint32_t id) override;

  const object_store* objects() const override { return objects_.get(); }
  std::filesystem::path cache_dir() const override { return options_.cache_dir; }
  std::uint64_t cache_bytes() const override { return cache_->bytes(); }
  cache_reads cache_counts() const override {
    return {cache_hits_.load(std::memory_order_relaxed),
            cache_misses_.load(std::memory_order_relaxed)};
  }

 private:
  std::uint32_t allocate_pack_id();
  // Uploads sealed pack `f` and moves its file into the cache.
  void upload(const pack_file& f);
  // The cached record, checked (a damaged one is dropped).
  std::optional<std::string> cached_record(const chunk_hash& hash, const pack_ref& ref);
  // Records of one pack that follow each other (refs in offset order, each
  // ending where the next starts), with one ranged GET; each checked and
  // cached.
  std::vector<std::string> fetch_run(std::span<const chunk_hash> hashes,
                                     std::span<const pack_ref> refs);
  // A pack read from a second time since this home was made is fetched
  // whole (one GET) into the cache, when it is at most k_whole_pack_bytes
  // and the cache holds four such: a tree written together is read together
  // (cp, tar, rsync, a restore), and one GET of a pack replaces one per file
  // (measured: docs/scale-out.md). True when the pack is now a local file.
  bool fetch_whole_pack(std::uint32_t id);
  [[noreturn]] void fail_read(const chunk_hash& hash, std::uint32_t pack,
                              const std::string& why) const;

  static constexpr std::uint64_t k_whole_pack_bytes = 24u << 20;
  // Records fetched from the object store at once by one read.
  static constexpr std::size_t k_parallel_fetches = 8;
  // Adjacent records are fetched together up to this many bytes.
  static constexpr std::uint64_t k_max_fetch_bytes = 8u << 20;
  // After a GET failed its retries, fetches fail at once for this long
  // (steady clock ms), with the failure's message.
  static constexpr std::int64_t k_down_ms = 5000;

  metadata_engine& engine_;
  batched_reader& reader_;
  const options options_;
  const std::shared_ptr<object_store> objects_;
  const std::filesystem::path staging_dir_;  // packs not yet uploaded
  std::unique_ptr<payload_cache> cache_;
  std::atomic<std::uint64_t> cache_hits_{0}, cache_misses_{0};  // cache_counts()
  open_pack_files files_;  // staged packs, and packs whole in the cache

  // The pack objects' sizes, listed at the first need (without the mutex:
  // uploads and removes must not wait for a listing), and this client's
  // uploads (a size) and removes (nullopt) until then, which the listing
  // may or may not have seen: applied over it.
  mutable std::mutex sizes_mutex_;
  mutable std::optional<std::map<std::uint32_t, std::uint64_t>> sizes_;
  mutable std::map<std::uint32_t, std::optional<std::uint64_t>> changed_before_listing_;

  std::mutex whole_pack_fetch_mutex_;  // one download at a time
  std::mutex reads_mutex_;
  std::map<std::uint32_t, unsigned> reads_;  // reads that missed, by pack

  std::atomic<std::int64_t> down_until_{0};
  std::mutex down_mutex_;
  std::string down_why_;
};

}  // namespace densefs::store
