#include "fs/inode_table.h"

namespace densefs::fs {

std::shared_ptr<node> inode_table::find(std::uint64_t ino) const {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? nullptr : it->second;
}

std::shared_ptr<node> inode_table::insert(std::shared_ptr<node> n) {
  std::lock_guard lock(mutex_);
  auto [it, inserted] = nodes_.emplace(n->ino, n);
  return it->second;
}

void inode_table::erase(std::uint64_t ino) {
  std::lock_guard lock(mutex_);
  nodes_.erase(ino);
}

std::vector<std::shared_ptr<node>> inode_table::all() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<node>> out;
  out.reserve(nodes_.size());
  for (const auto& [ino, n] : nodes_) out.push_back(n);
  return out;
}

}  // namespace densefs::fs
