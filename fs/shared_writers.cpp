// Several writers of one volume (`densefs mount -o shared`; docs/scale-out.md,
// "Several writers"). Each daemon keeps a node table of the records it
// uses; another writer may change any of them between two of its
// operations. So every commit of records others may change reads them in
// the commit's locked section (store::commit's `fill`): the precondition
// checks (an entry exists, a directory is empty) and the records written
// (a parent's link count, a file's extents) come from the store as it is
// then, never from the table, and the table follows afterwards. The
// others' change notices (follower.cpp) refresh what the table holds in
// between, for getattr, lookups and reads.
#include <sys/stat.h>

#include <algorithm>

#include "fs/filesystem.h"

namespace densefs::fs {

bool filesystem::has_own_data(const node& n) {
  // Not merely open for writing here: a handle that wrote nothing (or whose
  // writes are all stored) must not hold another writer's size back.
  return n.regular && (n.has_staged() || n.record_dirty || n.persisted_size != n.record.size);
}

void filesystem::keep_own_times(const store::inode_record& own, store::inode_record& r) {
  r.mtime = own.mtime;
  r.atime = own.atime;
  // A change of its own not stored yet (a write, fallocate) moved it; a
  // later one of another writer's (chmod) may have too.
  r.ctime = std::max(r.ctime, own.ctime);
}

store::inode_record filesystem::record_to_edit(node& n) {
  if (!shares_volume()) return n.record;
  std::optional<store::inode_record> stored = store_->get_inode(n.ino);
  if (!stored) throw fs_error(ENOENT);  // removed by another writer
  store::inode_record r = *stored;
  if (has_own_data(n)) {
    keep_own_times(n.record, r);
    r.size = n.persisted_size;
  }
  store::inode_record kept = r;
  // The size the node's reads stop at moves with its data (data_mutex):
  // another writer's size comes with refresh_from_store.
  kept.size = n.record.size;
  n.record = kept;
  return r;
}

void filesystem::keep_record(node& n, const store::inode_record& r) {
  const std::uint64_t size = n.record.size;
  n.record = r;
  if (shares_volume()) n.record.size = size;
}

}  // namespace densefs::fs
