#include "fs/write_back.h"

#include <algorithm>
#include <utility>

namespace densefs::fs {

write_back::write_back(std::chrono::milliseconds interval, commit_fn commit, settle_fn settle)
    : interval_(interval),
      commit_(std::move(commit)),
      settle_(std::move(settle)),
      thread_([this] { run(); }) {}

write_back::~write_back() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void write_back::add(encoded_slot slot) {
  // Notified under the lock: a worker that just added the last version a
  // flush waits for must be done with cv_ before that flush can return and
  // unmount destroy this object.
  std::lock_guard lock(mutex_);
  if (queue_.empty()) oldest_ = std::chrono::steady_clock::now();
  queued_bytes_ += slot.data ? slot.data->size() : 0;
  queue_.push_back(std::move(slot));
  // The committer sleeps without a deadline while the queue is empty.
  if (group_ready() || queue_.size() == 1) cv_.notify_one();
}

void write_back::settle_soon() {
  if (!settle_) return;
  std::lock_guard lock(mutex_);
  if (settle_pending_ || stopping_) return;
  settle_pending_ = true;
  settle_due_ = std::chrono::steady_clock::now() + interval_;
  cv_.notify_one();
}

write_back::urgent::urgent(write_back* wb) : wb_(wb) {
  if (!wb_) return;
  std::lock_guard lock(wb_->mutex_);
  ++wb_->urgent_;
  wb_->cv_.notify_one();
}

write_back::urgent::~urgent() {
  if (!wb_) return;
  std::lock_guard lock(wb_->mutex_);
  --wb_->urgent_;
}

void write_back::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto due = [&] {
      return !queue_.empty() && (stopping_ || group_ready() ||
                                 std::chrono::steady_clock::now() >= oldest_ + interval_);
    };
    const auto settle_due = [&] {
      return settle_pending_ && !stopping_ && std::chrono::steady_clock::now() >= settle_due_;
    };
    if (settle_due()) {
      settle_pending_ = false;
      lock.unlock();
      {
        std::lock_guard committing(commit_mutex_);
        settle_();
      }
      lock.lock();
      continue;
    }
    if (queue_.empty()) {
      if (stopping_) return;
      if (settle_pending_) {
        cv_.wait_until(lock, settle_due_,
                       [&] { return stopping_ || !queue_.empty() || settle_due(); });
      } else {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || settle_pending_; });
      }
      continue;
    }
    if (!due()) {
      // Also back to the top once the queue is empty: a waiter
      // (commit_queued) may have committed it meanwhile, and an empty queue
      // is never due, not even when stopping.
      const auto wake =
          settle_pending_ ? std::min(oldest_ + interval_, settle_due_) : oldest_ + interval_;
      cv_.wait_until(lock, wake, [&] { return queue_.empty() || due() || settle_due(); });
      if (!due()) continue;
    }
    lock.unlock();
    {
      std::lock_guard committing(commit_mutex_);
      commit_next_group();
    }
    lock.lock();
  }
}

bool write_back::commit_queued(const node* file) {
  std::lock_guard committing(commit_mutex_);
  {
    std::lock_guard lock(mutex_);
    const bool queued = std::any_of(queue_.begin(), queue_.end(),
                                    [&](const encoded_slot& e) { return e.n.get() == file; });
    if (!queued) return false;
  }
  commit_next_group();
  return true;
}

void write_back::commit_next_group() {
  std::vector<encoded_slot> group;
  {
    std::lock_guard lock(mutex_);
    group = take_group();
  }
  // The queue may have been emptied by another committing thread meanwhile.
  if (!group.empty()) commit_(group);
  group.clear();  // the nodes' last references may go here, off mutex_
}

std::vector<encoded_slot> write_back::take_group() {
  // One group: at most k_group_slots versions, k_group_bytes (the first
  // version always, however big) and k_group_files files.
  std::vector<encoded_slot> group;
  std::set<const node*> files;
  std::size_t bytes = 0;
  while (!queue_.empty() && group.size() < k_group_slots &&
         (group.empty() || bytes < k_group_bytes)) {
    const node* file = queue_.front().n.get();
    if (!files.contains(file) && files.size() >= k_group_files) break;
    files.insert(file);
    const std::size_t size = queue_.front().data ? queue_.front().data->size() : 0;
    bytes += size;
    queued_bytes_ -= size;
    group.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  // What is left has waited since this group's commit began, at most.
  oldest_ = std::chrono::steady_clock::now();
  return group;
}

}  // namespace densefs::fs
