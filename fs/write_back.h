// Write-behind with group commit. close(2) does not wait for a file's data
// to be encoded and committed: its slots go to the worker pool, and each
// encoded slot version waits here until the committer thread stores a whole
// group of them (many files) as one store transaction. A group is committed
// when it holds k_group_files files or k_group_bytes of file data, when
// its oldest version has waited `interval` (-o commit=SEC), or at once while
// someone waits for staged data (fsync, `densefs sync`, a rename of a file
// with staged data, a writer waiting for staging room, unmount).
// docs/design.md, "Write-behind".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "codec/classify.h"
#include "store/store.h"

namespace densefs::fs {

struct node;

// One chunk of a slot, as the policy's chunker cut it.
struct slot_chunk {
  std::uint32_t offset = 0;  // in the slot
  std::uint32_t length = 0;
  // Absent for an all-zero chunk: a hole, nothing stored.
  std::optional<store::prepared_chunk> prepared;
  bool queue_recompress = false;
};

// One version (generation) of one 4 MiB slot of a file, encoded and waiting
// for its commit. `data` stays in the slot's in_flight map until then, so
// reads see it.
struct encoded_slot {
  std::shared_ptr<node> n;
  std::uint64_t index = 0;
  std::uint64_t gen = 0;
  std::shared_ptr<const std::string> data;
  codec::file_type type = codec::file_type::unknown;
  bool small_file = false;  // ingested fast (-o ingest=auto)
  std::vector<slot_chunk> chunks;
  int error = 0;  // encoding failed: nothing to commit, the data stays staged
};

class write_back {
 public:
  // Commits a group; called on the committer thread only, so group commits
  // never run concurrently. Must not throw: each slot's outcome is its own.
  using commit_fn = std::function<void(std::vector<encoded_slot>& group)>;
  // Commits what the file system put off until its next commit (the rows
  // of new files that ended with nothing to commit); called on the
  // committer thread, `interval` after settle_soon() unless a commit took
  // it first. Must not throw.
  using settle_fn = std::function<void()>;

  // A group closes at k_group_files files or k_group_bytes of file data,
  // or once its oldest version has waited `interval`; it never holds more
  // than k_group_slots versions (small rewrites of one file). 16 MiB: a
  // group commit holds the metadata lock while it commits (its payloads
  // are written before, but what that misses, it writes under the lock),
  // and every lookup and getattr of the mount waits meanwhile.
  // 48 files: a group commit holds each of its files' data_mutex (so that
  // it is one step for each of them), and ThreadSanitizer's deadlock
  // detector tracks at most 64 mutexes held by one thread.
  static constexpr std::size_t k_group_slots = 1024;
  static constexpr std::size_t k_group_bytes = 16u << 20;
  static constexpr std::size_t k_group_files = 48;

  write_back(std::chrono::milliseconds interval, commit_fn commit, settle_fn settle = {});
  // Commits everything queued, then stops the committer.
  ~write_back();
  write_back(const write_back&) = delete;
  write_back& operator=(const write_back&) = delete;

  // From a worker, once a slot version is encoded.
  void add(encoded_slot slot);

  // Something waits for a commit: `settle` runs once `interval` has passed
  // (from the first call since the last settle), whether or not any file
  // data comes. Not at all once stopping: unmount settles everything.
  void settle_soon();

  // Someone waits for `file`'s data (a rename of it, fsync): if a version
  // of it is queued, commits the group at the front of the queue on the
  // calling thread, rather than waking the committer and waiting to be
  // woken (two thread hand-offs, most of a rename's wait in rsync).
  // Groups still commit one at a time and in queue order, whoever runs
  // them. Returns whether it committed one. The caller must hold no lock a
  // group commit takes (files' data_mutex, the metadata lock).
  bool commit_queued(const node* file);

  // While an `urgent` object lives, queued versions are committed as soon
  // as they arrive: someone is waiting for them.
  class urgent {
   public:
    explicit urgent(write_back* wb);
    ~urgent();
    urgent(const urgent&) = delete;
    urgent& operator=(const urgent&) = delete;

   private:
    write_back* wb_;
  };

 private:
  void run();
  // Takes the next group off the queue. Caller holds commit_mutex_ and
  // mutex_.
  std::vector<encoded_slot> take_group();
  // Takes and commits the next group. Caller holds commit_mutex_, not
  // mutex_.
  void commit_next_group();
  // Enough is queued, or someone waits: commit without waiting for the
  // interval. Caller holds mutex_.
  bool group_ready() const {
    return urgent_ > 0 || queue_.size() >= k_group_files || queued_bytes_ >= k_group_bytes;
  }

  const std::chrono::milliseconds interval_;
  const commit_fn commit_;
  const settle_fn settle_;
  // Held while a group is taken off the queue and committed: by the
  // committer, or by a waiter in commit_queued. Taken before mutex_.
  std::mutex commit_mutex_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<encoded_slot> queue_;
  std::size_t queued_bytes_ = 0;
  std::chrono::steady_clock::time_point oldest_{};  // when queue_.front() arrived
  int urgent_ = 0;
  bool stopping_ = false;
  // settle_soon() was called; settle_ runs at settle_due_.
  bool settle_pending_ = false;
  std::chrono::steady_clock::time_point settle_due_{};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace densefs::fs
