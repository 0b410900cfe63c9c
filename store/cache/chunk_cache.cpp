#include "store/cache/chunk_cache.h"

namespace densefs::store {

chunk_cache::value chunk_cache::find(const chunk_hash& hash) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(hash);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

chunk_cache::value chunk_cache::get_or_load(const chunk_hash& hash, const loader& load) {
  claim_result c = claim(hash);
  while (!c.cached && !c.mine) {
    try {
      return c.pending.get();  // rethrows the loader's exception
    } catch (const load_abandoned&) {
      c = claim(hash);
    }
  }
  if (c.cached) return c.cached;
  value result;
  try {
    result = load();
  } catch (...) {
    fail(hash, std::current_exception());
    throw;
  }
  fulfil(hash, result);
  return result;
}

chunk_cache::claim_result chunk_cache::claim(const chunk_hash& hash) {
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(hash); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    hits_.fetch_add(1, std::memory_order_relaxed);
    return {it->second->second, {}, false};
  }
  if (const auto it = loading_.find(hash); it != loading_.end()) {
    merged_.fetch_add(1, std::memory_order_relaxed);
    return {nullptr, it->second->result, false};
  }
  loading_.emplace(hash, std::make_shared<load>());
  misses_.fetch_add(1, std::memory_order_relaxed);
  return {nullptr, {}, true};
}

chunk_cache_reads chunk_cache::reads() const {
  return {hits_.load(std::memory_order_relaxed), merged_.load(std::memory_order_relaxed),
          misses_.load(std::memory_order_relaxed)};
}

void chunk_cache::fulfil(const chunk_hash& hash, value v) {
  std::lock_guard lock(mutex_);
  insert_locked(hash, v);
  if (const auto it = loading_.find(hash); it != loading_.end()) {
    it->second->promise.set_value(std::move(v));
    loading_.erase(it);
  }
}

void chunk_cache::fail(const chunk_hash& hash, std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (const auto it = loading_.find(hash); it != loading_.end()) {
    it->second->promise.set_exception(std::move(error));
    loading_.erase(it);
  }
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
