// PNG pictures in the deflate codec (codec/png_rows.h): PNG files of every
// colour type and bit depth, with every filter type, made here with zlib,
// come back byte-exact through lossless JPEG XL; what JPEG XL cannot take
// exactly stays text; PNG and JPEG members of a zip get their coders; a
// corrupt version-2 payload gives codec_error or the exact size; and the
// encoder's child process (codec/isolated_call.h) keeps a crash, a hang or
// the daemon's descriptors away from the caller.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>

#include "codec/codec.h"
#include "codec/isolated_call.h"
#include "tests/make_jpeg.h"
#include "tests/temp_dir.h"
#include "tests/zlib_deflate.h"

namespace densefs::codec {
namespace {

std::string be32(std::uint32_t v) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(v >> shift));
  return s;
}

std::string png_chunk(std::string_view type, std::string_view data) {
  const std::string body = std::string(type) + std::string(data);
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
  return be32(static_cast<std::uint32_t>(data.size())) + body + be32(crc);
}

struct image {
  std::uint32_t width = 0, height = 0;
  int depth = 8, color = 2;
  std::string rows;  // unfiltered scanlines, back to back, no filter bytes

  int channels() const { return color == 2 ? 3 : color == 4 ? 2 : color == 6 ? 4 : 1; }
  std::size_t row_bytes() const { return (std::size_t{width} * channels() * depth + 7) / 8; }
  std::size_t unit() const { return std::max<std::size_t>(1, channels() * depth / 8); }
};

// A smooth picture with a little noise (what screenshots and UI art look
// like to a coder), samples within the depth's range, padding bits zero.
image smooth_image(std::uint32_t w, std::uint32_t h, int depth, int color, std::uint32_t seed) {
  image im{w, h, depth, color, {}};
  std::mt19937 rng(seed);
  const unsigned max = (1u << std::min(depth, 16)) - 1;
  im.rows.assign(im.row_bytes() * h, '\0');
  for (std::uint32_t y = 0; y < h; ++y) {
    auto* row = reinterpret_cast<std::uint8_t*>(im.rows.data() + y * im.row_bytes());
    std::size_t bit = 0;
    for (std::uint32_t x = 0; x < w; ++x) {
      for (int c = 0; c < im.channels(); ++c, bit += depth) {
        // Few levels (1, 2, 4 bits): shapes, as in icons and line art.
        const unsigned v =
            depth < 8
                ? ((x / 9 + (y / 7) * 3 + (x * y) / 97) & max) ^ (rng() % 29 == 0)
                : std::min<unsigned>(max, (x * 3 + y * 2 + c * 40) * max / (3 * w + 2 * h + 160) +
                                              (rng() % 3 == 0 ? rng() % (max / 16 + 1) : 0));
        if (depth == 16) {
          row[bit / 8] = static_cast<std::uint8_t>(v >> 8);
          row[bit / 8 + 1] = static_cast<std::uint8_t>(v);
        } else if (depth == 8) {
          row[bit / 8] = static_cast<std::uint8_t>(v);
        } else {
          row[bit / 8] |= static_cast<std::uint8_t>(v << (8 - depth - bit % 8));
        }
      }
    }
  }
  return im;
}

