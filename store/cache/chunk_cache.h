// The decoded-chunk cache: plain chunk contents shared by all open files,
// bounded by bytes, least recently used out first.
//
// Concurrent misses for the same chunk are merged: the first caller loads
// (fetch + checksum + decode), the others wait for its result instead of
// decoding the same 4 MiB again. A failed load is not cached, so the next
// read tries again (and reports the error again).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "store/hash.h"

namespace densefs::store {

// Reads of chunks (chunk_cache::claim, get_or_load) since the cache was
// made: served from the cache, served by another reader's load under way,
// and loaded (fetched and decoded) by the reader itself.
struct chunk_cache_reads {
  std::uint64_t hits = 0;
  std::uint64_t merged = 0;
  std::uint64_t misses = 0;
};

class chunk_cache {
 public:
  using value = std::shared_ptr<const std::string>;
  using loader = std::function<value()>;

  explicit chunk_cache(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The cached value, or nullptr.
  value find(const chunk_hash& hash);
  // Returns the cached value or loads it once for all concurrent callers.
  // Exceptions from `load` reach every caller waiting for that load.
  value get_or_load(const chunk_hash& hash, const loader& load);
  void insert(const chunk_hash& hash, value v);

  // Batched loads (store::load_chunks): a load split in two steps, so that
  // one caller can fetch many chunks in one batch and decode them one by
  // one. claim() answers, for one chunk: it is cached (`cached`), someone
  // else is loading it (`pending`: wait on it, or not), or the caller now
  // loads it (`mine`) and must end with exactly one fulfil() or fail() for
  // it; until then every other reader of the chunk waits for that result,
  // so a chunk shared by many files is still decoded once.
  struct claim_result {
    value cached;
    std::shared_future<value> pending;
    bool mine = false;
  };
  claim_result claim(const chunk_hash& hash);
  // What a loader that gives up (a prefetch stopped early) fails its claims
  // with: get_or_load then loads the chunk itself instead of reporting it.
  struct load_abandoned : std::runtime_error {
    load_abandoned() : std::runtime_error("chunk load abandoned") {}
  };
  void fulfil(const chunk_hash& hash, value v);
  void fail(const chunk_hash& hash, std::exception_ptr error);
  void erase(const chunk_hash& hash);
  // Drops every cached value (loads in progress finish and are cached).
  void clear();

  std::size_t size_bytes() const;
  std::size_t entries() const;

  // Reads of a chunk so far (what -o metrics= serves).
  chunk_cache_reads reads() const;

 private:
  void insert_locked(const chunk_hash& hash, value v);

  using lru_list = std::list<std::pair<chunk_hash, value>>;

  // One mutex: it guards only map and list updates (no I/O or decoding
  // happens under it), so it is held for well under a microsecond per read.
  mutable std::mutex mutex_;
  const std::size_t capacity_;
  std::size_t used_ = 0;
  lru_list lru_;  // front = most recently used
  std::unordered_map<chunk_hash, lru_list::iterator, chunk_hash_hasher> index_;
  struct load {
    std::promise<value> promise;
    std::shared_future<value> result = promise.get_future().share();
  };
  std::unordered_map<chunk_hash, std::shared_ptr<load>, chunk_hash_hasher> loading_;
  // Counted under mutex_; atomic for reads() without it.
  std::atomic<std::uint64_t> hits_{0}, merged_{0}, misses_{0};
};

}  // namespace densefs::store
