// Changes put off until the next commit of the file system instead of a
// commit each (docs/design.md, "Durability"; docs/scale-out.md, "Round
// trips"): the creates and renames of new files, mkdirs, symlinks and
// special files, and attribute changes that a crash may undo.
//
// Why it keeps the crash rules: a new file is removed by a crash until its
// data as of its last close is committed (new_files.cpp), so a crash that
// loses its put-off create or rename leaves what the rule allows, the name
// absent. Its directory's times go with it. A directory, symlink or
// special file put off is made whole with its record or not at all, and a
// directory holds only what is put off with it: anything else that lands
// in it (a file's data, a link, a rename of an older file) is a commit,
// which stores the mkdir first, so a crash that loses the mkdir loses
// nothing else. An attribute change of any other inode is put off only
// where its loss takes no protection away (times, a chmod that only adds
// permissions: filesystem::setattr). Nothing else is put off: an unlink,
// an rmdir, a rename over a name or of an older inode, a link, a chown,
// an xattr all commit as before, and every commit (filesystem::commit)
// stores what is put off first, in the same transaction, so the store
// never holds a later change without an earlier one. The committer's
// settle step (write_back::settle_fn) commits them within -o commit=SEC
// when nothing else commits; fsync, `densefs sync`, snapshots and unmount
// commit them.
//
// Until then this is what the store would say of those names: lookups and
// the checks of create and rename read it first (filesystem::entry_at),
// and a request that reads the store by name or lists a directory commits
// it first (filesystem::commit_deferred). On a volume with other clients
// nothing is put off: they read the store.
//
// Guarded by the file system's meta_mutex_.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/inode_table.h"
#include "store/store.h"

namespace densefs::fs {

class deferred_names {
 public:
  // What the next commit stores at `name` in `parent`: an entry, or its
  // removal (an empty optional inside); nothing when no change there is
  // put off.
  std::optional<std::optional<store::dirent_record>> find(std::uint64_t parent,
                                                          std::string_view name) const;
  void put_entry(std::uint64_t parent, std::string_view name, const store::dirent_record& entry);
  void remove_entry(std::uint64_t parent, std::string_view name);

  // The next commit stores n's record as it is then; `made`: n is an inode
  // the store does not have yet (transaction::made_inode).
  void store_record(const std::shared_ptr<node>& n, bool made = false);
  // ...and, while n is still new then, its new-file row naming it here.
  void name_new_file(std::uint64_t ino, std::uint64_t parent, std::string_view name);

  bool empty() const { return records_.empty() && entries_.empty(); }
  // Whether a change to an entry of directory `dir` is put off.
  bool touches(std::uint64_t dir) const;
  // Whether the next commit stores a record of `ino` (its node must stay
  // in the table until then: the store cannot load it).
  bool holds(std::uint64_t ino) const { return records_.contains(ino); }
  // Whether `ino` is an inode the store does not have yet: the next commit
  // makes it (store_record with `made`).
  bool made(std::uint64_t ino) const {
    const auto it = records_.find(ino);
    return it != records_.end() && it->second.made;
  }

  // Adds every change to `txn`, each record as `record_of` makes it from
  // its node. Leaves them here: the commit may fail.
  void add_to(store::transaction& txn,
              const std::function<store::inode_record(const node&)>& record_of) const;
  // That commit succeeded: forgets them, and returns the nodes held.
  std::vector<std::shared_ptr<node>> committed();

 private:
  static std::string key(std::uint64_t parent, std::string_view name);
  struct held_record {
    std::shared_ptr<node> n;
    bool made = false;
    // A new file: where its new-file row names it.
    std::optional<std::pair<std::uint64_t, std::string>> new_file_name;
  };
  struct entry_change {
    std::uint64_t parent = 0;
    std::string name;
    std::optional<store::dirent_record> entry;  // empty: removed
  };
  std::map<std::string, entry_change> entries_;  // by key(parent, name)
  std::map<std::uint64_t, held_record> records_;
};

}  // namespace densefs::fs
