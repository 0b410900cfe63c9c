// Pre-images of records for snapshots (docs/backup.md, "Snapshots"): the meta-table
// rows `pre/` + table + escaped key + snapshot id that keep a record's
// value as it was when a snapshot was taken, and the rule a snapshot reads
// by. The escaped key keeps bytewise order and is prefix-free, so the rows
// of one record sit together, in snapshot order, and the records in the
// order of their keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "store/metadata/metadata_engine.h"

namespace densefs::store {

inline constexpr std::string_view k_pre_image_prefix = "pre/";

// `key` with every 0x00 byte written 0x00 0xff, then 0x00 0x01: a < b
// bytewise exactly when escape(a) < escape(b), and no escaped key is a
// prefix of another.
std::string escape_key(std::string_view key);
// The inverse; nullopt for bytes escape_key cannot have made.
std::optional<std::string> unescape_key(std::string_view escaped);

// pre/ + table + escape_key(key) + snapshot id (u64 BE).
std::string pre_image_key(table t, std::string_view key, std::uint64_t snapshot);
// Every pre-image row of table `t` whose record key is in `range`.
key_range pre_image_range(table t, const key_range& range);

struct pre_image_row {
  table t;
  std::string key;  // the record's key
  std::uint64_t snapshot = 0;
};
// A row's key taken apart; nullopt for a key that is not a pre-image row's.
std::optional<pre_image_row> parse_pre_image_key(std::string_view row_key);

// A row's value: 0x00 (the record did not exist), or 0x01 + the value.
std::string encode_pre_image(const std::optional<std::string_view>& value);
// nullopt inside: the record did not exist then. Throws store_error(EIO)
// for a value that is neither.
std::optional<std::string> decode_pre_image(std::string_view row_value, std::string_view what);

// The records that are pre-imaged (the namespace: inodes, dirents,
// extents, xattrs), and the inode a key of theirs belongs to (its first
// eight bytes, big-endian; a directory entry's directory). A record whose
// inode is numbered at or above a snapshot's next_ino did not exist when
// it was taken: it has no pre-image, and the snapshot does not see it.
bool is_pre_imaged(table t);
std::optional<std::uint64_t> owner_ino(std::string_view key);

}  // namespace densefs::store
