#include "fs/deferred_names.h"

#include <sys/stat.h>

#include <cstring>
#include <utility>

namespace densefs::fs {

std::string deferred_names::key(std::uint64_t parent, std::string_view name) {
  std::string k(sizeof parent, '\0');
  std::memcpy(k.data(), &parent, sizeof parent);
  k.append(name);
  return k;
}

std::optional<std::optional<store::dirent_record>> deferred_names::find(
    std::uint64_t parent, std::string_view name) const {
  const auto it = entries_.find(key(parent, name));
  if (it == entries_.end()) return std::nullopt;
  return it->second.entry;
}

bool deferred_names::touches(std::uint64_t dir) const {
  const std::string prefix = key(dir, {});
  const auto it = entries_.lower_bound(prefix);
  return it != entries_.end() && it->first.starts_with(prefix);
}

void deferred_names::put_entry(std::uint64_t parent, std::string_view name,
                               const store::dirent_record& entry) {
  entries_.insert_or_assign(key(parent, name), entry_change{parent, std::string(name), entry});
}

void deferred_names::remove_entry(std::uint64_t parent, std::string_view name) {
  // Kept as a removal even when the store never had the name (a file
  // created and renamed before either commits): deleting an absent entry
  // changes nothing, and whether the store has it is a read this spares.
  entries_.insert_or_assign(key(parent, name),
                            entry_change{parent, std::string(name), std::nullopt});
}

void deferred_names::store_record(const std::shared_ptr<node>& n, bool made) {
  held_record& h = records_[n->ino];
  h.n = n;
  h.made = h.made || made;
}

void deferred_names::name_new_file(std::uint64_t ino, std::uint64_t parent, std::string_view name) {
  const auto it = records_.find(ino);
  if (it != records_.end()) it->second.new_file_name.emplace(parent, std::string(name));
}

void deferred_names::add_to(
    store::transaction& txn,
    const std::function<store::inode_record(const node&)>& record_of) const {
  for (const auto& [k, change] : entries_) {
    if (change.entry)
      txn.put_dirent(change.parent, change.name, *change.entry);
    else
      txn.delete_dirent(change.parent, change.name);
  }
  for (const auto& [ino, h] : records_) {
    txn.put_inode(record_of(*h.n));
    if (h.made) txn.made_inode(ino, S_ISDIR(h.n->record.mode));
    // Ended meanwhile (closed with nothing staged): its row is cleared by
    // the same commit (filesystem::commit), or was never written.
    if (h.new_file_name && h.n->new_file)
      txn.mark_new_file(ino, h.new_file_name->first, h.new_file_name->second, "");
  }
}

std::vector<std::shared_ptr<node>> deferred_names::committed() {
  std::vector<std::shared_ptr<node>> held;
  held.reserve(records_.size());
  for (auto& [ino, h] : records_) held.push_back(std::move(h.n));
  records_.clear();
  entries_.clear();
  return held;
}

}  // namespace densefs::fs
