// Codec round trips, the raw fallback, hostile-input decoding and the
// option-spec grammar.
#include "codec/codec.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/codec/codec_test_util.h"
#include "tests/random_bytes.h"

namespace densefs::codec {
namespace {

using test::random_bytes_mt19937;

// Text-like data: words from a small vocabulary, compresses well.
std::string compressible_bytes(std::size_t n, std::uint32_t seed) {
  static const char* const words[] = {"densefs ", "chunk ",  "store ",  "zstd ",
                                      "rocksdb ", "inode\n", "extent ", "the "};
  return test::word_text(n, seed, words);
}

codec_options zstd_options(int level = 3) {
  codec_options o;
  o.preferred = codec_id::zstd;
  o.zstd_level = level;
  return o;
}

void expect_round_trip(const std::string& plain, const codec_options& o) {
  const encoded_chunk e = encode_chunk(plain, o);
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, plain.size()), plain);
}

TEST(codec, round_trips_sizes_and_contents) {
  for (const codec_id id : {codec_id::raw, codec_id::zstd}) {
    codec_options o = zstd_options();
    o.preferred = id;
    SCOPED_TRACE(codec_name(id));
    expect_round_trip("", o);
    expect_round_trip("x", o);
    expect_round_trip(random_bytes_mt19937(100000, 1), o);
    expect_round_trip(compressible_bytes(100000, 2), o);
    expect_round_trip(compressible_bytes(4u << 20, 3), o);
    expect_round_trip(random_bytes_mt19937(4u << 20, 4), o);
  }
}

TEST(codec, compressible_data_is_stored_as_zstd_and_smaller) {
  const std::string plain = compressible_bytes(1u << 20, 5);
  const encoded_chunk e = encode_chunk(plain, zstd_options());
  EXPECT_EQ(e.codec, codec_id::zstd);
  EXPECT_LT(e.bytes.size(), plain.size() / 2);
}

TEST(codec, random_data_falls_back_to_raw) {
  const std::string plain = random_bytes_mt19937(1u << 20, 6);
  const encoded_chunk e = encode_chunk(plain, zstd_options());
  EXPECT_EQ(e.codec, codec_id::raw);
  EXPECT_EQ(e.bytes, plain);
}

TEST(codec, tiny_chunks_are_stored_raw) {
  // zstd's frame header alone is larger than a one-byte chunk.
  EXPECT_EQ(encode_chunk("a", zstd_options()).codec, codec_id::raw);
  EXPECT_EQ(encode_chunk("", zstd_options()).codec, codec_id::raw);
}

TEST(codec, min_savings_decides_the_fallback) {
  // Half random, half zeros: zstd saves about half.
  std::string plain = random_bytes_mt19937(64 << 10, 7) + std::string(64 << 10, '\0');
  codec_options o = zstd_options();
  o.min_savings = 0.4;
  EXPECT_EQ(encode_chunk(plain, o).codec, codec_id::zstd);
  o.min_savings = 0.6;
  EXPECT_EQ(encode_chunk(plain, o).codec, codec_id::raw);
}

TEST(codec, levels_round_trip) {
  const std::string plain = compressible_bytes(300000, 8);
  for (const int level : {-5, 1, 3, 9, 19}) expect_round_trip(plain, zstd_options(level));
}

TEST(codec, encode_rejects_out_of_range_level) {
  EXPECT_THROW(encode_chunk(compressible_bytes(10000, 9), zstd_options(ZSTD_maxCLevel() + 1)),
               codec_error);
}

TEST(codec, reentrant_across_threads) {
  const std::string plain = compressible_bytes(500000, 10);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const encoded_chunk e = encode_chunk(plain, zstd_options(1 + t));
        if (decode_chunk(e.codec, e.bytes, plain.size()) == plain) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, 20);
}

class zstd_decode : public ::testing::Test {
 protected:
  void SetUp() override {
    plain_ = compressible_bytes(200000, 11);
    const encoded_chunk e = encode_chunk(plain_, zstd_options());
    ASSERT_EQ(e.codec, codec_id::zstd);
    stored_ = e.bytes;
  }
  std::string plain_;
  std::string stored_;
};

TEST_F(zstd_decode, rejects_truncated_input) {
  for (const std::size_t keep :
       {std::size_t{0}, std::size_t{3}, std::size_t{10}, stored_.size() / 2, stored_.size() - 1}) {
    SCOPED_TRACE(keep);
    EXPECT_THROW(decode_chunk(codec_id::zstd, stored_.substr(0, keep), plain_.size()), codec_error);
  }
}

TEST_F(zstd_decode, rejects_trailing_bytes_and_second_frames) {
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_ + "x", plain_.size()), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_ + stored_, plain_.size()), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_ + stored_, plain_.size() * 2), codec_error);
}

