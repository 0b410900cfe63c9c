// Automatic garbage collection in a mounted daemon (docs/gc.md): a thread at
// idle CPU priority that watches how many payload bytes commits have
// deleted or replaced (store::garbage_since_collect) and, once that garbage
// is worth rewriting the payload files for and deleting has paused, runs
// store::collect_garbage. `densefs gc` on a live mount runs through collect()
// here, so the two never overlap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>

#include "store/store.h"

namespace densefs::fs {

class garbage_collector {
 public:
  // Collecting rewrites every live payload, so garbage must be at least
  // this, and at least 1 / k_max_write_amplification of the payload files
  // (copying 4 bytes per byte given back at most; the re-encoder's rule
  // before this class existed). A fixed amount alone (say 64 MiB) would copy
  // all of a 1 TB store's payloads to give back 64 MiB.
  static constexpr std::uint64_t k_min_garbage = 8u << 20;
  static constexpr std::uint64_t k_max_write_amplification = 4;
  // True when `garbage` bytes in payload files of `payload_file_bytes`
  // justify a collection.
  static bool worth_collecting(std::uint64_t garbage, std::uint64_t payload_file_bytes);

  struct timing {
    // How often the garbage counter is looked at. A collection starts at
    // the first look that finds it worth it and unchanged since the look
    // before (an `rm -rf` has finished), or after `max_wait` of growth.
    std::chrono::milliseconds poll{std::chrono::seconds(5)};
    std::chrono::milliseconds max_wait{std::chrono::seconds(60)};
  };

  // Starts the thread. `s` must outlive this object.
  explicit garbage_collector(store::store& s) : garbage_collector(s, timing{}) {}
  garbage_collector(store::store& s, timing t);
  // Cancels a collection in progress (store::cancel_garbage_collection) and
  // joins the thread.
  ~garbage_collector();
  garbage_collector(const garbage_collector&) = delete;
  garbage_collector& operator=(const garbage_collector&) = delete;

  // A collection now, on the caller's thread (the control socket's "gc",
  // store::gc_depth::requested); waits for a background one in progress.
  // Throws store_error.
  store::gc_result collect(const std::function<void(std::string_view phase)>& progress = {},
                           store::store::gc_depth depth = store::store::gc_depth::requested);

 private:
  void run();
  // Garbage known to the collector: what commits counted since the last
  // collection, plus what was estimated at mount (from earlier mounts).
  std::uint64_t garbage() const;

  store::store& store_;
  timing timing_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> carried_{0};  // estimated at start; 0 after a collection
  std::thread thread_;
};

}  // namespace densefs::fs
