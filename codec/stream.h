// Standalone streams: files in a codec's own format (`densefs codec
// compress`, `densefs cat --encoding=br`), as opposed to stored chunks.
// Unlike encode_chunk() there is no "not worth it" fallback to raw and no
// fallback to zstd: the caller asked for this format, so it gets it or an
// error.
#pragma once

#include <string>
#include <string_view>

#include "codec/codec.h"

namespace densefs::codec {

// Encodes `plain` with `codec` (options from `options`: zstd_level,
// broccoli_quality, broccoli_window) even when that saves nothing (random
// data grows by a few bytes). Lepton and Broccoli encodings are decoded and
// compared before they are returned (verify before admit). Throws
// codec_error when the codec cannot take the input (Lepton: not a JPEG it
// accepts) or the encoding does not verify. Raw returns `plain`.
std::string encode_stream_piece(codec_id codec, std::string_view plain,
                                const codec_options& options);

}  // namespace densefs::codec