TEST_F(zstd_decode, rejects_wrong_plain_size) {
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_, plain_.size() - 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_, plain_.size() + 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_, 0), codec_error);
  // Absurd sizes are refused before allocating.
  EXPECT_THROW(decode_chunk(codec_id::zstd, stored_, std::size_t{1} << 40), codec_error);
}

TEST_F(zstd_decode, rejects_garbage) {
  EXPECT_THROW(decode_chunk(codec_id::zstd, random_bytes_mt19937(1000, 12), plain_.size()),
               codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, std::string(plain_.size(), '\0'), plain_.size()),
               codec_error);
}

TEST_F(zstd_decode, corrupted_payload_never_returns_wrong_bytes) {
  // Flip bytes after the frame header; every outcome must be an error or the
  // exact plain bytes (zstd has no checksum here; the store's XXH3 catches
  // the rest, but the decoder must never return a wrong size).
  std::mt19937 rng(13);
  int errors = 0;
  for (int i = 0; i < 200; ++i) {
    std::string bad = stored_;
    const std::size_t pos = 6 + rng() % (bad.size() - 6);
    bad[pos] = static_cast<char>(bad[pos] ^ (1 + rng() % 255));
    try {
      const std::string out = decode_chunk(codec_id::zstd, bad, plain_.size());
      EXPECT_EQ(out.size(), plain_.size());
    } catch (const codec_error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST_F(zstd_decode, rejects_frames_without_content_size_that_decode_too_long) {
  // A frame with no content size in its header that decodes to more bytes
  // than the record claims.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  std::string frame(ZSTD_compressBound(plain_.size()), '\0');
  const std::size_t n =
      ZSTD_compress2(cctx, frame.data(), frame.size(), plain_.data(), plain_.size());
  ZSTD_freeCCtx(cctx);
  ASSERT_FALSE(ZSTD_isError(n));
  frame.resize(n);
  EXPECT_EQ(decode_chunk(codec_id::zstd, frame, plain_.size()), plain_);
  EXPECT_THROW(decode_chunk(codec_id::zstd, frame, plain_.size() - 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, frame, plain_.size() + 1), codec_error);
  // Two such frames back to back would decode to their concatenation;
  // only one frame per chunk is valid.
  EXPECT_THROW(decode_chunk(codec_id::zstd, frame + frame, plain_.size() * 2), codec_error);
  // A skippable frame is not a chunk either.
  const std::string skippable("\x50\x2a\x4d\x18\x00\x00\x00\x00", 8);
  EXPECT_THROW(decode_chunk(codec_id::zstd, skippable, 0), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::zstd, frame + skippable, plain_.size()), codec_error);
}

TEST(codec, raw_decode_requires_exact_size) {
  EXPECT_EQ(decode_chunk(codec_id::raw, "abc", 3), "abc");
  EXPECT_THROW(decode_chunk(codec_id::raw, "abc", 2), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::raw, "abc", 4), codec_error);
}

TEST(codec, unknown_ids_are_refused_by_name) {
  for (const std::uint8_t id : {7, 8, 200}) {
    SCOPED_TRACE(int(id));
    EXPECT_FALSE(is_known_codec(id));
    try {
      decode_chunk(static_cast<codec_id>(id), "abc", 3);
      ADD_FAILURE() << "decoded an unknown codec";
    } catch (const codec_error& e) {
      EXPECT_EQ(std::string(e.what()), "unknown codec id " + std::to_string(id));
    }
  }
  codec_options o;
  o.preferred = static_cast<codec_id>(7);
  EXPECT_THROW(encode_chunk("abc", o), codec_error);
}

// The two payload kinds of a Lepton file are made by the store per JPEG:
// known ids with names, but no codec spec selects them and encode_chunk
// refuses them; a member does not decode alone.
TEST(codec, lepton_file_kinds_are_not_chunk_codecs) {
  for (const codec_id id : {codec_id::lepton_file, codec_id::lepton_member}) {
    EXPECT_TRUE(is_known_codec(static_cast<std::uint8_t>(id)));
    EXPECT_EQ(codec_from_name(codec_name(id)), id);
    EXPECT_THROW(parse_codec_spec(codec_name(id)), codec_error);
    codec_options o;
    o.preferred = id;
    EXPECT_THROW(encode_chunk("\xff\xd8\xff plain", o), codec_error);
    EXPECT_THROW(decode_chunk(id, "abc", 3), codec_error);
  }
  EXPECT_EQ(codec_name(codec_id::lepton_file), "lepton_file");
  EXPECT_EQ(codec_name(codec_id::lepton_member), "lepton_member");
}

TEST(codec, names_and_ids) {
  EXPECT_TRUE(is_known_codec(0));
  EXPECT_TRUE(is_known_codec(1));
  EXPECT_TRUE(is_known_codec(2));
  EXPECT_TRUE(is_known_codec(3));
  EXPECT_EQ(codec_name(codec_id::broccoli), "broccoli");
  EXPECT_EQ(codec_name(codec_id::lepton), "lepton");
  EXPECT_EQ(codec_from_name("broccoli"), codec_id::broccoli);
  EXPECT_EQ(codec_from_name("lepton"), codec_id::lepton);
  EXPECT_EQ(codec_name(codec_id::deflate), "deflate");
  EXPECT_EQ(codec_from_name("deflate"), codec_id::deflate);
  EXPECT_EQ(static_cast<int>(codec_id::deflate), 4);
  EXPECT_EQ(codec_name(codec_id::raw), "raw");
  EXPECT_EQ(codec_name(codec_id::zstd), "zstd");
  EXPECT_EQ(codec_name(static_cast<codec_id>(9)), "unknown(9)");
  EXPECT_EQ(codec_from_name("zstd"), codec_id::zstd);
  EXPECT_EQ(codec_from_name("raw"), codec_id::raw);
  EXPECT_EQ(codec_from_name("gzip"), std::nullopt);
  EXPECT_EQ(codec_from_name(""), std::nullopt);
}

TEST(codec_spec, parses_good_specs) {
  codec_options o = parse_codec_spec("raw");
  EXPECT_EQ(o.preferred, codec_id::raw);

  o = parse_codec_spec("zstd");
  EXPECT_EQ(o.preferred, codec_id::zstd);
  EXPECT_EQ(o.zstd_level, 3);
  EXPECT_DOUBLE_EQ(o.min_savings, 0.03);

  o = parse_codec_spec("zstd:level=19");
  EXPECT_EQ(o.zstd_level, 19);
  o = parse_codec_spec("zstd:level=-5");
  EXPECT_EQ(o.zstd_level, -5);

  o = parse_codec_spec("zstd:level=9:min_savings=0.1");
  EXPECT_EQ(o.zstd_level, 9);
  EXPECT_DOUBLE_EQ(o.min_savings, 0.1);
  o = parse_codec_spec("zstd:min_savings=0");
  EXPECT_DOUBLE_EQ(o.min_savings, 0.0);
}

void expect_spec_error(std::string_view spec, std::string_view must_name) {
  testing::expect_spec_rejected(parse_codec_spec, spec, must_name);
}

TEST(codec_spec, rejects_bad_specs_naming_the_token) {
  expect_spec_error("", "codec");
  expect_spec_error("gzip", "gzip");
  expect_spec_error("zstd:lvl=3", "lvl");
  expect_spec_error("zstd:level=abc", "abc");
  expect_spec_error("zstd:level=3x", "3x");
  expect_spec_error("zstd:level=", "level");
  expect_spec_error("zstd:level=99", "99");
  expect_spec_error("zstd:level", "level");
  expect_spec_error("zstd:", "zstd:");
  expect_spec_error("zstd:level=3:", "zstd:level=3:");
  expect_spec_error("zstd:=3", "=3");
  expect_spec_error("zstd:min_savings=1.5", "1.5");
  expect_spec_error("zstd:min_savings=-0.1", "-0.1");
  expect_spec_error("zstd:min_savings=nan", "nan");
  expect_spec_error("raw:level=3", "level");
  expect_spec_error("ZSTD", "ZSTD");
  expect_spec_error(":level=3", "codec");
}

TEST(codec_spec, format_is_the_inverse_of_parse) {
  EXPECT_EQ(format_codec_spec(codec_options{}), "zstd:level=3");
  EXPECT_EQ(format_codec_spec(parse_codec_spec("raw")), "raw");
  EXPECT_EQ(format_codec_spec(parse_codec_spec("zstd:level=9")), "zstd:level=9");
  EXPECT_EQ(format_codec_spec(parse_codec_spec("zstd:level=-3:min_savings=0.125")),
            "zstd:level=-3:min_savings=0.125");
  for (const char* spec : {"raw", "zstd:level=1", "zstd:level=19:min_savings=0.5"}) {
    const codec_options o = parse_codec_spec(spec);
    const codec_options back = parse_codec_spec(format_codec_spec(o));
    EXPECT_EQ(back.preferred, o.preferred);
    EXPECT_EQ(back.zstd_level, o.zstd_level);
    EXPECT_DOUBLE_EQ(back.min_savings, o.min_savings);
  }
}

}  // namespace
}  // namespace densefs::codec
