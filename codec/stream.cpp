// Standalone stream pieces: the requested codec without the raw guard.
#include "codec/stream.h"

#include "codec/codec_impl.h"

namespace densefs::codec {

std::string encode_stream_piece(codec_id codec, std::string_view plain,
                                const codec_options& options) {
  if (codec == codec_id::raw) return std::string(plain);
  if (plain.size() > detail::k_max_plain_size) {
    throw codec_error("piece of " + std::to_string(plain.size()) + " bytes is too large to encode");
  }
  const auto& c = detail::find_or_throw(codec);
  std::string out;
  // No "worth it" limit: just a bound every codec's worst case fits in
  // (incompressible input grows by well under 1% in zstd and brotli). It is
  // also the output buffer zstd allocates.
  const std::size_t bound = plain.size() + plain.size() / 8 + (64u << 10);
  if (!c.encode(plain, options, bound, out)) {
    throw codec_error(std::string(c.name()) + " cannot encode this input");
  }
  if (codec != codec_id::zstd) {
    // Verify before admit (FIELD-NOTES: lepton_jpeg can silently produce an
    // encoding that decodes to different bytes).
    if (decode_chunk(codec, out, plain.size()) != plain) {
      throw codec_error(std::string(c.name()) + " encoding did not decode to the input");
    }
  }
  return out;
}

}  // namespace densefs::codec
