// Exporting a stored file as a byte stream: its plain bytes (identity) or
// one Brotli stream (br) built by joining the file's stored Broccoli chunks
// without recompressing them. What `densefs cat` and the daemon's "cat"
// control request serve (docs/export.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "store/hash.h"

namespace densefs::store {

class store;

enum class export_encoding { identity, br };

// "identity" or "br"; nothing for any other name.
std::optional<export_encoding> export_encoding_from_name(std::string_view name);

// What an export did (for logs and tests).
struct export_summary {
  std::uint64_t size = 0;          // the file's plain size
  std::uint64_t bytes_out = 0;     // bytes given to the sink
  std::size_t pieces = 0;          // br: Brotli streams joined
  std::size_t reused_pieces = 0;   // br: stored Broccoli chunks copied as they are
  std::size_t encoded_pieces = 0;  // br: pieces compressed during the export
};

struct export_options {
  // Broccoli settings for the pieces compressed on the fly (extents stored
  // with another codec, partial extents, holes): the codec defaults.
  int broccoli_quality = codec::codec_options{}.broccoli_quality;
  int broccoli_window = codec::codec_options{}.broccoli_window;
  // br: the joined stream is built in memory (the pieces, then the join).
  // Refuse (store_error EFBIG) once the pieces exceed this many bytes; 0 is
  // no limit. The daemon sets one so that one export cannot take the
  // mount's memory.
  std::uint64_t max_br_bytes = 0;
};

// One piece of a file, in file order, for exports that reuse stored
// encodings (export_file's br, czip pack from a densefs file).
struct file_piece {
  enum class kind {
    hole,    // `length` zero bytes without an extent (`bytes` empty)
    plain,   // an extent's plain bytes
    stored,  // an extent that is a whole chunk, its stored bytes as they are
  };
  kind what = kind::hole;
  std::uint64_t offset = 0;  // in the file
  std::uint64_t length = 0;  // plain bytes covered
  std::string bytes;
  // stored: the chunk's name (SHA-256 of its plain bytes, store/hash.h)
  // and the codec of `bytes` (decode_chunk(codec, bytes, length)).
  chunk_hash hash;
  codec::codec_id codec = codec::codec_id::raw;
};

// Walks regular file `ino` from 0 to its size in order: a hole piece for
// each range without an extent (however long), and for each extent either
// its plain bytes or, when the extent covers a whole chunk whose stored
// codec `reuse` accepts (an empty `reuse` accepts none), the chunk's
// stored bytes (XXH3 checked). One chunk
// in memory at a time. Throws store_error as export_file does.
void walk_file(const store& s, std::uint64_t ino, const std::function<bool(codec::codec_id)>& reuse,
               const std::function<void(file_piece&)>& fn);

// Resolves an absolute path inside the store ("/dir/file") to an inode
// number through the directory entries from the root. Symlinks are not
// followed. Throws store_error: ENOENT, ENOTDIR, EINVAL (relative path).
std::uint64_t resolve_path(const store& s, std::string_view path);

// Writes the content of regular file `ino` to `sink`. identity: plain bytes,
// streamed a chunk at a time. br: one Brotli stream (stock `brotli -d`
// decodes it to the file): every extent that uses a whole chunk stored as
// Broccoli is copied as stored; everything else is compressed with
// Broccoli, and the pieces are joined by codec::concat_broccoli. The joined
// stream is built in memory (about the file's Brotli size) and given to
// the sink at the end. Throws store_error (ENOENT: no such inode, EISDIR /
// EINVAL: not a regular file, EIO: a chunk failed its checks, EFBIG: over
// options.max_br_bytes) or codec_error.
export_summary export_file(const store& s, std::uint64_t ino, export_encoding encoding,
                           const std::function<void(std::string_view)>& sink,
                           const export_options& options = {});

}  // namespace densefs::store