// RFC 2083's filters, written apart from the codec's: row y gets filter
// type filter_of(y).
std::string filtered(const image& im, int (*filter_of)(std::uint32_t)) {
  std::string out;
  const std::size_t n = im.row_bytes(), bpp = im.unit();
  const std::string zero(n, '\0');
  for (std::uint32_t y = 0; y < im.height; ++y) {
    const auto* cur = reinterpret_cast<const std::uint8_t*>(im.rows.data() + y * n);
    const auto* up =
        reinterpret_cast<const std::uint8_t*>(y == 0 ? zero.data() : im.rows.data() + (y - 1) * n);
    const int f = filter_of(y);
    out.push_back(static_cast<char>(f));
    for (std::size_t i = 0; i < n; ++i) {
      const int a = i >= bpp ? cur[i - bpp] : 0, b = up[i], c = i >= bpp ? up[i - bpp] : 0;
      int pred = 0;
      if (f == 1) pred = a;
      if (f == 2) pred = b;
      if (f == 3) pred = (a + b) / 2;
      if (f == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      out.push_back(static_cast<char>(cur[i] - pred));
    }
  }
  return out;
}

int every_filter(std::uint32_t y) {
  return static_cast<int>(y % 5);
}

std::string png_file(const image& im, std::string_view filtered_rows, int interlace = 0) {
  std::string ihdr = be32(im.width) + be32(im.height);
  ihdr += static_cast<char>(im.depth);
  ihdr += static_cast<char>(im.color);
  ihdr += std::string("\0\0", 2);
  ihdr += static_cast<char>(interlace);
  std::string png = "\x89PNG\r\n\x1a\n" + png_chunk("IHDR", ihdr);
  if (im.color == 3) {
    std::string plte;
    for (int i = 0; i < (1 << im.depth); ++i) plte += std::string(3, static_cast<char>(i * 7));
    png += png_chunk("PLTE", plte);
  }
  png += png_chunk("tEXt", std::string("Comment\0kept as it is", 21));
  const std::string z = test::zlib_deflate(filtered_rows, 9, 15);
  for (std::size_t at = 0; at < z.size(); at += 8192) {
    png += png_chunk("IDAT", std::string_view(z).substr(at, 8192));
  }
  return png + png_chunk("IEND", "");
}

codec_options deflate_options() {
  codec_options o;
  o.preferred = codec_id::deflate;
  o.min_savings = 0;
  return o;
}

// The payload version (docs/format.md "Deflate payloads"): 2 when a
// picture's range has its own coder.
int payload_version(const encoded_chunk& e) {
  return e.codec == codec_id::deflate && !e.bytes.empty() ? static_cast<std::uint8_t>(e.bytes[0])
                                                          : 0;
}

TEST(png_rows, every_colour_type_and_depth_round_trips_through_jpeg_xl) {
  const std::pair<int, int> kinds[] = {{0, 1}, {0, 2},  {0, 4},  {0, 8}, {0, 16},
                                       {2, 8}, {2, 16}, {3, 1},  {3, 2}, {3, 4},
                                       {3, 8}, {4, 8},  {4, 16}, {6, 8}, {6, 16}};
  std::uint32_t seed = 1;
  for (const auto& [color, depth] : kinds) {
    // An odd width: sub-byte rows end in padding bits.
    const image im = smooth_image(167, 95, depth, color, seed++);
    const std::string png = png_file(im, filtered(im, every_filter));
    const encoded_chunk e = encode_chunk(png, deflate_options());
    const std::string what = "colour type " + std::to_string(color) + ", depth " +
                             std::to_string(depth) + ": " + e.fallback_reason;
    EXPECT_EQ(payload_version(e), 2) << what;
    EXPECT_LT(e.bytes.size(), png.size()) << what;
    EXPECT_EQ(decode_chunk(e.codec, e.bytes, png.size()), png) << what;
  }
}

TEST(png_rows, colours_under_transparent_pixels_are_kept) {
  image im = smooth_image(64, 40, 8, 6, 9);
  std::mt19937 rng(3);
  for (std::size_t i = 0; i < im.rows.size(); i += 4) {
    if (i % 12 != 0) continue;
    for (int c = 0; c < 3; ++c) im.rows[i + c] = static_cast<char>(rng());
    im.rows[i + 3] = '\0';  // invisible: an image coder may drop its colour
  }
  const std::string png = png_file(im, filtered(im, every_filter));
  const encoded_chunk e = encode_chunk(png, deflate_options());
  EXPECT_EQ(payload_version(e), 2) << e.fallback_reason;
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, png.size()), png);
}

