// Broccoli through the codec API: round trips, the raw guard, option specs,
// hostile payloads, decode_any_size's bound, and concat_broccoli output that
// the stock `brotli` CLI decodes to the exact concatenation.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "tests/codec/codec_test_util.h"
#include "tests/random_bytes.h"
#include "tests/temp_dir.h"
#include "tests/test_env.h"

namespace densefs::codec {
namespace {

using test::random_bytes_mt19937;

std::string text_bytes(std::size_t n, std::uint32_t seed) {
  static const char* const words[] = {"broccoli ", "brotli ", "catable ", "stream ",
                                      "window ",   "chunk\n", "quality ", "the "};
  return test::word_text(n, seed, words);
}

codec_options broccoli(int quality = 5, int window = 22) {
  codec_options o;
  o.preferred = codec_id::broccoli;
  o.broccoli_quality = quality;
  o.broccoli_window = window;
  return o;
}

TEST(broccoli_codec, round_trips_sizes_qualities_and_windows) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{65536},
                              std::size_t{1} << 20, std::size_t{4} << 20}) {
    const std::string plain = text_bytes(n, static_cast<std::uint32_t>(n));
    const encoded_chunk e = encode_chunk(plain, broccoli());
    if (n >= 65536) {
      EXPECT_EQ(e.codec, codec_id::broccoli) << n;
      EXPECT_LT(e.bytes.size(), plain.size() / 2) << n;
    }
    EXPECT_FALSE(e.fell_back_from);
    EXPECT_EQ(decode_chunk(e.codec, e.bytes, plain.size()), plain) << n;
  }
  const std::string plain = text_bytes(300000, 7);
  for (const int q : {0, 1, 5, 9, 11}) {
    for (const int w : {10, 16, 22, 24}) {
      const encoded_chunk e = encode_chunk(plain, broccoli(q, w));
      ASSERT_EQ(e.codec, codec_id::broccoli) << q << "/" << w;
      EXPECT_EQ(decode_chunk(e.codec, e.bytes, plain.size()), plain) << q << "/" << w;
    }
  }
}

TEST(broccoli_codec, incompressible_chunks_are_stored_raw_without_a_fallback) {
  const std::string plain = random_bytes_mt19937(1 << 20, 1);
  const encoded_chunk e = encode_chunk(plain, broccoli());
  EXPECT_EQ(e.codec, codec_id::raw);
  EXPECT_FALSE(e.fell_back_from);
  EXPECT_EQ(e.bytes, plain);
  EXPECT_EQ(encode_chunk("", broccoli()).codec, codec_id::raw);
}

TEST(broccoli_codec, out_of_range_options_throw) {
  EXPECT_THROW(encode_chunk(text_bytes(1000, 2), broccoli(12, 22)), codec_error);
  EXPECT_THROW(encode_chunk(text_bytes(1000, 2), broccoli(5, 25)), codec_error);
  EXPECT_THROW(encode_chunk(text_bytes(1000, 2), broccoli(5, 9)), codec_error);
}

TEST(broccoli_spec, parses_formats_and_rejects) {
  codec_options o = parse_codec_spec("broccoli");
  EXPECT_EQ(o.preferred, codec_id::broccoli);
  EXPECT_EQ(o.broccoli_quality, 5);
  EXPECT_EQ(o.broccoli_window, 22);
  o = parse_codec_spec("broccoli:quality=9:window=24:min_savings=0.1");
  EXPECT_EQ(o.broccoli_quality, 9);
  EXPECT_EQ(o.broccoli_window, 24);
  EXPECT_DOUBLE_EQ(o.min_savings, 0.1);
  EXPECT_EQ(format_codec_spec(parse_codec_spec("broccoli")), "broccoli:quality=5:window=22");
  EXPECT_EQ(format_codec_spec(o), "broccoli:quality=9:window=24:min_savings=0.1");
  EXPECT_EQ(format_codec_spec(parse_codec_spec("broccoli:window=16")),
            "broccoli:quality=5:window=16");
  for (const char* spec : {"broccoli:quality=0:window=10", "broccoli:quality=11:window=24"}) {
    EXPECT_EQ(format_codec_spec(parse_codec_spec(spec)), spec);
  }
  EXPECT_EQ(format_codec_spec(parse_codec_spec("lepton")), "lepton");
  EXPECT_EQ(format_codec_spec(parse_codec_spec("lepton:min_savings=0.01")),
            "lepton:min_savings=0.01");

  for (const auto& [spec, token] :
       std::vector<std::pair<const char*, const char*>>{{"broccoli:quality=12", "12"},
                                                        {"broccoli:quality=-1", "-1"},
                                                        {"broccoli:quality=five", "five"},
                                                        {"broccoli:window=9", "9"},
                                                        {"broccoli:window=25", "25"},
                                                        {"broccoli:window=", "window"},
                                                        {"broccoli:level=5", "level"},
                                                        {"broccoli:quality", "quality"},
                                                        {"broccoli:", "broccoli:"},
                                                        {"broccoli:min_savings=1", "1"},
                                                        {"lepton:quality=5", "quality"},
                                                        {"Broccoli", "Broccoli"}}) {
    testing::expect_spec_rejected(parse_codec_spec, spec, token);
  }
}

