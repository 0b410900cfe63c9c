// Copying a file's committed bytes out of its extents and chunks: the
// live reads (data_path.cpp) and a snapshot's (snapshot_tree.cpp).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "store/error.h"

namespace densefs::fs {

// Copies committed file bytes [begin, begin + length) into out; holes are
// zeros. `st` is the live store, or a snapshot read beside it
// (store::snapshot_reader). With `cached_only`, returns false instead of decoding a chunk that
// is not in the chunk cache (the caller decodes off the FUSE thread).
template <typename Reader>
bool read_committed(const Reader& st, std::uint64_t ino, std::uint64_t begin, std::size_t length,
                    char* out, bool cached_only = false) {
  std::memset(out, 0, length);
  const std::uint64_t end = begin + length;
  for (const auto& [offset, extent] : st.extents(ino, begin, end)) {
    auto chunk = cached_only ? st.cached_chunk(extent.hash) : st.read_chunk(extent.hash);
    if (!chunk) return false;
    if (std::uint64_t{extent.chunk_offset} + extent.length > chunk->size()) {
      throw store::store_error(EIO, "inode " + std::to_string(ino) + ": extent at " +
                                        std::to_string(offset) + " exceeds chunk " +
                                        extent.hash.hex());
    }
    const std::uint64_t from = std::max(begin, offset);
    const std::uint64_t to = std::min(end, offset + extent.length);
    if (from >= to) continue;
    std::memcpy(out + (from - begin), chunk->data() + extent.chunk_offset + (from - offset),
                to - from);
  }
  return true;
}

}  // namespace densefs::fs
