// The deflate codec through the codec API: real gzip files round-trip
// byte-exact (the man pages of this machine, multi-member files, every
// optional header field), hostile input (a gzip bomb, a truncated stream,
// not gzip at all) falls back with a reason instead of failing or running
// away, corrupt payloads give codec_error or the exact size, and a golden
// payload of docs/format.md still decodes.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "tests/temp_dir.h"
#include "tests/test_env.h"
#include "tests/zlib_deflate.h"

namespace densefs::codec {
namespace {

namespace fs = std::filesystem;
using densefs::test::from_hex;
using densefs::test::gzip_with_zlib;
using densefs::test::to_hex;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every `step`-th regular .gz file under `dir`, sorted: the same sample on
// every run of one machine.
std::vector<fs::path> gz_files(const fs::path& dir, std::size_t step, std::size_t max) {
  std::vector<fs::path> all;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return all;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::end(it); it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec) && !it->is_symlink(ec) && it->path().extension() == ".gz")
      all.push_back(it->path());
  }
  std::sort(all.begin(), all.end());
  std::vector<fs::path> picked;
  for (std::size_t i = 0; i < all.size() && picked.size() < max; i += step)
    picked.push_back(all[i]);
  return picked;
}

codec_options deflate_options() {
  codec_options o;
  o.preferred = codec_id::deflate;
  return o;
}

// The deflate codec refuses `plain` with a reason that contains `why`, and
// the fallback stores it so that it decodes exactly.
void expect_falls_back(const std::string& plain, const std::string& why) {
  const encoded_chunk e = encode_chunk(plain, deflate_options());
  EXPECT_EQ(e.fell_back_from, codec_id::deflate);
  EXPECT_NE(e.fallback_reason.find(why), std::string::npos) << e.fallback_reason;
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, plain.size()), plain);
}

// A gzip file made with zlib, with whatever header fields `header` holds.
// Text that repeats beyond deflate's 32 KiB window, as a long manual
// repeats its phrases: zstd's larger window finds what gzip could not, so
// the deflate codec must save on it. `lines` distinct lines, each three
// times, in a shuffled order.
std::string sample_text(std::size_t lines) {
  std::mt19937 rng(7);
  const char* words[] = {"densefs", "stores", "chunks", "deflate", "stream", ".TH", ".SH",
                         "NAME",    "file",   "the",    "of",      "\\fB",   "and", "gzip"};
  std::vector<std::string> distinct;
  for (std::size_t i = 0; i < lines; ++i) {
    std::string line;
    const std::size_t n = 3 + rng() % 9;
    for (std::size_t w = 0; w < n; ++w) {
      line += words[rng() % std::size(words)];
      line += ' ';
    }
    distinct.push_back(line + std::to_string(rng() % 100000) + '\n');
  }
  std::vector<std::size_t> order;
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t i = 0; i < lines; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), rng);
  std::string s;
  for (const std::size_t i : order) s += distinct[i];
  return s;
}

void expect_round_trip(const std::string& gz, const std::string& what, bool expect_deflate) {
  const encoded_chunk e = encode_chunk(gz, deflate_options());
  if (expect_deflate) {
    EXPECT_EQ(e.codec, codec_id::deflate) << what << ": " << e.fallback_reason;
    EXPECT_LT(e.bytes.size(), gz.size()) << what;
  }
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, gz.size()), gz) << what;
  EXPECT_EQ(decode_any_size(e.codec, e.bytes, gz.size()), gz) << what;
}

TEST(deflate_codec, man_pages_round_trip_and_most_are_taken) {
  const auto files = gz_files("/usr/share/man", 50, 400);
  if (files.size() < 20) DENSEFS_SKIP_UNLESS_REQUIRED("too few .gz files under /usr/share/man");
  std::size_t taken = 0, gz_bytes = 0, stored_bytes = 0;
  for (const auto& f : files) {
    const std::string gz = read_file(f);
    const encoded_chunk e = encode_chunk(gz, deflate_options());
    ASSERT_EQ(decode_chunk(e.codec, e.bytes, gz.size()), gz) << f;
    if (e.codec == codec_id::deflate) {
      ++taken;
      gz_bytes += gz.size();
      stored_bytes += e.bytes.size();
    } else {
      // Not taken: stored with the fallback, and the reason says why.
      EXPECT_EQ(e.fell_back_from, codec_id::deflate) << f;
      EXPECT_FALSE(e.fallback_reason.empty()) << f;
    }
  }
  // Measured on Debian 12's man pages: ~97% taken, ~24% saved on those.
  EXPECT_GE(taken * 10, files.size() * 9) << taken << " of " << files.size();
  EXPECT_LT(stored_bytes * 10, gz_bytes * 9) << stored_bytes << " of " << gz_bytes;
}

