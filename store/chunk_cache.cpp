#include "store/chunk_cache.h"

namespace densefs::store {

chunk_cache::value chunk_cache::find(const chunk_hash& hash) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(hash);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

chunk_cache::value chunk_cache::get_or_load(const chunk_hash& hash, const loader& load) {
  std::promise<value> promise;
  {
    std::unique_lock lock(mutex_);
    if (const auto it = index_.find(hash); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    if (const auto it = loading_.find(hash); it != loading_.end()) {
      const std::shared_future<value> pending = it->second;
      lock.unlock();
      return pending.get();  // rethrows the loader's exception
    }
    loading_.emplace(hash, promise.get_future().share());
  }

  value result;
  try {
    result = load();
  } catch (...) {
    std::lock_guard lock(mutex_);
    promise.set_exception(std::current_exception());
    loading_.erase(hash);
    throw;
  }
  std::lock_guard lock(mutex_);
  insert_locked(hash, result);
  promise.set_value(result);
  loading_.erase(hash);
  return result;
}

void chunk_cache::insert(const chunk_hash& hash, value v) {
  std::lock_guard lock(mutex_);
  insert_locked(hash, std::move(v));
}

void chunk_cache::insert_locked(const chunk_hash& hash, value v) {
  if (!v) return;
  const std::size_t size = v->size();
  // A value larger than the whole budget would evict everything and then be
  // evicted itself; serve it uncached.
  if (size > capacity_) return;
  if (const auto it = index_.find(hash); it != index_.end()) {
    used_ -= it->second->second->size();
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(hash, std::move(v));
  index_.emplace(hash, lru_.begin());
  used_ += size;
  while (used_ > capacity_ && !lru_.empty()) {
    auto& victim = lru_.back();
    used_ -= victim.second->size();
    index_.erase(victim.first);
    lru_.pop_back();
  }
}

void chunk_cache::erase(const chunk_hash& hash) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(hash);
  if (it == index_.end()) return;
  used_ -= it->second->second->size();
  lru_.erase(it->second);
  index_.erase(it);
}

void chunk_cache::clear() {
  std::lock_guard lock(mutex_);
  lru_.clear();
  index_.clear();
  used_ = 0;
}

std::size_t chunk_cache::size_bytes() const {
  std::lock_guard lock(mutex_);
  return used_;
}

std::size_t chunk_cache::entries() const {
  std::lock_guard lock(mutex_);
  return index_.size();
}

}  // namespace densefs::store
