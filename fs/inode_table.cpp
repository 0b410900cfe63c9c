#include "fs/inode_table.h"

namespace densefs::fs {

std::shared_ptr<node> inode_table::find(std::uint64_t ino) const {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? nullptr : it->second;
}

std::shared_ptr<node> inode_table::insert(std::shared_ptr<node> n) {
  std::lock_guard lock(mutex_);
  return insert_locked(std::move(n));
}

std::shared_ptr<node> inode_table::insert_locked(std::shared_ptr<node> n) {
  if (const auto it = nodes_.find(n->ino); it != nodes_.end()) return it->second;
  if (const auto p = parked_.find(n->ino); p != parked_.end()) {
    // Not yet visible to any other thread: no lock of the node's is needed.
    n->lookups = p->second.lookups_and_fresh & ~k_cache_fresh;
    // cached_version is 0: a data_version past it makes the next open drop
    // the kernel's pages, as it would have.
    if (!(p->second.lookups_and_fresh & k_cache_fresh)) n->data_version.store(1);
    n->parent_hint.store(p->second.parent_hint, std::memory_order_relaxed);
    parked_.erase(p);
  }
  nodes_.emplace(n->ino, n);
  resident_.store(nodes_.size(), std::memory_order_relaxed);
  return n;
}

void inode_table::erase(std::uint64_t ino) {
  std::lock_guard lock(mutex_);
  nodes_.erase(ino);
  resident_.store(nodes_.size(), std::memory_order_relaxed);
}

std::size_t inode_table::parked() const {
  std::lock_guard lock(mutex_);
  return parked_.size();
}

bool inode_table::is_parked(std::uint64_t ino) const {
  std::lock_guard lock(mutex_);
  return parked_.contains(ino);
}

bool inode_table::forget_parked(std::uint64_t ino, std::uint64_t nlookup) {
  std::lock_guard lock(mutex_);
  const auto p = parked_.find(ino);
  if (p == parked_.end()) return false;
  const std::uint64_t lookups = p->second.lookups_and_fresh & ~k_cache_fresh;
  if (nlookup >= lookups)
    parked_.erase(p);
  else
    p->second.lookups_and_fresh -= nlookup;
  return true;
}

std::vector<std::shared_ptr<node>> inode_table::all() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<node>> out;
  out.reserve(nodes_.size());
  for (const auto& [ino, n] : nodes_) out.push_back(n);
  return out;
}

}  // namespace densefs::fs
