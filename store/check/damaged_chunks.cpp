#include "store/check/damaged_chunks.h"

#include <chrono>
#include <string>

#include "store/log.h"
#include "store/records.h"

namespace densefs::store {

damaged_chunks::damaged_chunks(metadata_engine& engine, bool persist)
    : engine_(engine), persist_(persist) {
  scan_options o;
  o.start = k_damaged_prefix;
  o.fill_cache = false;
  engine_.scan(table::meta, prefix_range(k_damaged_prefix), o, "listing damaged chunks",
               [&](std::string_view key, std::string_view) {
                 // A key of another length is not ours to judge: skipped.
                 if (key.size() == k_damaged_prefix.size() + chunk_hash::k_size)
                   marked_.insert(chunk_hash::from_bytes(key.substr(k_damaged_prefix.size())));
                 return true;
               });
  count_ = marked_.size();
}

void damaged_chunks::mark(const chunk_hash& hash, std::string_view why) {
  {
    std::lock_guard lock(mutex_);
    if (!marked_.insert(hash).second) return;
    count_ = marked_.size();
  }
  log_error("chunk " + hash.hex() + " is damaged (" + std::string(why) +
            "); the next write of its content stores it afresh");
  if (!persist_) return;
  try {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const std::unique_ptr<metadata_batch> batch = engine_.new_batch();
    batch->put(table::meta, damaged_key(hash), encode_damaged(static_cast<std::uint64_t>(now)));
    engine_.write(*batch, false);
  } catch (const std::exception& e) {
    log_error("chunk " + hash.hex() + ": cannot record it as damaged (" + e.what() +
              "); remembered until the store is closed");
  }
}

bool damaged_chunks::contains(const chunk_hash& hash) const {
  if (count_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard lock(mutex_);
  return marked_.contains(hash);
}

void damaged_chunks::clear_in(metadata_batch& batch, const chunk_hash& hash) {
  batch.erase(table::meta, damaged_key(hash));
}

void damaged_chunks::forget(const chunk_hash& hash) {
  std::lock_guard lock(mutex_);
  marked_.erase(hash);
  count_ = marked_.size();
}

std::vector<chunk_hash> damaged_chunks::list() const {
  std::lock_guard lock(mutex_);
  return {marked_.begin(), marked_.end()};
}

}  // namespace densefs::store