class broccoli_decode : public testing::damaged_chunk_test<codec_id::broccoli> {
 protected:
  void SetUp() override {
    plain_ = text_bytes(200000, 3) + random_bytes_mt19937(20000, 4);
    const encoded_chunk e = encode_chunk(plain_, broccoli());
    ASSERT_EQ(e.codec, codec_id::broccoli);
    stored_ = e.bytes;
  }
};

TEST_F(broccoli_decode, rejects_truncation_trailing_bytes_and_wrong_sizes) {
  std::vector<std::string> bad;
  for (const std::size_t keep : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{20},
                                 stored_.size() / 2, stored_.size() - 1}) {
    bad.push_back(stored_.substr(0, keep));
  }
  bad.push_back(stored_ + "x");
  bad.push_back(stored_ + stored_);
  EXPECT_EQ(count_errors(bad), static_cast<int>(bad.size()));
  EXPECT_THROW(decode_chunk(codec_id::broccoli, stored_, plain_.size() - 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::broccoli, stored_, plain_.size() + 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::broccoli, stored_, 0), codec_error);
  EXPECT_EQ(decode_any_size(codec_id::broccoli, stored_, plain_.size()), plain_);
  EXPECT_THROW(decode_any_size(codec_id::broccoli, stored_, plain_.size() - 1), codec_error);
}

TEST_F(broccoli_decode, random_bytes_and_bit_flips_never_crash_or_change_the_size) {
  std::vector<std::string> bad;
  for (std::uint32_t seed = 0; seed < 50; ++seed) {
    bad.push_back(random_bytes_mt19937(1 + seed * 97, seed));
  }
  const int random_errors = count_errors(bad);
  std::mt19937 rng(5);
  std::vector<std::string> flipped;
  for (int i = 0; i < 300; ++i) {
    std::string b = stored_;
    const std::size_t pos = i < 40 ? static_cast<std::size_t>(i) : rng() % b.size();
    b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8)));
    flipped.push_back(b);
  }
  const int flip_errors = count_errors(flipped);
  std::printf("broccoli: %d of %zu random inputs, %d of %zu bit flips detected as errors\n",
              random_errors, bad.size(), flip_errors, flipped.size());
  EXPECT_EQ(random_errors, static_cast<int>(bad.size()));
  // Brotli has no checksum: a flip in literal data decodes to other bytes of
  // the same size. The store's XXH3 of the stored bytes catches those before
  // decoding; the decoder's job is to never crash, overrun or change size.
  EXPECT_GT(flip_errors, 0);
}

