// A snapshot read beside the live volume: the namespace as it was when
// the snapshot was taken (a snapshot_view over the live engine), the data
// through the live store's chunk reads and cache (chunks are named by
// their content; a snapshot's references keep them). What a live mount's
// `.snapshots` directory serves (fs/snapshot_tree.h); made by
// store::read_snapshot. Thread-safe: every read is const.
//
// Reads beside the live volume's writer are exact (snapshot_view.h): a
// commit never shows, since what it changes keeps its old value in a
// pre-image of the same batch. A snapshot deleted meanwhile reads as
// whatever its deletion has left; the caller asks alive() first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/records.h"
#include "store/snapshot/registry.h"
#include "store/snapshot/snapshot_view.h"

namespace densefs::store {

class store;

class snapshot_reader {
 public:
  snapshot_reader(const store& live, const metadata_engine& engine, snapshot_record record);

  const snapshot_record& record() const { return record_; }
  // Whether the snapshot is still there and not being deleted (one read).
  bool alive() const;

  std::optional<inode_record> get_inode(std::uint64_t ino) const;
  std::optional<dirent_record> get_dirent(std::uint64_t parent, std::string_view name) const;
  void list_dir(std::uint64_t parent, std::optional<std::string_view> after,
                const std::function<bool(std::string_view, const dirent_record&)>& fn) const;
  // The extents of `ino` that overlap [begin, end).
  extent_list extents(std::uint64_t ino, std::uint64_t begin, std::uint64_t end) const;
  std::optional<std::string> get_xattr(std::uint64_t ino, std::string_view name) const;
  std::vector<std::string> list_xattrs(std::uint64_t ino) const;
  // The live store's (store.h).
  std::shared_ptr<const std::string> read_chunk(const chunk_hash& hash) const;
  std::shared_ptr<const std::string> cached_chunk(const chunk_hash& hash) const;

 private:
  const store& live_;
  const metadata_engine& engine_;  // the live engine
  snapshot_view view_;
  snapshot_record record_;
};

}  // namespace densefs::store
