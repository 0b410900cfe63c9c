#include "fs/garbage_collector.h"

#include <cerrno>
#include <string>

#include "fs/recompressor.h"
#include "store/log.h"

namespace densefs::fs {

bool garbage_collector::worth_collecting(std::uint64_t garbage, std::uint64_t payload_file_bytes) {
  return garbage >= k_min_garbage && garbage * k_max_write_amplification >= payload_file_bytes;
}

garbage_collector::garbage_collector(store::store& s, timing t) : store_(s), timing_(t) {
  thread_ = std::thread([this] { run(); });
}

garbage_collector::~garbage_collector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  store_.cancel_garbage_collection();
  cv_.notify_all();
  thread_.join();
}

std::uint64_t garbage_collector::garbage() const {
  return store_.garbage_since_collect() + carried_.load();
}

store::gc_result garbage_collector::collect(
    const std::function<void(std::string_view phase)>& progress, store::store::gc_depth depth) {
  store::gc_result r = store_.collect_garbage(progress, depth);
  // A partial collection (no room to copy live payloads) leaves the
  // garbage counted, so it is tried again later.
  if (r.rewrote_payloads) carried_ = 0;
  return r;
}

void garbage_collector::run() {
  lower_own_priority();
  std::unique_lock lock(mutex_);
  bool seeded = false;
  std::uint64_t last_seen = 0;
  bool growing = false;
  auto growing_since = std::chrono::steady_clock::now();
  auto not_before = growing_since;  // after a failure: no retry until then
  while (!stopping_) {
    cv_.wait_for(lock, timing_.poll, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    try {
      if (!seeded) {
        // Garbage left by earlier mounts (the counter starts at 0 with
        // each open): estimated once, from the chunk records and the file
        // sizes, at idle priority.
        // Blob files only: a write-ahead log full of live payloads goes
        // with the next flush anyway, without rewriting anything.
        const store::gc_report r = store_.garbage();
        carried_ = r.payload_file_bytes > r.live_blob_payload_bytes
                       ? r.payload_file_bytes - r.live_blob_payload_bytes
                       : 0;
        seeded = true;
      }
      const std::uint64_t g = garbage();
      if (g == last_seen) {
        growing = false;
      } else if (!growing) {
        growing = true;
        growing_since = now;
      }
      last_seen = g;
      const bool settled = !growing || now - growing_since >= timing_.max_wait;
      if (settled && now >= not_before && worth_collecting(g, store_.payload_file_bytes())) {
        const store::gc_result r = collect({}, store::store::gc_depth::automatic);
        last_seen = garbage();
        growing = false;
        // Short of space: wait before the next try, as after a failure.
        if (!r.rewrote_payloads) not_before = now + timing_.max_wait;
        log_info("gc: " + std::to_string(g) + " bytes of deleted or replaced payloads: store " +
                 std::to_string(r.before.disk_bytes) + " -> " + std::to_string(r.after.disk_bytes) +
                 " bytes on disk in " + std::to_string(static_cast<int>(r.seconds * 1000)) + " ms");
      }
    } catch (const store::store_error& e) {
      // EBUSY: another writer of the volume holds gc's lease (it collects).
      if (e.error_number() != ECANCELED && e.error_number() != EBUSY)
        log_error(std::string("gc: ") + e.what());
      not_before = now + timing_.max_wait;
    } catch (const std::exception& e) {
      log_error(std::string("gc: ") + e.what());
      not_before = now + timing_.max_wait;
    }
    lock.lock();
  }
}

}  // namespace densefs::fs