TEST(broccoli_concat, joins_chunks_into_one_stream) {
  std::vector<std::string> plains = {text_bytes(100000, 10), text_bytes(5000, 11),
                                     text_bytes(200, 12), text_bytes(4 << 20, 13),
                                     text_bytes(70000, 14)};
  std::vector<std::string> stored;
  std::string expected;
  for (std::size_t i = 0; i < plains.size(); ++i) {
    // Mixed windows and qualities: the joined stream takes the largest window.
    const codec_options o = broccoli(i % 2 ? 9 : 5, i == 1 ? 16 : 22);
    const encoded_chunk e = encode_chunk(plains[i], o);
    ASSERT_EQ(e.codec, codec_id::broccoli) << i;
    stored.push_back(e.bytes);
    expected += plains[i];
  }
  const std::vector<std::string_view> views(stored.begin(), stored.end());
  const std::string joined = concat_broccoli(views);
  EXPECT_EQ(decode_any_size(codec_id::broccoli, joined, expected.size()), expected);
  EXPECT_THROW(decode_any_size(codec_id::broccoli, joined, expected.size() - 1), codec_error);
  // A single piece and no piece at all.
  EXPECT_EQ(decode_any_size(codec_id::broccoli, concat_broccoli({stored[0]}), 1 << 20), plains[0]);
  EXPECT_EQ(decode_any_size(codec_id::broccoli, concat_broccoli({}), 10), "");
  // Something that is not a Broccoli stream cannot be joined.
  EXPECT_THROW(concat_broccoli({stored[0], "not brotli at all"}), codec_error);

  // Stock brotli (the C implementation) agrees.
  if (std::system("command -v brotli >/dev/null 2>&1") != 0) {
    DENSEFS_SKIP_UNLESS_REQUIRED("stock brotli CLI not installed (apt-get install brotli)");
  }
  test::temp_dir dir;
  {
    std::ofstream out(dir / "joined.br", std::ios::binary);
    out.write(joined.data(), static_cast<std::streamsize>(joined.size()));
  }
  const std::string cmd =
      "brotli -d -f -o '" + (dir / "joined").string() + "' '" + (dir / "joined.br").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "joined", std::ios::binary);
  const std::string decoded{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(decoded.size(), expected.size());
  EXPECT_TRUE(decoded == expected);
}

TEST(broccoli_concat, every_window_joins) {
  // Window 16 has its own one-bit header, which the brotli crate's joiner
  // wrote wrong (tests/fuzz/crashers/codec_roundtrip_broccoli).
  for (int window = 10; window <= 24; ++window) {
    codec_options o;
    o.preferred = codec_id::broccoli;
    o.broccoli_window = window;
    const std::string a = text_bytes(5000, 30), b = text_bytes(7000, 31);
    const encoded_chunk ea = encode_chunk(a, o), eb = encode_chunk(b, o);
    ASSERT_EQ(ea.codec, codec_id::broccoli);
    ASSERT_EQ(eb.codec, codec_id::broccoli);
    EXPECT_EQ(decode_any_size(codec_id::broccoli, concat_broccoli({ea.bytes, eb.bytes}),
                              a.size() + b.size()),
              a + b)
        << "window " << window;
  }
}

TEST(codec_any_size, zstd_frames_concatenate_and_raw_is_bounded) {
  codec_options z;
  z.preferred = codec_id::zstd;
  const std::string a = text_bytes(300000, 20), b = text_bytes(100000, 21);
  const encoded_chunk ea = encode_chunk(a, z), eb = encode_chunk(b, z);
  ASSERT_EQ(ea.codec, codec_id::zstd);
  ASSERT_EQ(eb.codec, codec_id::zstd);
  EXPECT_EQ(decode_any_size(codec_id::zstd, ea.bytes + eb.bytes, a.size() + b.size()), a + b);
  EXPECT_THROW(decode_any_size(codec_id::zstd, ea.bytes + eb.bytes, a.size() + b.size() - 1),
               codec_error);
  EXPECT_THROW(decode_any_size(codec_id::zstd, ea.bytes.substr(0, ea.bytes.size() - 1), 1 << 20),
               codec_error);
  EXPECT_THROW(decode_any_size(codec_id::zstd, ea.bytes + "junk", 1 << 20), codec_error);
  EXPECT_THROW(decode_any_size(codec_id::zstd, "", 1 << 20), codec_error);
  EXPECT_EQ(decode_any_size(codec_id::raw, "abc", 3), "abc");
  EXPECT_THROW(decode_any_size(codec_id::raw, "abc", 2), codec_error);
  EXPECT_THROW(decode_any_size(static_cast<codec_id>(9), "abc", 3), codec_error);
}

}  // namespace
}  // namespace densefs::codec
