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

namespace densefs::codec {

// Codec ids are persisted with every chunk record: these numbers are frozen.
// Never renumber; only append. A reader that meets an unknown id fails with
// a clear error instead of guessing.
enum class codec_id : std::uint8_t {
  raw = 0,
  zstd = 1,
  broccoli = 2,  // reserved for the codecs issue
  lepton = 3,    // reserved for the codecs issue
};

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
  codec_id preferred = codec_id::zstd;  // zstd or raw for now
  int zstd_level = 3;                   // 1..19 (negative fast levels allowed down to -7)
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
};

// Encodes with options.preferred and falls back to raw when the saving is
// below options.min_savings ("not worth it"). Thread-safe; reuses
// per-thread compression contexts.
encoded_chunk encode_chunk(std::string_view plain, const codec_options& options);

// Decodes stored bytes into exactly plain_size bytes. The input is untrusted:
// any corruption, a wrong output size or an unknown codec id throws
// codec_error; wrong bytes are never returned. Memory is bounded by
// plain_size (the caller bounds that: chunks are at most 4 MiB).
std::string decode_chunk(codec_id codec, std::string_view stored, std::size_t plain_size);

}  // namespace densefs::codec
