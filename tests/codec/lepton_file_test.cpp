// Lepton file and member payloads (codec/lepton_file.h): a JPEG larger than
// one chunk encoded as one Lepton file round-trips byte-exact chunk by
// chunk, stores fewer bytes than today's per-chunk encoding (Lepton on the
// first chunk only), and a corrupt or forged payload gives codec_error,
// never wrong bytes. JPEGs are made at test time with libjpeg (photo-like:
// gradients, texture and sensor-like noise), so CI needs no corpus.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/lepton_file.h"
#include "store/hash.h"
#include "store/records.h"
#include "tests/make_jpeg.h"
#include "tests/test_env.h"

namespace densefs::codec {
namespace {

#ifdef DENSEFS_HAVE_LIBJPEG
using test::make_jpeg;
#endif

std::vector<std::string> chunk_names(std::string_view file, std::uint32_t chunk_size) {
  std::vector<std::string> names;
  for (std::size_t at = 0; at < file.size(); at += chunk_size)
    names.emplace_back(store::sha256_of(file.substr(at, chunk_size)).view());
  return names;
}

// Every outcome of decoding `payload` is codec_error or exactly `jpeg`.
// Returns whether it was an error.
bool decodes_exactly_or_fails(std::string_view payload, const std::string& jpeg) {
  try {
    const std::string out = decode_lepton_file(parse_lepton_file(payload));
    EXPECT_TRUE(out == jpeg) << "a corrupt payload decoded to other bytes";
    return false;
  } catch (const codec_error&) {
    return true;
  }
}

class lepton_file_test : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef DENSEFS_HAVE_LIBJPEG
    DENSEFS_SKIP_UNLESS_REQUIRED("built without libjpeg (libjpeg-dev): no JPEGs to make");
#else
    // ~600 KB in 64 KiB chunks: ten chunks, fast enough for many decodes.
    jpeg_ = make_jpeg(1200, 900, 92, 1);
    names_ = chunk_names(jpeg_, k_small_chunk);
    const lepton_file_encoding e = encode_lepton_file(jpeg_, k_small_chunk, names_, 0.03);
    ASSERT_TRUE(e.payload) << e.refusal;
    payload_ = *e.payload;
#endif
  }

  static constexpr std::uint32_t k_small_chunk = 64 << 10;
  std::string jpeg_;
  std::vector<std::string> names_;
  std::string payload_;
};

TEST_F(lepton_file_test, every_chunk_decodes_byte_exact_and_is_named) {
  ASSERT_GT(names_.size(), 5u);
  const lepton_file_view v = parse_lepton_file(payload_);
  EXPECT_EQ(v.file_size, jpeg_.size());
  EXPECT_EQ(v.chunk_size, k_small_chunk);
  ASSERT_EQ(v.chunk_count(), names_.size());
  const std::string decoded = decode_lepton_file(v);
  ASSERT_TRUE(decoded == jpeg_);
  for (std::size_t i = 0; i < v.chunk_count(); ++i) {
    const std::string_view chunk = lepton_file_chunk(v, decoded, i);
    EXPECT_EQ(chunk, std::string_view(jpeg_).substr(i * k_small_chunk, k_small_chunk));
    EXPECT_EQ(v.chunk_names[i], names_[i]);
    EXPECT_EQ(std::string(store::sha256_of(chunk).view()), names_[i]);
  }
  EXPECT_EQ(v.chunk_plain_size(v.chunk_count() - 1), jpeg_.size() % k_small_chunk);
  EXPECT_THROW(lepton_file_chunk(v, decoded, v.chunk_count()), codec_error);
  EXPECT_LT(payload_.size(), jpeg_.size() * 9 / 10);
}

