#include "store/cache/entry_cache.h"

namespace densefs::store {

std::optional<std::optional<dirent_record>> entry_cache::find(std::uint64_t parent,
                                                              std::string_view name) const {
  const std::string key = dirent_key(parent, name);
  std::lock_guard lock(mutex_);
  if (const auto it = entries_.find(key); it != entries_.end()) return it->second;
  if (complete_.contains(parent)) return std::optional<dirent_record>{};
  return std::nullopt;
}

std::optional<bool> entry_cache::empty(std::uint64_t parent) const {
  std::lock_guard lock(mutex_);
  if (const auto it = complete_.find(parent); it != complete_.end()) return it->second == 0;
  return std::nullopt;
}

std::uint64_t entry_cache::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

void entry_cache::keep(std::uint64_t generation, std::uint64_t parent, std::string_view name,
                       const std::optional<dirent_record>& entry) {
  std::string key = dirent_key(parent, name);
  std::lock_guard lock(mutex_);
  if (generation != generation_) return;   // a change came in between: it may be stale
  if (complete_.contains(parent)) return;  // known already
  make_room(1);
  entries_.insert_or_assign(std::move(key), entry);
}

void entry_cache::committed(std::span<const change> changes,
                            std::span<const std::uint64_t> new_directories) {
  if (changes.empty() && new_directories.empty()) return;
  std::lock_guard lock(mutex_);
  ++generation_;
  make_room(changes.size() + new_directories.size());
  for (const std::uint64_t dir : new_directories) complete_.emplace(dir, 0);
  for (const change& c : changes) {
    std::string key = dirent_key(c.parent, c.name);
    const auto whole = complete_.find(c.parent);
    if (whole == complete_.end()) {
      entries_.insert_or_assign(std::move(key), c.entry);
      continue;
    }
    // A directory known whole: its count follows, and a removed name is
    // absent without a mark.
    const auto it = entries_.find(key);
    const bool was_there = it != entries_.end() && it->second.has_value();
    if (was_there && !c.entry) --whole->second;
    if (!was_there && c.entry) ++whole->second;
    if (!c.entry) {
      if (it != entries_.end()) entries_.erase(it);
    } else if (it != entries_.end()) {
      it->second = c.entry;
    } else {
      entries_.emplace(std::move(key), c.entry);
    }
  }
}

void entry_cache::forget(std::span<const std::pair<std::uint64_t, std::string>> entries) {
  if (entries.empty()) return;
  std::lock_guard lock(mutex_);
  ++generation_;
  for (const auto& [parent, name] : entries) {
    entries_.erase(dirent_key(parent, name));
    complete_.erase(parent);
  }
}

void entry_cache::forget_all() {
  std::lock_guard lock(mutex_);
  ++generation_;
  entries_.clear();
  complete_.clear();
}

std::size_t entry_cache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size() + complete_.size();
}

void entry_cache::make_room(std::size_t more) {
  if (entries_.size() + complete_.size() + more <= capacity_) return;
  // Emptied whole: what a directory known whole needs goes with it.
  entries_.clear();
  complete_.clear();
}

}  // namespace densefs::store