TEST(deflate_codec, zlib_levels_and_header_fields_round_trip) {
  const std::string text = sample_text(3000);
  for (const int level : {1, 6, 9}) {
    expect_round_trip(gzip_with_zlib(text, level), "zlib level " + std::to_string(level), true);
  }
  // FEXTRA, FNAME, FCOMMENT and FHCRC: kept byte for byte.
  std::string extra = "AB\x04\x00xyzw";
  std::string name = "manual.1";
  std::string comment = "a comment";
  gz_header h{};
  h.time = 1234567;
  h.os = 3;
  h.extra = reinterpret_cast<Bytef*>(extra.data());
  h.extra_len = static_cast<uInt>(extra.size());
  h.name = reinterpret_cast<Bytef*>(name.data());
  h.comment = reinterpret_cast<Bytef*>(comment.data());
  h.hcrc = 1;
  const std::string gz = gzip_with_zlib(text, 9, &h);
  ASSERT_EQ(static_cast<unsigned char>(gz[3]), 0x1eu);  // all four flags set
  expect_round_trip(gz, "all header fields", true);
}

TEST(deflate_codec, multi_member_and_trailing_bytes_round_trip) {
  const std::string a = gzip_with_zlib(sample_text(500), 9);
  const std::string b = gzip_with_zlib(sample_text(800), 6);
  expect_round_trip(a + b, "two members", true);
  // Tape-style zero padding after the last member is kept too.
  expect_round_trip(a + b + std::string(1000, '\0'), "two members and padding", true);
}

TEST(deflate_codec, empty_and_tiny_streams_round_trip) {
  for (const std::string& plain : {std::string(), std::string("x"), std::string(100, 'a')}) {
    const std::string gz = gzip_with_zlib(plain, 9);
    const encoded_chunk e = encode_chunk(gz, deflate_options());
    EXPECT_EQ(decode_chunk(e.codec, e.bytes, gz.size()), gz) << plain.size();
  }
}

// A PNG as libpng lays it out: signature, IHDR, the zlib stream of the
// filtered scanlines cut into IDAT chunks of `idat_size` bytes, IEND.
std::string chunk(std::string_view type, std::string_view data) {
  std::string c;
  const auto n = static_cast<std::uint32_t>(data.size());
  for (int shift = 24; shift >= 0; shift -= 8) c.push_back(static_cast<char>(n >> shift));
  c.append(type);
  c.append(data);
  const std::string crc_input = std::string(type) + std::string(data);
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(crc_input.data()), crc_input.size()));
  for (int shift = 24; shift >= 0; shift -= 8) c.push_back(static_cast<char>(crc >> shift));
  return c;
}

std::string make_png(std::size_t idat_size) {
  const std::uint32_t w = 300, h = 200;
  std::string ihdr;
  for (const std::uint32_t v : {w, h})
    for (int shift = 24; shift >= 0; shift -= 8) ihdr.push_back(static_cast<char>(v >> shift));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB
  // Rows of a soft pattern with filter type 0, like a screenshot.
  std::string raw;
  for (std::uint32_t y = 0; y < h; ++y) {
    raw.push_back('\0');
    for (std::uint32_t x = 0; x < w; ++x) {
      raw.push_back(static_cast<char>((x / 10) * 7));
      raw.push_back(static_cast<char>((y / 10) * 11));
      raw.push_back(static_cast<char>(((x + y) / 25) * 13));
    }
  }
  // One zlib stream (window bits 15: deflateInit's), cut into IDAT chunks.
  const std::string zdata = densefs::test::zlib_deflate(raw, 6, 15);
  std::string png = "\x89PNG\r\n\x1a\n" + chunk("IHDR", ihdr);
  for (std::size_t at = 0; at < zdata.size(); at += idat_size)
    png += chunk("IDAT", std::string_view(zdata).substr(at, idat_size));
  return png + chunk("IEND", "");
}

TEST(deflate_codec, png_idat_streams_round_trip) {
  for (const std::size_t idat_size : {std::size_t{1} << 20, std::size_t{1000}, std::size_t{7}}) {
    const std::string png = make_png(idat_size);
    codec_options o = deflate_options();
    o.min_savings = 0;
    const encoded_chunk e = encode_chunk(png, o);
    EXPECT_EQ(e.codec, codec_id::deflate) << idat_size << ": " << e.fallback_reason;
    EXPECT_EQ(decode_chunk(e.codec, e.bytes, png.size()), png) << idat_size;
  }
}

TEST(deflate_codec, png_with_forged_lengths_falls_back) {
  std::string png = make_png(1000);
  // The first IDAT chunk (after the 8-byte signature and the 25-byte IHDR
  // chunk) claims 2 GiB.
  png[33] = '\x7f';
  expect_falls_back(png, "PNG refused");
  // Cut in the middle of the IDAT chunks.
  const std::string cut = make_png(1000).substr(0, 2000);
  const encoded_chunk c = encode_chunk(cut, deflate_options());
  EXPECT_EQ(c.fell_back_from, codec_id::deflate);
  EXPECT_EQ(decode_chunk(c.codec, c.bytes, cut.size()), cut);
}

