// Exports (see export.h): a file's extents walked in order, holes as zeros,
// Broccoli chunks reused as stored for br.
#include "store/export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "codec/stream.h"
#include "store/store.h"

namespace densefs::store {
namespace {

// Plain bytes are handed on (identity) or compressed (br) in pieces of at
// most one chunk: bounded memory, and the same piece size the store uses.
constexpr std::size_t k_piece_size = k_chunk_size;

class exporter {
 public:
  exporter(export_encoding encoding, const std::function<void(std::string_view)>& sink,
           const export_options& options)
      : encoding_(encoding), sink_(sink), max_br_bytes_(options.max_br_bytes) {
    codec_.preferred = codec::codec_id::broccoli;
    codec_.broccoli_quality = options.broccoli_quality;
    codec_.broccoli_window = options.broccoli_window;
  }

  void plain(std::string_view bytes) {
    if (encoding_ == export_encoding::identity) {
      emit(bytes);
      return;
    }
    while (!bytes.empty()) {
      const std::size_t take = std::min(bytes.size(), k_piece_size - pending_.size());
      pending_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (pending_.size() == k_piece_size) encode_pending();
    }
  }

  void zeros(std::uint64_t n) {
    if (encoding_ == export_encoding::br) {
      // Fill the current piece, then reuse one encoding of a whole piece of
      // zeros: a sparse 100 GiB file costs one compression, not 25,600.
      if (!pending_.empty()) {
        const std::size_t take =
            static_cast<std::size_t>(std::min<std::uint64_t>(n, k_piece_size - pending_.size()));
        plain(std::string(take, '\0'));
        n -= take;
      }
      while (n >= k_piece_size) {
        if (zero_piece_.empty()) {
          zero_piece_ = codec::encode_stream_piece(codec::codec_id::broccoli,
                                                   std::string(k_piece_size, '\0'), codec_);
        }
        push(zero_piece_);
        ++summary_.encoded_pieces;
        n -= k_piece_size;
      }
    }
    const std::string block(static_cast<std::size_t>(std::min<std::uint64_t>(n, k_piece_size)),
                            '\0');
    while (n > 0) {
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, block.size()));
      plain(std::string_view(block).substr(0, take));
      n -= take;
    }
  }

  // br only: a complete stored Broccoli stream, copied as it is.
  void stored_piece(std::string bytes) {
    if (!pending_.empty()) encode_pending();
    push(std::move(bytes));
    ++summary_.reused_pieces;
  }

  export_summary finish() {
    if (encoding_ == export_encoding::br) {
      // An empty file is one empty Brotli stream.
      if (!pending_.empty() || pieces_.empty()) encode_pending();
      std::vector<std::string_view> views(pieces_.begin(), pieces_.end());
      summary_.pieces = pieces_.size();
      const std::string joined = codec::concat_broccoli(views);
      pieces_.clear();
      emit(joined);
    }
    return summary_;
  }

  export_summary& summary() { return summary_; }

 private:
  void emit(std::string_view bytes) {
    if (bytes.empty()) return;
    sink_(bytes);
    summary_.bytes_out += bytes.size();
  }

  void encode_pending() {
    push(codec::encode_stream_piece(codec::codec_id::broccoli, pending_, codec_));
    ++summary_.encoded_pieces;
    pending_.clear();
  }

  void push(std::string piece) {
    pieces_bytes_ += piece.size();
    if (max_br_bytes_ != 0 && pieces_bytes_ > max_br_bytes_) {
      throw store_error(EFBIG, "a br export of this file needs more than " +
                                   std::to_string(max_br_bytes_ >> 20) +
                                   " MiB of memory here (densefs cat --store on the unmounted "
                                   "store has no limit)");
    }
    pieces_.push_back(std::move(piece));
  }

  export_encoding encoding_;
  const std::function<void(std::string_view)>& sink_;
  codec::codec_options codec_;
  std::string pending_;              // br: plain bytes not yet compressed
  std::vector<std::string> pieces_;  // br: Broccoli streams to join
  std::string zero_piece_;           // br: the encoding of one piece of zeros
  export_summary summary_;
  std::uint64_t max_br_bytes_;
  std::uint64_t pieces_bytes_ = 0;
};

}  // namespace

std::optional<export_encoding> export_encoding_from_name(std::string_view name) {
  if (name == "identity") return export_encoding::identity;
  if (name == "br") return export_encoding::br;
  return std::nullopt;
}

