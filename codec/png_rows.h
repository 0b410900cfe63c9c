// Private to codec/: a PNG image's filtered scanlines (the plain text of
// its IDAT stream) stored as pixels in lossless JPEG XL, and rebuilt
// exactly. The deflate codec (deflate_codec.cpp) uses it for the plain text
// that codec/rust marks as PNG rows; preflate-rs then rebuilds the deflate
// stream from the rows, so the PNG comes back bit for bit.
//
// Packed layout (docs/format.md, "Deflate payloads, version 2"): the filter
// type of every row (all one type: one byte; else raw or a zstd frame),
// then a bare JPEG XL codestream of the unfiltered samples: one channel for
// grey and palette indices (1, 2 and 4-bit samples widened to a byte each),
// three for RGB, plus alpha; 16-bit samples stay 16-bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace densefs::codec::detail {

// What the PNG's IHDR says, as far as the rows need it.
struct png_image_header {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::uint8_t depth = 0;  // bits per sample: 1, 2, 4, 8, 16
  std::uint8_t color = 0;  // PNG colour type: 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA
};

// The length of the filtered scanlines of such an image (a filter byte per
// row, no interlacing: codec/rust only marks non-interlaced images' rows),
// or nothing when the header is not a valid PNG's or the rows would be
// longer than `max_rows`.
std::optional<std::size_t> png_rows_size(const png_image_header& h, std::size_t max_rows);

// The rows packed, or nothing when this coder does not take them (a filter
// type above 4, padding bits that are not zero, an image too large to
// encode in bounded time and memory, a packing no smaller than the rows).
// The result is decoded and compared before it is returned.
std::optional<std::string> png_rows_encode(std::string_view rows, const png_image_header& h);

// Exactly the rows back, or codec_error: the input is untrusted, and the
// image's size is checked against `h` before any pixel buffer exists.
std::string png_rows_decode(std::string_view packed, const png_image_header& h);

}  // namespace densefs::codec::detail
