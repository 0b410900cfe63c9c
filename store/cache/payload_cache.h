// The local on-disk cache of a scale-out volume's pack payloads
// (docs/scale-out.md, "The local cache"): whole packs this client uploaded
// (cache/packs/NNNNNNNN.pack) and single pack records fetched from the
// object store (cache/records/NNNNNNNN/OFFSET). Packs and records are
// immutable once uploaded, so an entry never goes stale; it can only be
// damaged, which the reader finds (every record carries its header and the
// XXH3 of its payload) and then fetches the record again.
//
// Bounded: the files' bytes stay at most `capacity`; the least recently used
// entries go first. Survives remounts: the entries found at start are
// ordered by their modification time (a read does not change it, so the
// order across runs is the order of arrival).
//
// Threading: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::store {

inline constexpr std::uint64_t k_default_payload_cache_bytes = 10ull << 30;

class payload_cache {
 public:
  // Called (without the cache's lock) for a whole pack that was evicted, so
  // that its reader drops an open descriptor.
  using pack_evicted = std::function<void(std::uint32_t pack)>;

  // Lists `dir`/packs and `dir`/records (created if missing) and evicts down
  // to `capacity`. `read_only` (a tool looking at a mounted volume): reads
  // only; nothing is created, kept, dropped or evicted.
  payload_cache(std::filesystem::path dir, std::uint64_t capacity, pack_evicted on_evict,
                bool read_only = false);

  std::filesystem::path pack_path(std::uint32_t pack) const;

  // A record's bytes (header and payload) if cached; unchecked.
  std::optional<std::string> get_record(std::uint32_t pack, std::uint64_t offset);
  // Keeps a record that was checked. A failure to write is logged, not
  // thrown: the cache is an optimisation.
  void put_record(std::uint32_t pack, std::uint64_t offset, std::string_view record);
  // Drops a record that failed its check.
  void drop_record(std::uint32_t pack, std::uint64_t offset);

  // A pack file that was just moved to pack_path(pack), `size` bytes.
  void add_pack(std::uint32_t pack, std::uint64_t size);
  // Marks a cached pack as used (it was read).
  void touch_pack(std::uint32_t pack);
  // Deletes a pack and its records (the pack object was deleted).
  void forget_pack(std::uint32_t pack);

  std::uint64_t bytes() const;
  std::uint64_t capacity() const { return capacity_; }
  bool read_only() const { return read_only_; }

 private:
  struct entry {
    std::uint32_t pack = 0;
    std::uint64_t offset = 0;  // records; whole packs use k_whole_pack
    std::uint64_t size = 0;
  };
  static constexpr std::uint64_t k_whole_pack = ~0ull;
  using key = std::pair<std::uint32_t, std::uint64_t>;

  std::filesystem::path record_path(std::uint32_t pack, std::uint64_t offset) const;
  std::filesystem::path file_of(const entry& e) const;
  void insert_locked(const entry& e);
  void erase_locked(const key& k);
  // Evicts beyond capacity; returns the packs evicted (to report unlocked).
  std::vector<std::uint32_t> evict_locked();
  void report(const std::vector<std::uint32_t>& packs) const;

  std::filesystem::path dir_;
  std::uint64_t capacity_;
  pack_evicted on_evict_;
  bool read_only_;

  mutable std::mutex mutex_;
  std::list<entry> lru_;  // least recently used first
  std::map<key, std::list<entry>::iterator> index_;
  std::uint64_t bytes_ = 0;
};

}  // namespace densefs::store
