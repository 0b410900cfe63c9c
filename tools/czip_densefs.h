// `densefs czip pack` of a file stored in densefs: the czip's chunks are the
// file's own extents, and a whole stored chunk whose codec is the one the
// czip asks for is copied as stored instead of being compressed again
// (docs/czip.md, "From a densefs file"). Private to tools/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "codec/codec.h"
#include "codec/czip.h"

namespace densefs::tools {

struct densefs_pack_summary {
  std::uint64_t size = 0;            // bytes of the file
  std::uint64_t reused_chunks = 0;   // stored payloads copied as they are
  std::uint64_t encoded_chunks = 0;  // chunks given to the czip's codec
};

// Which stored encodings to reuse: one codec, or every one (--codec keep).
struct densefs_reuse {
  std::optional<codec::codec_id> codec;  // nothing: keep every encoding
  bool accepts(codec::codec_id c) const { return !codec || *codec == c; }
};

// PATH inside the unmounted store STORE_DIR (like `cat --store`).
densefs_pack_summary pack_from_store(const std::string& store_dir, const std::string& path,
                                     const densefs_reuse& reuse, codec::czip::writer& out);

// PATH on a live densefs mount, through the daemon's control socket (the
// mount owner only). `info` is the file's user.densefs.info.
densefs_pack_summary pack_from_mount(const std::string& path, const std::string& info,
                                     const densefs_reuse& reuse, codec::czip::writer& out);

}  // namespace densefs::tools
