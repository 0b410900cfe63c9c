// Which chunks' payloads failed their check (issue 38, "Healing"): a read,
// fsck or scrub that finds a payload whose size or XXH3 is not its
// record's, or that does not decode to its chunk's content, marks the chunk
// here. The next commit that writes the same content (a re-copy of the
// file, a backup of it) then stores a fresh payload instead of adding a
// reference to the damaged one (store::commit), and every file using the
// chunk is whole again. Marks are rows of the metadata's meta table
// ("damaged/" + hash, docs/format.md), so they outlive the mount that found
// them; a store open read-only keeps them in memory only.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

#include "store/hash.h"
#include "store/metadata/metadata_engine.h"

namespace densefs::store {

class damaged_chunks {
 public:
  // Reads the marks the store holds. `persist`: whether marks found later
  // are written to `engine` (false for a read-only store).
  damaged_chunks(metadata_engine& engine, bool persist);

  // Marks `hash` (once: later calls for the same chunk do nothing). Never
  // throws: a mark that cannot be written is logged and kept in memory.
  void mark(const chunk_hash& hash, std::string_view why);
  bool contains(const chunk_hash& hash) const;
  // In a commit's batch: the chunk got a fresh payload, or is deleted.
  static void clear_in(metadata_batch& batch, const chunk_hash& hash);
  // After that batch was written.
  void forget(const chunk_hash& hash);
  std::vector<chunk_hash> list() const;

 private:
  metadata_engine& engine_;
  const bool persist_;
  mutable std::mutex mutex_;  // guards marked_ only; the row is written after
  std::set<chunk_hash> marked_;
  // marked_.size(), read without the lock: every commit asks contains() for
  // each chunk it references, and nearly always nothing is marked.
  std::atomic<std::size_t> count_{0};
};

}  // namespace densefs::store