std::uint64_t resolve_path(const store& s, std::string_view path) {
  if (path.empty() || path.front() != '/') {
    throw store_error(EINVAL, "path '" + std::string(path) + "' is not absolute");
  }
  std::uint64_t ino = k_root_ino;
  std::string walked;
  while (!path.empty()) {
    const auto slash = path.find('/');
    const std::string_view name = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    if (name.empty() || name == ".") continue;
    const auto dir = s.get_inode(ino);
    if (!dir) throw store_error(ENOENT, (walked.empty() ? "/" : walked) + ": no such inode");
    if (!S_ISDIR(dir->mode)) throw store_error(ENOTDIR, walked + ": not a directory");
    if (name == "..") {
      ino = dir->parent;
      walked += "/..";
      continue;
    }
    walked += "/";
    walked += name;
    const auto entry = s.get_dirent(ino, name);
    if (!entry) throw store_error(ENOENT, walked + ": no such file or directory");
    ino = entry->ino;
  }
  return ino;
}

void walk_file(const store& s, std::uint64_t ino, const std::function<bool(codec::codec_id)>& reuse,
               const std::function<void(file_piece&)>& fn) {
  const auto record = s.get_inode(ino);
  const std::string what = "inode " + std::to_string(ino);
  if (!record) throw store_error(ENOENT, what + ": no such file");
  if (S_ISDIR(record->mode)) throw store_error(EISDIR, what + " is a directory");
  if (!S_ISREG(record->mode)) throw store_error(EINVAL, what + " is not a regular file");

  const std::uint64_t size = record->size;
  std::uint64_t pos = 0;
  const auto hole = [&](std::uint64_t end) {
    if (end <= pos) return;
    file_piece p;
    p.offset = pos;
    p.length = end - pos;
    fn(p);
  };
  for (const auto& [offset, extent] : s.extents(ino, 0, size)) {
    if (offset < pos || offset >= size) continue;  // never overlaps; be safe
    hole(offset);
    const std::uint64_t length = std::min<std::uint64_t>(extent.length, size - offset);
    file_piece p;
    p.offset = offset;
    p.length = length;
    if (reuse && extent.chunk_offset == 0 && length == extent.length) {
      // The record first (metadata only), so chunks of other codecs are
      // fetched once, decoded, below. The stored record is checked again: a
      // background re-encoding may have swapped the payload in between.
      const auto chunk = s.get_chunk(extent.hash);
      // A Lepton file's payloads hold other chunks too (and a member holds
      // none of its own bytes): never reused as one chunk's encoding.
      if (chunk && chunk->plain_size == length && !codec::is_lepton_file_codec(chunk->codec) &&
          reuse(chunk->codec)) {
        auto stored = s.read_stored_chunk(extent.hash);
        if (stored.record.plain_size == length &&
            !codec::is_lepton_file_codec(stored.record.codec) && reuse(stored.record.codec)) {
          p.what = file_piece::kind::stored;
          p.bytes = std::move(stored.bytes);
          p.hash = extent.hash;
          p.codec = stored.record.codec;
        }
      }
    }
    if (p.what != file_piece::kind::stored) {
      const auto chunk = s.read_chunk(extent.hash);
      if (chunk->size() < std::uint64_t{extent.chunk_offset} + length) {
        throw store_error(EIO, what + ": extent at " + std::to_string(offset) +
                                   " reaches past the end of chunk " + extent.hash.hex());
      }
      p.what = file_piece::kind::plain;
      p.bytes.assign(std::string_view(*chunk).substr(extent.chunk_offset, length));
    }
    fn(p);
    pos = offset + length;
  }
  hole(size);
}

export_summary export_file(const store& s, std::uint64_t ino, export_encoding encoding,
                           const std::function<void(std::string_view)>& sink,
                           const export_options& options) {
  exporter out(encoding, sink, options);
  std::function<bool(codec::codec_id)> reuse;  // identity: nothing to reuse
  if (encoding == export_encoding::br)
    reuse = [](codec::codec_id c) { return c == codec::codec_id::broccoli; };
  walk_file(s, ino, reuse, [&](file_piece& p) {
    out.summary().size = p.offset + p.length;
    switch (p.what) {
      case file_piece::kind::hole:
        out.zeros(p.length);
        break;
      case file_piece::kind::plain:
        out.plain(p.bytes);
        break;
      case file_piece::kind::stored:
        out.stored_piece(std::move(p.bytes));
        break;
    }
  });
  return out.finish();
}

}  // namespace densefs::store