TEST_F(lepton_file_test, members_round_trip_and_reject_forgeries) {
  const lepton_member m{names_[0], 3, k_small_chunk};
  const std::string p = encode_lepton_member(m);
  EXPECT_TRUE(is_lepton_member_payload(p));
  EXPECT_FALSE(is_lepton_file_payload(p));
  const lepton_member back = parse_lepton_member(p);
  EXPECT_EQ(back.first_chunk, m.first_chunk);
  EXPECT_EQ(back.index, 3u);
  EXPECT_EQ(back.plain_size, k_small_chunk);

  EXPECT_THROW(encode_lepton_member({names_[0], 0, 1}), codec_error);  // index 0 is the file
  EXPECT_THROW(encode_lepton_member({"", 1, 1}), codec_error);
  for (std::size_t keep = 0; keep < p.size(); ++keep)
    EXPECT_THROW(parse_lepton_member(p.substr(0, keep)), codec_error) << keep;
  EXPECT_THROW(parse_lepton_member(p + "x"), codec_error);
  // Version, name size, reserved bytes; index 0 and plain size 0. (An
  // index or size that is merely different is the store's to catch: it
  // checks them against the Lepton file and the member's own record.)
  for (const std::size_t pos : {4, 5, 6}) {
    std::string bad = p;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x01);
    EXPECT_THROW(parse_lepton_member(bad), codec_error) << pos;
  }
  for (const std::size_t field : {8, 12}) {
    std::string bad = p;
    bad.replace(field, 4, 4, '\0');
    EXPECT_THROW(parse_lepton_member(bad), codec_error) << field;
  }
  EXPECT_THROW(parse_lepton_member(payload_), codec_error);
  EXPECT_THROW(parse_lepton_file(p), codec_error);
}

TEST_F(lepton_file_test, refuses_what_it_cannot_take) {
  std::string text;
  while (text.size() < 200000) text += "not a jpeg at all ";
  const auto text_names = chunk_names(text, k_small_chunk);
  const lepton_file_encoding e = encode_lepton_file(text, k_small_chunk, text_names, 0.03);
  EXPECT_FALSE(e.payload);
  EXPECT_FALSE(e.refusal.empty());

  // A saving Lepton cannot reach.
  const lepton_file_encoding greedy = encode_lepton_file(jpeg_, k_small_chunk, names_, 0.9);
  EXPECT_FALSE(greedy.payload);
  EXPECT_NE(greedy.refusal.find("min_savings"), std::string::npos) << greedy.refusal;

  // Bad arguments are errors, not refusals.
  std::vector<std::string> fewer(names_.begin(), names_.end() - 1);
  EXPECT_THROW(encode_lepton_file(jpeg_, k_small_chunk, fewer, 0.03), codec_error);
  std::vector<std::string> uneven = names_;
  uneven[1] += "x";
  EXPECT_THROW(encode_lepton_file(jpeg_, k_small_chunk, uneven, 0.03), codec_error);
  EXPECT_THROW(encode_lepton_file(jpeg_, 0, names_, 0.03), codec_error);
  EXPECT_THROW(encode_lepton_file("", k_small_chunk, {}, 0.03), codec_error);
}