TEST(png_rows, rows_the_image_coder_cannot_give_back_stay_text) {
  // Padding bits that are not zero (PNG leaves them unspecified).
  image padded = smooth_image(167, 95, 4, 0, 5);
  for (std::uint32_t y = 0; y < padded.height; ++y) {
    padded.rows[(y + 1) * padded.row_bytes() - 1] |= 0x05;
  }
  // A filter type PNG does not have, and an interlaced image.
  const image plain = smooth_image(150, 90, 8, 2, 6);
  std::string bad_filter = filtered(plain, every_filter);
  bad_filter[0] = '\x07';
  for (const std::string& png :
       {png_file(padded, filtered(padded, every_filter)), png_file(plain, bad_filter),
        png_file(plain, filtered(plain, every_filter), 1)}) {
    const encoded_chunk e = encode_chunk(png, deflate_options());
    // Version 1 (all text), or another codec when the text saves nothing.
    EXPECT_NE(payload_version(e), 2);
    EXPECT_EQ(decode_chunk(e.codec, e.bytes, png.size()), png);
  }
}

std::string le(std::uint32_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

std::string zip_entry(std::string_view name, std::string_view data, bool deflated) {
  const std::string stored = deflated ? test::zlib_deflate(data, 6, -15) : std::string(data);
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(data.data()), data.size()));
  return "PK\x03\x04" + le(20, 2) + le(0, 2) + le(deflated ? 8 : 0, 2) + le(0, 4) + le(crc, 4) +
         le(static_cast<std::uint32_t>(stored.size()), 4) +
         le(static_cast<std::uint32_t>(data.size()), 4) +
         le(static_cast<std::uint32_t>(name.size()), 2) + le(0, 2) + std::string(name) + stored;
}

TEST(png_rows, pictures_inside_a_zip_get_their_own_coders) {
  const image a = smooth_image(120, 80, 8, 6, 11), b = smooth_image(90, 70, 8, 2, 12);
  std::string zip = zip_entry("content.xml", std::string(2000, 'x') + "<office/>", true);
  zip += zip_entry("Pictures/stored.png", png_file(a, filtered(a, every_filter)), false);
  zip += zip_entry("Pictures/deflated.png", png_file(b, filtered(b, every_filter)), true);
#ifdef DENSEFS_HAVE_LIBJPEG
  zip += zip_entry("Pictures/photo.jpg", test::make_jpeg(160, 120, 85, 4), true);
#endif
  zip += "PK\x01\x02" + std::string(42, '\0') + "PK\x05\x06" + std::string(18, '\0');
  const encoded_chunk e = encode_chunk(zip, deflate_options());
  EXPECT_EQ(payload_version(e), 2) << e.fallback_reason;
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, zip.size()), zip);
  // The same zip with every coder but text: the pictures' coders save.
  codec_options zstd_only;
  zstd_only.zstd_level = 19;
  EXPECT_LT(e.bytes.size(), encode_chunk(zip, zstd_only).bytes.size());
}

TEST(png_rows, corrupt_payloads_throw_or_keep_the_size) {
  const image im = smooth_image(40, 30, 8, 6, 21);
  const std::string png = png_file(im, filtered(im, every_filter));
  const encoded_chunk e = encode_chunk(png, deflate_options());
  ASSERT_EQ(payload_version(e), 2) << e.fallback_reason;
  for (std::size_t cut = 0; cut < e.bytes.size(); cut += 3) {
    try {
      EXPECT_EQ(decode_chunk(codec_id::deflate, e.bytes.substr(0, cut), png.size()).size(),
                png.size());
    } catch (const codec_error&) {
    }
  }
  for (std::size_t i = 0; i < e.bytes.size(); i += 3) {
    for (const char x : {'\x01', '\x5a', '\xff'}) {
      std::string bad = e.bytes;
      bad[i] = static_cast<char>(bad[i] ^ x);
      try {
        EXPECT_EQ(decode_chunk(codec_id::deflate, bad, png.size()).size(), png.size());
      } catch (const codec_error&) {
      }
    }
  }
}