// Raw deflate data (no zlib or gzip wrapper), as zip entries hold it.
std::string raw_deflate(std::string_view plain, int level) {
  return densefs::test::zlib_deflate(plain, level, -15);
}

std::string le(std::uint32_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

// A zip file: a deflated entry, a deflated entry with a data descriptor
// (sizes 0 in its local header), a stored entry, then a central directory
// (its contents are kept as they are, so a minimal one will do).
std::string make_zip() {
  const std::string a = sample_text(800), b = sample_text(500), c = "stored entry\n";
  const std::string da = raw_deflate(a, 9), db = raw_deflate(b, 6);
  const auto local = [](std::uint16_t flags, std::uint16_t method, std::uint32_t csize,
                        std::uint32_t usize, std::string_view name) {
    return "PK\x03\x04" + le(20, 2) + le(flags, 2) + le(method, 2) + le(0, 4) + le(0, 4) +
           le(csize, 4) + le(usize, 4) + le(static_cast<std::uint32_t>(name.size()), 2) + le(0, 2) +
           std::string(name);
  };
  std::string zip = local(0, 8, da.size(), a.size(), "a.txt") + da;
  zip += local(8, 8, 0, 0, "b.txt") + db + "PK\x07\x08" + le(0, 4) + le(db.size(), 4) +
         le(b.size(), 4);
  zip += local(0, 0, c.size(), c.size(), "c.txt") + c;
  zip += "PK\x01\x02" + std::string(42, '\0') + "PK\x05\x06" + std::string(18, '\0');
  return zip;
}

TEST(deflate_codec, zip_entries_round_trip) {
  const std::string zip = make_zip();
  const encoded_chunk e = encode_chunk(zip, deflate_options());
  EXPECT_EQ(e.codec, codec_id::deflate) << e.fallback_reason;
  EXPECT_LT(e.bytes.size(), zip.size());
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, zip.size()), zip);
  // A local header whose name length runs past the end: kept, refused.
  std::string bad = zip.substr(0, 40);
  bad[26] = '\xff';
  const encoded_chunk r = encode_chunk(bad, deflate_options());
  EXPECT_EQ(r.fell_back_from, codec_id::deflate);
  EXPECT_EQ(decode_chunk(r.codec, r.bytes, bad.size()), bad);
}

TEST(deflate_codec, a_zip_of_thousands_of_entries_stays_bounded) {
  // 5,000 tiny deflated entries: each one is a preflate call, and only the
  // first 4,096 are taken (the rest is kept as it is); the whole chunk
  // round-trips (or falls back), it does not run away.
  std::string zip;
  const std::string plain = "tiny entry with a few words in it, tiny entry\n";
  const std::string d = raw_deflate(plain, 9);
  for (int i = 0; i < 5000; ++i) {
    const std::string name = "f" + std::to_string(i);
    zip += "PK\x03\x04" + le(20, 2) + le(0, 2) + le(8, 2) + le(0, 4) + le(0, 4) +
           le(static_cast<std::uint32_t>(d.size()), 4) +
           le(static_cast<std::uint32_t>(plain.size()), 4) +
           le(static_cast<std::uint32_t>(name.size()), 2) + le(0, 2) + name + d;
  }
  const encoded_chunk e = encode_chunk(zip, deflate_options());
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, zip.size()), zip);
}

TEST(deflate_codec, gzip_bomb_is_refused_quickly_and_stored_by_the_fallback) {
  // 256 MiB of zeros: a ~250 KB gzip file. The cap for a chunk this size is
  // the 16 MiB floor (64 times it is less): inflating stops there and the
  // chunk is refused.
  const std::string zeros(256u << 20, '\0');
  const std::string bomb = gzip_with_zlib(zeros, 9);
  ASSERT_LT(bomb.size(), 512u << 10);
  expect_falls_back(bomb, "inflates to more than");
}

TEST(deflate_codec, truncated_and_foreign_input_fall_back) {
  const std::string gz = gzip_with_zlib(sample_text(2000), 9);
  for (const std::size_t cut : {std::size_t{5}, std::size_t{12}, gz.size() / 2, gz.size() - 1}) {
    const std::string part = gz.substr(0, cut);
    const encoded_chunk e = encode_chunk(part, deflate_options());
    EXPECT_EQ(e.fell_back_from, codec_id::deflate) << cut;
    EXPECT_FALSE(e.fallback_reason.empty()) << cut;
    EXPECT_EQ(decode_chunk(e.codec, e.bytes, part.size()), part) << cut;
  }
  expect_falls_back(sample_text(100), "not a gzip file, a PNG or a zip");
}

