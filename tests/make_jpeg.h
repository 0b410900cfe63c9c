// Photo-like JPEGs made at test time with libjpeg (libjpeg-dev), so tests
// of the Lepton paths need no corpus in the repository. Without libjpeg
// (DENSEFS_HAVE_LIBJPEG unset) the tests that need one skip.
#pragma once

#ifdef DENSEFS_HAVE_LIBJPEG
// clang-format off
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <jpeglib.h>
// clang-format on

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace densefs::test {

// A baseline JPEG of w x h pixels. The noise keeps it from compressing
// like a flat test card: sizes and Lepton savings are close to a photo's.
inline std::string make_jpeg(int w, int h, int quality, std::uint32_t seed) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  std::vector<unsigned char> row(3 * static_cast<std::size_t>(w));
  std::uint32_t s = seed;
  while (c.next_scanline < c.image_height) {
    const int y = static_cast<int>(c.next_scanline);
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < 3; ++k) {
        s = s * 1664525u + 1013904223u;
        const double v = 128 + 60 * std::sin(x * (0.01 + 0.003 * k) + y * 0.007) +
                         30 * std::cos((x + y * (k + 1)) * 0.05) + double((s >> 24) % 48) - 24;
        row[3 * x + k] = static_cast<unsigned char>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  jpeg_destroy_compress(&c);
  return out;
}

}  // namespace densefs::test
#endif
