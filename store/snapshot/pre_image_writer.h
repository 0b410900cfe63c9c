// The write side of snapshots (docs/backup.md, "Snapshots"): for each
// namespace record (inode, dirent, extent, xattr) a commit changes for the
// first time since the latest snapshot L, the commit's own batch also
// keeps the value before, as pre-image row (record, L) (pre_image.h), or an
// "absent" marker. Records of inodes numbered at or above L's next_ino did
// not exist then and get none. Without a snapshot it does nothing.
//
// A kept extent names a chunk: the commit adds one reference to it for the
// pre-image (held), so the chunk outlives the live extent, and deleting
// the snapshot gives exactly that reference back.
//
// Threading: used under the store's commit_mutex_ (its reads are the
// commit's locked reads, so beside other writers nobody changes the
// records between them and the write).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "store/hash.h"
#include "store/metadata/metadata_engine.h"

namespace densefs::store {

// A commit's namespace changes: (table, key) -> the value after the
// commit, nullopt when it erases the record.
using record_changes = std::map<std::pair<table, std::string>, std::optional<std::string>>;

class pre_image_writer {
 public:
  // The latest snapshot (0: none) and its next_ino.
  void reset(std::uint64_t latest, std::uint64_t next_ino);
  std::uint64_t latest() const { return latest_; }

  struct added {
    // Table byte + key of the records now kept for latest(), to remember()
    // once the batch has applied.
    std::vector<std::string> kept;
    // One reference per kept extent, to the chunk it names.
    std::vector<chunk_hash> held;
  };
  // Whether a change of record `key` of `t` may need a pre-image: a
  // namespace record of an inode older than the latest snapshot, not known
  // to be kept already. Cheap: a commit asks it of each change first, and
  // builds `changes` only of those (new files need none).
  bool may_need(table t, std::string_view key) const;
  // Adds to `batch` the pre-images `changes` need; reads the values before
  // and the rows already kept through `reads`.
  added add(const record_changes& changes, locked_reads& reads, metadata_batch& batch) const;
  void remember(std::vector<std::string> kept);

 private:
  std::uint64_t latest_ = 0;
  std::uint64_t next_ino_ = 0;
  // Table byte + key of records already kept for latest_: a cache (bounded;
  // a key missing here is looked up among the pre-image rows).
  std::unordered_set<std::string> kept_;
};

}  // namespace densefs::store