TEST_F(lepton_file_test, truncated_or_forged_headers_are_errors) {
  // Every cut through the header and the names, and a few through the
  // Lepton file.
  const lepton_file_view v = parse_lepton_file(payload_);
  const std::size_t lepton_at = payload_.size() - v.lepton.size();
  std::vector<std::size_t> cuts;
  for (std::size_t keep = 0; keep <= lepton_at; keep += (keep < 40 ? 1 : 97)) cuts.push_back(keep);
  cuts.push_back(lepton_at + 10);
  cuts.push_back(lepton_at + v.lepton.size() / 2);
  cuts.push_back(payload_.size() - 1);
  for (const std::size_t keep : cuts)
    EXPECT_TRUE(decodes_exactly_or_fails(payload_.substr(0, keep), jpeg_)) << keep;
  EXPECT_TRUE(decodes_exactly_or_fails(payload_ + "trailing", jpeg_));

  // Each header field made wrong: the magic, version, name size, reserved
  // bytes, chunk size (to 0; another size that gives the same count is the
  // store's to refuse: it knows its chunk size), file size, checksum, chunk
  // count.
  for (const std::size_t pos : {0, 3, 4, 5, 6, 10, 12, 13, 20, 28, 32}) {
    std::string bad = payload_;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x01);
    EXPECT_TRUE(decodes_exactly_or_fails(bad, jpeg_)) << "header byte " << pos;
  }

  // Consistent sizes that name too many chunks (1-byte names of 1-byte
  // chunks): refused before any name is listed, not after a list of
  // millions.
  std::string many = payload_.substr(0, 36);
  const auto put32 = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) many[at + i] = static_cast<char>(v >> (8 * i));
  };
  many[5] = 1;                              // name size
  put32(8, 1);                              // chunk size
  put32(12, k_lepton_file_max_chunks + 1);  // file size (low half)
  for (std::size_t i = 16; i < 20; ++i) many[i] = 0;
  put32(28, k_lepton_file_max_chunks + 1);  // chunk count
  many.append(k_lepton_file_max_chunks + 2, 'x');
  EXPECT_THROW(parse_lepton_file(many), codec_error);
  put32(12, k_lepton_file_max_chunks);
  put32(28, k_lepton_file_max_chunks);
  EXPECT_EQ(parse_lepton_file(many).chunk_count(), k_lepton_file_max_chunks);
}

TEST_F(lepton_file_test, bit_flips_in_the_lepton_file_never_give_wrong_bytes) {
  const lepton_file_view v = parse_lepton_file(payload_);
  const std::size_t lepton_at = payload_.size() - v.lepton.size();
  std::mt19937 rng(7);
  int errors = 0;
  constexpr int k_flips = 24;
  for (int i = 0; i < k_flips; ++i) {
    std::string bad = payload_;
    const std::size_t pos = lepton_at + rng() % v.lepton.size();
    bad[pos] = static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
    errors += decodes_exactly_or_fails(bad, jpeg_);
  }
  std::printf("lepton file: %d of %d bit flips detected as errors\n", errors, k_flips);
  EXPECT_GT(errors, 0);
}

// The case of issue 14: a JPEG over 4 MiB in store-sized chunks. Today's
// per-chunk encoding gets Lepton on the first chunk at best; one Lepton
// file covers every byte.
TEST_F(lepton_file_test, a_photo_over_4_mib_saves_on_every_chunk) {
#ifdef DENSEFS_HAVE_LIBJPEG
  const std::uint32_t chunk = store::k_chunk_size;
  const std::string big = make_jpeg(4000, 3000, 94, 2);
  ASSERT_GT(big.size(), chunk);
  const auto names = chunk_names(big, chunk);
  ASSERT_GE(names.size(), 2u);

  const lepton_file_encoding e = encode_lepton_file(big, chunk, names, 0.03);
  ASSERT_TRUE(e.payload) << e.refusal;
  const lepton_file_view v = parse_lepton_file(*e.payload);
  const std::string decoded = decode_lepton_file(v);
  ASSERT_TRUE(decoded == big);

  std::size_t whole = e.payload->size();
  for (std::uint32_t i = 1; i < names.size(); ++i)
    whole += encode_lepton_member({names[0], i, v.chunk_plain_size(i)}).size();

  codec_options lepton;
  lepton.preferred = codec_id::lepton;
  std::size_t per_chunk = 0;
  for (std::size_t at = 0; at < big.size(); at += chunk)
    per_chunk += encode_chunk(std::string_view(big).substr(at, chunk), lepton).bytes.size();

  std::printf("%zu-byte JPEG: per-chunk %.1f%% saved, lepton file %.1f%% saved\n", big.size(),
              100.0 * (1.0 - double(per_chunk) / double(big.size())),
              100.0 * (1.0 - double(whole) / double(big.size())));
  EXPECT_LT(whole, per_chunk);
  // Within 0.1 point of lepton_jpeg alone: the header and members are small.
  EXPECT_LT(double(whole - v.lepton.size()), 0.001 * double(big.size()));
#endif
}

}  // namespace
}  // namespace densefs::codec
