// Chunk codecs: pure transforms from plain bytes to stored bytes and back.
// No I/O here. Encoders and decoders are separable: a reader needs only
// decode_chunk() and the codec id that was persisted with the chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::codec {

// Codec ids are persisted with every chunk record: these numbers are frozen.
// Never renumber; only append. A reader that meets an unknown id fails with
// a clear error instead of guessing.
enum class codec_id : std::uint8_t {
  raw = 0,
  zstd = 1,
  broccoli = 2,  // Dropbox's catable Brotli (Rust `brotli` crate, codec/rust/)
  lepton = 3,    // lossless JPEG recompression (Rust `lepton_jpeg`, codec/rust/)
  deflate = 4,   // lossless gzip recompression (Rust `preflate-rs`, codec/rust/)
  // A JPEG of several chunks as one Lepton encoding (codec/lepton_file.h):
  // the first chunk's payload holds the whole file, each later chunk's
  // payload names the first chunk. The store makes them per file (never
  // encode_chunk) and reads a member through its first chunk.
  lepton_file = 5,
  lepton_member = 6,
};
// One more than the largest id: the size of per-codec tables.
inline constexpr std::size_t k_codec_count = 7;

// The two payload kinds of a Lepton file: not selectable in a codec spec.
inline bool is_lepton_file_codec(codec_id id) {
  return id == codec_id::lepton_file || id == codec_id::lepton_member;
}

// "raw", "zstd", ...; "unknown(N)" for ids this build does not know.
std::string codec_name(codec_id id);
std::optional<codec_id> codec_from_name(std::string_view name);
bool is_known_codec(std::uint8_t id);

// Thrown by encoders and decoders: corrupt input, size mismatch, unknown id,
// bad option. The message says what and, where known, which codec.
class codec_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the writer does with plain chunk data. Defaults are the mount defaults.
struct codec_options {
  codec_id preferred = codec_id::zstd;
  int zstd_level = 3;  // 1..19 (negative fast levels allowed down to -7)
  // Broccoli (spec keys quality=, window=): brotli quality 0..11 and log2 of
  // the window 10..24. Quality 5 with a 4 MiB window is within a few percent
  // of brotli -q 9 on text at six times the speed (FIELD-NOTES).
  int broccoli_quality = 5;
  int broccoli_window = 22;
  // A chunk is stored raw unless its codec saves at least this fraction:
  // decoding costs CPU on every read, so a 1% saving is not worth it.
  double min_savings = 0.03;
};

// Parses a strict option spec such as "zstd", "zstd:level=9", "raw".
// Unknown codecs or keys throw codec_error naming the offending token.
codec_options parse_codec_spec(std::string_view spec);
std::string format_codec_spec(const codec_options& options);

struct encoded_chunk {
  codec_id codec = codec_id::raw;
  std::string bytes;  // what is stored
  // Set when options.preferred could not take this chunk (Lepton rejected the
  // JPEG, or an encoding failed its verification) and a fallback codec was
  // used instead; `fallback_reason` says why, for the log and the counters.
  std::optional<codec_id> fell_back_from;
  std::string fallback_reason;
};

// Encodes with options.preferred and falls back to raw when the saving is
// below options.min_savings ("not worth it"). Thread-safe; reuses
// per-thread compression contexts.
//
// Verify before admit: every Lepton, Deflate and Broccoli encoding is decoded and
// compared with `plain` before it is returned. When the preferred codec
// rejects the chunk or its encoding does not verify, the chunk is encoded
// with zstd at options.zstd_level instead (then the raw guard applies) and
// fell_back_from says so. Lepton takes only chunks that start with a JPEG
// SOI marker, Deflate only chunks that start with a gzip header; other
// chunks fall back to zstd without an encode attempt.
encoded_chunk encode_chunk(std::string_view plain, const codec_options& options);

// Decodes a standalone stream whose plain size is not known in advance (a
// file made by `densefs codec compress`: concatenated zstd frames, a Broccoli
// or plain Brotli stream, a Lepton file). Fails with codec_error instead of
// producing more than max_plain_size bytes. For raw, returns `stored`.
std::string decode_any_size(codec_id codec, std::string_view stored, std::size_t max_plain_size);

// Joins Broccoli streams (each one a complete stored broccoli chunk) into
// one valid Brotli stream that stock `brotli -d` decodes to the
// concatenation of their plain contents. Costs O(number of pieces) plus a
// copy: no recompression. Throws codec_error if a piece is not a catable
// Broccoli stream.
std::string concat_broccoli(const std::vector<std::string_view>& pieces);

// Lepton encodes and decodes one JPEG with up to this many threads of its
// own (default 1; densefs parallelises across chunks instead).
void set_lepton_threads(unsigned threads);

// Decodes stored bytes into exactly plain_size bytes. The input is untrusted:
// any corruption, a wrong output size or an unknown codec id throws
// codec_error; wrong bytes are never returned. Memory is bounded by
// plain_size (the caller bounds that: chunks are at most 4 MiB).
std::string decode_chunk(codec_id codec, std::string_view stored, std::size_t plain_size);

}  // namespace densefs::codec
