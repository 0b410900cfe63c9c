// What a file looks like from outside, a live one (ops_attr.cpp,
// ops_xattr.cpp) or one of a snapshot (snapshot_tree.cpp): its stat, and
// what `densefs info` shows of it (docs/mounting.md, "densefs info").
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/store.h"

namespace densefs::fs {

// The stat of the file `r` records (st_ino is r.ino).
struct stat file_stat(const store::inode_record& r);

// Room for the chunk list in user.densefs.info: the kernel takes xattr
// values up to 64 KiB, and the rest of the JSON is small.
inline constexpr std::size_t k_info_xattr_chunk_list_bytes = 56u << 10;

// The user.densefs.info xattr's JSON. `extents`: all of the file's (none but a regular file's);
// `pending`: bytes written but not stored yet; `snapshot`: the snapshot's name, empty for the live
// volume. The chunk list stops once it takes `max_chunk_list_bytes` of JSON ("chunks_truncated";
// the counts still cover every chunk): an xattr value is at most 64 KiB.
std::string file_info_json(const store::store& st, std::uint64_t ino,
                           const store::inode_record& record, const store::extent_list& extents,
                           std::uint64_t pending, std::size_t max_chunk_list_bytes,
                           std::string_view snapshot);

}  // namespace densefs::fs
