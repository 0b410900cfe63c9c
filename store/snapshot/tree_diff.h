// What changed between two states of a volume's namespace (`densefs
// snapshot diff A B`; docs/backup.md, "Snapshots"): both walked from the
// root in name order, one path per line as restic's diff prints them.
// A file is modified when its type, permissions, owner, size, mtime,
// symlink target, device number, data (extents) or xattrs differ; access
// and change times and link counts are left out (a read or a new hard
// link elsewhere changes nothing in the file).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "store/metadata/metadata_engine.h"

namespace densefs::store {

struct tree_change {
  char kind = '?';   // '+' added, '-' removed, 'M' modified
  std::string path;  // from the root, "/a/b"; a directory ends with '/'
};

struct tree_diff_summary {
  std::uint64_t added = 0;
  std::uint64_t removed = 0;
  std::uint64_t modified = 0;
};

// `from` and `to` are the records of the two states (a snapshot_view, or
// the live engine). `fn` gets each change in path order.
tree_diff_summary diff_trees(const metadata_engine& from, const metadata_engine& to,
                             const std::function<void(const tree_change&)>& fn);

}  // namespace densefs::store
