// The snapshot registry (docs/backup.md, "Snapshots"; layout in
// docs/format.md): which snapshots a volume has, kept as meta-table rows.
//
//   snapshot/ + id (u64 BE)  -> version 1 | next_ino u64 LE | created
//                               (seconds since the epoch) i64 LE | state u8
//                               (0 live, 1 deleting) | name
//   snapshot_latest          -> the id writers file pre-images under (u64 LE;
//                               absent or 0: none)
//   snapshot_counter         -> the last id handed out (u64 LE): ids only grow,
//                               so rows of a snapshot being deleted never mix
//                               with a new one's
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/metadata/metadata_engine.h"

namespace densefs::store {

inline constexpr std::string_view k_snapshot_prefix = "snapshot/";
inline constexpr std::string_view k_snapshot_latest_key = "snapshot_latest";
inline constexpr std::string_view k_snapshot_counter_key = "snapshot_counter";

enum class snapshot_state : std::uint8_t { live = 0, deleting = 1 };

struct snapshot_record {
  std::uint64_t id = 0;  // from the key
  // The inode counter when it was taken: records of inodes numbered at or
  // above it came later, and the snapshot does not see them.
  std::uint64_t next_ino = 0;
  std::int64_t created = 0;
  snapshot_state state = snapshot_state::live;
  std::string name;
};

std::string snapshot_key(std::uint64_t id);
std::string encode_snapshot(const snapshot_record& r);
// Throws store_error(EIO) naming `what` for a value that does not decode.
snapshot_record decode_snapshot(std::uint64_t id, std::string_view value, std::string_view what);

std::string encode_snapshot_id(std::uint64_t id);
// Throws store_error(EIO) naming `what` unless it is 8 bytes.
std::uint64_t decode_snapshot_id(std::string_view value, std::string_view what);

// Every snapshot of the volume, oldest first.
std::vector<snapshot_record> read_snapshots(const metadata_engine& e);
// The one named `name`; nullopt when there is none.
std::optional<snapshot_record> find_snapshot(const metadata_engine& e, std::string_view name);

// {"id":N,"name":"...","created":SECONDS,"state":"live"|"deleting",
// "next_ino":N}: `densefs snapshot list --json` and the control socket.
std::string to_json(const snapshot_record& r);
// The inverse, of a JSON array of them (a daemon's list). Throws
// store_error(EIO) naming what is missing or mistyped.
std::vector<snapshot_record> snapshots_from_json(std::string_view array);

// Throws store_error(EINVAL) with the rule it breaks unless `name` can be a
// snapshot's: a file name (it is one under .snapshots), 1-255 bytes, no
// '/' or NUL, not "." or "..".
void check_snapshot_name(std::string_view name);

}  // namespace densefs::store