// A version-2 payload (docs/format.md, "Deflate payloads") of a 12 x 10
// RGBA PNG made by this build: whatever later builds write, this must keep
// decoding to the same PNG.
constexpr std::string_view k_golden_png_payload_hex =
    "020085014c4289504e470d0a1a0a0000000d494844520000000c0000000a0806000000802cbffa00"
    "00001574455874436f6d6d656e74006b65707420617320697420697393c24e974901ab0394a3e21f"
    "4c0278da44ea031d0001040a000408010300ff010002a5010004020403040004000705d8724c0422"
    "2989334c0c0000000049454e44ae4260820101ea030c0a0806a0020000010203040001020304ff0a"
    "4820b0120808100024044b2834b8ec5741ba06839298672051c7781723a322898813151b114dd3a2"
    "ee7c5018759268ea1a159dd6800194241fc08e201e8a90c6152c09e2bea0a4b4ea86ab5424f072b4"
    "2eb5c852dd3a219918d79ff5d6c62a699444ad97e719329b3a4152c039b32432633336ccd12805bc"
    "9f07a9a4aa3303b93424e93024954d846798e33cab8fa941e220e8d3db078a754a02277df4adbe43"
    "097414b40c28b360664b6f52e8427283448fd5083fb556dc0b4a2db70b88950c67e0b90a01818560"
    "e21801960e5f57e4c22b889f989aa5815d26cdabf62e789b993212062251e32cda72a9314a4a6fea"
    "5577e2e70589bdf5cb80a15ed0e69719cd8536b5187a351ba70becaabc4fd00f40a72b00";

TEST(png_rows, golden_payload_decodes) {
  using test::from_hex;
  using test::to_hex;
  const image im = smooth_image(12, 10, 8, 6, 77);
  const std::string png = png_file(im, filtered(im, every_filter));
  const encoded_chunk e = encode_chunk(png, deflate_options());
  ASSERT_EQ(payload_version(e), 2) << e.fallback_reason;
  ASSERT_EQ(decode_chunk(e.codec, e.bytes, png.size()), png);
  try {
    EXPECT_EQ(decode_chunk(codec_id::deflate, from_hex(k_golden_png_payload_hex), png.size()), png);
  } catch (const codec_error& err) {
    ADD_FAILURE() << err.what() << "; today's payload: " << to_hex(e.bytes);
  }
}

TEST(isolated_call, returns_what_the_child_returned_and_nothing_when_it_fails) {
  using detail::call_isolated;
  const std::chrono::seconds limit{30};
  EXPECT_EQ(
      call_isolated([] { return std::optional<std::string>(std::string(300000, 'z')); }, limit),
      std::string(300000, 'z'));
  EXPECT_EQ(call_isolated([] { return std::optional<std::string>(""); }, limit), "");
  EXPECT_EQ(call_isolated([] { return std::optional<std::string>(); }, limit), std::nullopt);
  EXPECT_EQ(call_isolated(
                []() -> std::optional<std::string> { throw std::runtime_error("encoder failed"); },
                limit),
            std::nullopt);
  // What libjxl does on some images: an illegal instruction.
  EXPECT_EQ(call_isolated([]() -> std::optional<std::string> { __builtin_trap(); }, limit),
            std::nullopt);
}

TEST(isolated_call, a_child_that_hangs_is_killed_at_its_deadline) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(detail::call_isolated(
                [] {
                  std::this_thread::sleep_for(std::chrono::seconds(60));
                  return std::optional<std::string>("late");
                },
                std::chrono::seconds(1)),
            std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(isolated_call, the_child_holds_none_of_the_callers_descriptors) {
  // Far above the descriptors the child moves its pipe to.
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null, 0);
  const int fd = ::fcntl(null, F_DUPFD_CLOEXEC, 200);
  ::close(null);
  ASSERT_GE(fd, 200);
  const auto state = detail::call_isolated(
      [fd] { return std::optional<std::string>(::fcntl(fd, F_GETFD) == -1 ? "closed" : "open"); },
      std::chrono::seconds(30));
  ::close(fd);
  EXPECT_EQ(state, "closed");
}

}  // namespace
}  // namespace densefs::codec