TEST(deflate_codec, corrupt_payloads_throw_or_keep_the_size) {
  const std::string gz = gzip_with_zlib(sample_text(400), 9);
  const encoded_chunk e = encode_chunk(gz, deflate_options());
  ASSERT_EQ(e.codec, codec_id::deflate) << e.fallback_reason;
  // Truncations and flipped bytes (every 5th position: each decode runs
  // preflate): codec_error or exactly gz.size() bytes (a flipped plain-text
  // byte can decode to other bytes of the same size; the store catches that
  // with the chunk's SHA-256).
  for (std::size_t cut = 0; cut < e.bytes.size(); cut += 5) {
    try {
      EXPECT_EQ(decode_chunk(codec_id::deflate, e.bytes.substr(0, cut), gz.size()).size(),
                gz.size());
    } catch (const codec_error&) {
    }
  }
  for (std::size_t i = 0; i < e.bytes.size(); i += 5) {
    std::string bad = e.bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    try {
      EXPECT_EQ(decode_chunk(codec_id::deflate, bad, gz.size()).size(), gz.size());
    } catch (const codec_error&) {
    }
  }
  EXPECT_THROW(decode_chunk(codec_id::deflate, e.bytes, gz.size() - 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::deflate, e.bytes, gz.size() + 1), codec_error);
}

TEST(deflate_codec, a_payload_claiming_too_much_plain_text_is_refused) {
  // Version 1, plain coding raw, empty skeleton, then a plain size of
  // 2 GiB (varint) for a 100-byte chunk: refused before any allocation.
  const std::string payload("\x01\x00\x00\x80\x80\x80\x80\x08", 8);
  try {
    decode_chunk(codec_id::deflate, payload, 100);
    FAIL() << "decoded";
  } catch (const codec_error& e) {
    EXPECT_NE(std::string(e.what()).find("more than"), std::string::npos) << e.what();
  }
  // An unknown version.
  EXPECT_THROW(decode_chunk(codec_id::deflate, std::string("\x02\x00\x00\x00", 4), 0), codec_error);
}

// The golden example of docs/format.md ("Deflate payloads"): a gzip file
// of "densefs golden line N\n" for N = 0..99 made by zlib -9 (no name,
// mtime 0), and its version 1 payload. Whatever a later build encodes, this
// payload must keep decoding to these bytes.
const char* const k_golden_gzip_hex =
    "1f8b080000000000020375d6cb8dc4201040c1fb44e11016683e9d8fbda3912cef61f2973681e2fa6e25a09bf37abe"
    "d7eff778ffdde7f51cf7e7b98e9fd7895a582b6b630dd6ce3a5827eb624d2b3638eb8a79c5be6260b1b098586c2c46"
    "162bab9575738656562bab95d5ca6a65b5b25a59ad6c56362bdbe6aa5ad9ac6c56362b9b95cdca66655819568695b1"
    "799156869561655819568695ddca6e65b7b25bd93783c7ca6e65b7b25bd9ad1c560e2b8795c3ca61e5d8cc572b8795"
    "c3ca61e5b4725a39ad9c564e2ba79573b346ac9c564e2b9795cbca65e5b27259b9ac5c56aecdb6b472599956a69569"
    "655a9956a69569655a999b4f41befe01ebc5a846f2080000";
const char* const k_golden_payload_hex =
    "01012f4c0a1f8b080000000000020344f211150000040c00042003ff0001040000040904130300004c08ebc5a846f2"
    "080000f21128b52ffd0010f50300b2471412c01b0e7045b1cb3f63494a29654abf38e706c0ffffffffbbbbbbbb3b33"
    "333333b3aaaaaaaa2a22222222a29999999919dbb66dbb6ddbb6254992247f56342e0121209203091262401423580a"
    "6249882163a811e0efff06d0537511fc9f70fcaaaa54d548277acf316f39c87b1cf186035ef186379e6b23015205";

TEST(deflate_codec, golden_payload_decodes) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "densefs golden line " + std::to_string(i) + "\n";
  const std::string gz = gzip_with_zlib(text, 9);
  EXPECT_EQ(to_hex(gz), k_golden_gzip_hex);
  // Today's encoder takes it too (its bytes may differ with another zstd
  // or preflate-rs version: only decoding is promised).
  const encoded_chunk e = encode_chunk(gz, deflate_options());
  EXPECT_EQ(e.codec, codec_id::deflate) << e.fallback_reason;
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, gz.size()), gz);
  try {
    EXPECT_EQ(decode_chunk(codec_id::deflate, from_hex(k_golden_payload_hex), gz.size()), gz);
  } catch (const codec_error& err) {
    ADD_FAILURE() << err.what() << "; today's payload: " << to_hex(e.bytes);
  }
}

}  // namespace
}  // namespace densefs::codec
