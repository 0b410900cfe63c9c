// The per-type codec policy: the built-in table, the override grammar, its
// errors, and the canonical form.
#include "codec/policy.h"

#include "tests/codec/codec_test_util.h"
#include "tests/test_env.h"

#include <gtest/gtest.h>

#include <string>

namespace densefs::codec {
namespace {

// Lepton (3) and Broccoli (2) are Rust codecs a build may lack (they landed
// after the policy); assertions that parse or format their specs are skipped
// without them.
bool have_rust_codecs() {
  return is_known_codec(static_cast<std::uint8_t>(codec_id::lepton)) &&
         is_known_codec(static_cast<std::uint8_t>(codec_id::broccoli));
}

// Asserts that parse_policy(spec) throws a codec_error whose message
// contains `token`.
void expect_rejected(const std::string& spec, const std::string& token) {
  testing::expect_spec_rejected(parse_policy, spec, token);
}

TEST(policy_test, default_table) {
  const policy p = default_policy();
  EXPECT_EQ(p.for_type(file_type::jpeg).preferred, codec_id::lepton);
  for (const auto t : {file_type::image, file_type::video, file_type::audio, file_type::archive}) {
    EXPECT_EQ(p.for_type(t).preferred, codec_id::raw) << file_type_name(t);
  }
  for (const auto t : {file_type::text, file_type::document}) {
    EXPECT_EQ(p.for_type(t).preferred, codec_id::broccoli) << file_type_name(t);
    EXPECT_EQ(p.for_type(t).broccoli_quality, 5);
    EXPECT_EQ(p.for_type(t).broccoli_window, 22);
    EXPECT_EQ(format_chunker_spec(p.chunker_for(t)), "cdc:min=256K:avg=1M:max=4M");
  }
  for (const auto t :
       {file_type::database, file_type::other, file_type::executable, file_type::unknown}) {
    EXPECT_EQ(p.for_type(t).preferred, codec_id::zstd) << file_type_name(t);
    EXPECT_EQ(p.for_type(t).zstd_level, 3);
  }
  // Deflate recompression for gzip, zip and PNG files, whole (up to 4 MiB).
  for (const auto t : {file_type::gzip, file_type::zip, file_type::png}) {
    EXPECT_EQ(p.for_type(t).preferred, codec_id::deflate) << file_type_name(t);
  }
  for (const auto& o : p.by_type) EXPECT_DOUBLE_EQ(o.min_savings, 0.03);
  // The 4 MiB grid for files that are their own content; CDC elsewhere.
  for (const auto t : {file_type::jpeg, file_type::image, file_type::video, file_type::audio,
                       file_type::gzip, file_type::zip, file_type::png}) {
    EXPECT_EQ(p.chunker_for(t), chunker_spec::fixed()) << file_type_name(t);
  }
  for (const auto t : {file_type::unknown, file_type::other, file_type::archive,
                       file_type::database, file_type::executable}) {
    EXPECT_EQ(p.chunker_for(t), chunker_spec::content_defined()) << file_type_name(t);
  }
}

TEST(policy_test, chunkers_are_set_with_plus) {
  const policy p = parse_policy(
      "default/database=zstd:level=5+cdc:avg=16K/video=+cdc/+fixed/"
      "archive=+fixed:size=64K");
  // "+fixed" applied to every type after the first two entries.
  EXPECT_EQ(p.chunker_for(file_type::database), chunker_spec::fixed());
  EXPECT_EQ(p.for_type(file_type::database).zstd_level, 5);
  EXPECT_EQ(p.chunker_for(file_type::video), chunker_spec::fixed());
  EXPECT_EQ(p.chunker_for(file_type::archive), chunker_spec::fixed(64 << 10));
  EXPECT_EQ(p.for_type(file_type::archive).preferred, codec_id::raw);  // codec kept

  const policy q = parse_policy("database=zstd+cdc:avg=16K");
  EXPECT_EQ(format_chunker_spec(q.chunker_for(file_type::database)), "cdc:min=8K:avg=16K:max=128K");
  // A codec without '+' leaves the chunker alone.
  const policy r = parse_policy("zstd:level=9");
  EXPECT_EQ(r.chunking, default_policy().chunking);
  EXPECT_FALSE(q == default_policy());

  expect_rejected("+zip", "unknown chunker 'zip'");
  expect_rejected("text=zstd+cdc:avg=3000", "not a power of two");
  expect_rejected("+fixed:size=32", "size=32");
  expect_rejected("+fixed:size=5M", "size=5M");
  expect_rejected("+fixed:bytes=4K", "bytes=4K");
  expect_rejected("+fixed:size=512", "below 1024 bytes");
  expect_rejected("text=+cdc:min=256:avg=1K:max=4K", "below 1024 bytes");
  expect_rejected("+cdc:max=8M", "above");
}

TEST(policy_test, unknown_type_numbers_use_the_unknown_entry) {
  policy p = default_policy();
  p.for_type(file_type::unknown).zstd_level = 7;
  EXPECT_EQ(p.for_type(static_cast<file_type>(200)).zstd_level, 7);
}

TEST(policy_test, default_keyword) {
  EXPECT_EQ(parse_policy("default"), default_policy());
  EXPECT_EQ(parse_policy("zstd/default"), default_policy());
}

TEST(policy_test, single_codec_spec_applies_to_every_type) {
  // What stores made before per-type policies persisted.
  const policy p = parse_policy("zstd:level=3");
  for (const auto& o : p.by_type) {
    EXPECT_EQ(o.preferred, codec_id::zstd);
    EXPECT_EQ(o.zstd_level, 3);
  }
  const policy q = parse_policy("zstd:level=9:min_savings=0.1");
  for (const auto& o : q.by_type) {
    EXPECT_EQ(o.zstd_level, 9);
    EXPECT_DOUBLE_EQ(o.min_savings, 0.1);
  }
  for (const auto& o : parse_policy("raw").by_type) EXPECT_EQ(o.preferred, codec_id::raw);
}

TEST(policy_test, per_type_overrides_apply_left_to_right) {
  const policy p = parse_policy("default/jpeg=zstd/text=zstd:level=9");
  EXPECT_EQ(p.for_type(file_type::jpeg).preferred, codec_id::zstd);
  EXPECT_EQ(p.for_type(file_type::jpeg).zstd_level, 3);
  EXPECT_EQ(p.for_type(file_type::text).preferred, codec_id::zstd);
  EXPECT_EQ(p.for_type(file_type::text).zstd_level, 9);
  EXPECT_EQ(p.for_type(file_type::document).preferred, codec_id::broccoli);
  EXPECT_EQ(p.for_type(file_type::video).preferred, codec_id::raw);

  // Overrides alone start from the built-in table.
  EXPECT_EQ(parse_policy("jpeg=zstd"), parse_policy("default/jpeg=zstd"));
  // A later entry replaces an earlier one.
  EXPECT_EQ(parse_policy("video=zstd/video=raw"), default_policy());
  const policy all_zstd_but_archive = parse_policy("zstd:level=1/archive=raw");
  EXPECT_EQ(all_zstd_but_archive.for_type(file_type::archive).preferred, codec_id::raw);
  EXPECT_EQ(all_zstd_but_archive.for_type(file_type::jpeg).zstd_level, 1);
}

TEST(policy_test, broccoli_and_lepton_options) {
  if (!have_rust_codecs()) DENSEFS_SKIP_UNLESS_REQUIRED("this build has no Lepton/Broccoli codecs");
  const policy p = parse_policy("text=broccoli:quality=9:window=24/jpeg=lepton:min_savings=0.05");
  EXPECT_EQ(p.for_type(file_type::text).preferred, codec_id::broccoli);
  EXPECT_EQ(p.for_type(file_type::text).broccoli_quality, 9);
  EXPECT_EQ(p.for_type(file_type::text).broccoli_window, 24);
  EXPECT_EQ(p.for_type(file_type::jpeg).preferred, codec_id::lepton);
  EXPECT_DOUBLE_EQ(p.for_type(file_type::jpeg).min_savings, 0.05);
  expect_rejected("text=broccoli:quality=12", "quality=12");
  expect_rejected("text=broccoli:level=3", "level");
  expect_rejected("jpeg=lepton:quality=3", "quality");
}

TEST(policy_test, bad_specs_name_the_token) {
  expect_rejected("", "empty");
  expect_rejected("default/", "empty");
  expect_rejected("default//text=zstd", "empty");
  expect_rejected("picture=zstd", "picture");
  expect_rejected("JPEG=zstd", "JPEG");
  expect_rejected("text=gzip", "gzip");
  expect_rejected("lz4", "lz4");
  expect_rejected("text=zstd:level=99", "99");
  expect_rejected("text=zstd:speed=3", "speed");
  expect_rejected("text=zstd:level", "level");
  expect_rejected("text=", "text=");
  expect_rejected("=zstd", "=zstd");
  expect_rejected("raw:min_savings=0.1", "min_savings");
  // The entry is quoted so a long spec points at the bad part.
  expect_rejected("default/jpeg=zstd/text=zstd:level=x", "text=zstd:level=x");
}

TEST(policy_test, equality_compares_every_option) {
  const policy a = default_policy();
  policy b = default_policy();
  EXPECT_EQ(a, b);
  b.for_type(file_type::text).broccoli_quality = 6;
  EXPECT_FALSE(a == b);
  b = a;
  b.for_type(file_type::text).broccoli_window = 20;
  EXPECT_FALSE(a == b);
  b = a;
  b.for_type(file_type::other).zstd_level = 4;
  EXPECT_FALSE(a == b);
  b = a;
  b.for_type(file_type::image).min_savings = 0.5;
  EXPECT_FALSE(a == b);
  b = a;
  b.for_type(file_type::executable).preferred = codec_id::raw;
  EXPECT_FALSE(a == b);
}

TEST(policy_test, canonical_form) {
  if (!have_rust_codecs()) DENSEFS_SKIP_UNLESS_REQUIRED("this build has no Lepton/Broccoli codecs");
  const std::string s = format_policy(default_policy());
  EXPECT_EQ(s.rfind("unknown=zstd:level=3/other=zstd:level=3/jpeg=lepton/image=raw/", 0), 0u) << s;
  EXPECT_NE(s.find("/text=broccoli"), std::string::npos) << s;
  EXPECT_NE(s.find("/executable=zstd:level=3"), std::string::npos) << s;
  // Every type appears exactly once, in file_type order.
  std::size_t at = 0;
  for (std::size_t i = 0; i < k_file_type_count; ++i) {
    const std::string key = std::string(file_type_name(static_cast<file_type>(i))) + "=";
    const auto found = s.find(key, at);
    ASSERT_NE(found, std::string::npos) << key;
    at = found + key.size();
  }
}

void expect_round_trip(const std::string& spec) {
  const policy p = parse_policy(spec);
  const std::string canonical = format_policy(p);
  EXPECT_EQ(parse_policy(canonical), p) << spec << " -> " << canonical;
  EXPECT_EQ(format_policy(parse_policy(canonical)), canonical) << spec;
}

TEST(policy_test, round_trip) {
  for (const auto* spec :
       {"zstd:level=3", "raw", "zstd:level=19:min_savings=0.2", "zstd:level=-5/video=zstd:level=1",
        "zstd:level=1/archive=raw/text=raw", "zstd+fixed", "raw/+cdc:avg=64K",
        "zstd/database=+fixed:size=4K/text=+cdc"}) {
    expect_round_trip(spec);
  }
  EXPECT_EQ(format_policy(parse_policy("zstd:level=3+fixed")), "zstd:level=3/+fixed");
  EXPECT_EQ(format_policy(parse_policy("zstd:level=3/database=+fixed:size=64K")),
            "zstd:level=3/database=+fixed:size=64K");
  EXPECT_EQ(format_policy(parse_policy("zstd:level=3/jpeg=raw"))
                .rfind("unknown=zstd:level=3/other=zstd:level=3/jpeg=raw/image=zstd:level=3/", 0),
            0u);
  if (!have_rust_codecs()) DENSEFS_SKIP_UNLESS_REQUIRED("this build has no Lepton/Broccoli codecs");
  for (const auto* spec : {"default", "default/jpeg=zstd/text=zstd:level=9",
                           "default/text=broccoli:quality=9:window=24",
                           "default/jpeg=lepton:min_savings=0.1/document=raw"}) {
    expect_round_trip(spec);
  }
}

}  // namespace
}  // namespace densefs::codec

namespace densefs::codec {
namespace {

TEST(policy_test, fast_ingest_uses_zstd_1_for_slower_codecs_only) {
  const policy p = default_policy();
  const auto text = fast_ingest_options(p.for_type(file_type::text));  // broccoli
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(text->preferred, codec_id::zstd);
  EXPECT_EQ(text->zstd_level, 1);
  EXPECT_EQ(text->min_savings, p.for_type(file_type::text).min_savings);
  const auto other = fast_ingest_options(p.for_type(file_type::other));  // zstd -3
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->zstd_level, 1);
  // Already fast, or with a background path of its own: unchanged.
  EXPECT_FALSE(fast_ingest_options(p.for_type(file_type::jpeg)).has_value());   // lepton
  EXPECT_FALSE(fast_ingest_options(p.for_type(file_type::video)).has_value());  // raw
  EXPECT_FALSE(fast_ingest_options(parse_codec_spec("zstd:level=1")).has_value());
  EXPECT_FALSE(fast_ingest_options(parse_codec_spec("zstd:level=-3")).has_value());
}

}  // namespace
}  // namespace densefs::codec
