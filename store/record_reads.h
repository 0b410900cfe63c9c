// Reading namespace records from a metadata engine: inodes, directory
// entries, extents and xattrs, decoded and checked. The store's reads
// (store_read.cpp) and a snapshot's (store/snapshot/snapshot_reader.h)
// are these over different engines: the live one, or a snapshot_view.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/metadata/metadata_engine.h"
#include "store/records.h"

namespace densefs::store::record_reads {

std::optional<inode_record> inode(const metadata_engine& e, std::uint64_t ino);
std::optional<dirent_record> dirent(const metadata_engine& e, std::uint64_t parent,
                                    std::string_view name);
// The entries of `parent` in name order, after `after` when given; `fn`
// returns false to stop.
void list_dir(const metadata_engine& e, std::uint64_t parent, std::optional<std::string_view> after,
              const std::function<bool(std::string_view, const dirent_record&)>& fn);
// Appends to `out` (until it holds `limit`) the extents of `ino` that
// overlap [begin, end), read from offset `from` on: from the last extent
// at or before it when `from_floor` (one that starts before `begin` may
// still cover it), else from the first at or after it.
void append_extents(const metadata_engine& e, std::uint64_t ino, std::uint64_t from,
                    bool from_floor, std::uint64_t begin, std::uint64_t end, std::size_t limit,
                    extent_list& out);
std::optional<std::string> xattr(const metadata_engine& e, std::uint64_t ino,
                                 std::string_view name);
std::vector<std::string> xattr_names(const metadata_engine& e, std::uint64_t ino);

// The keys that start with inode `n`'s number (8 bytes, big-endian): its
// dirents, extents or xattrs.
key_range u64_prefix(std::uint64_t n);

// The offset an extent key of `ino` names; store_error(EIO) for a key of
// the wrong length.
std::uint64_t extent_offset(std::uint64_t ino, std::string_view key);
// Names in messages.
std::string extent_what(std::uint64_t ino, std::uint64_t offset);

}  // namespace densefs::store::record_reads
