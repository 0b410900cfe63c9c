// Content-defined chunking: frozen boundaries (golden cut points), size
// bounds, streaming == whole-buffer, shift resistance, the spec grammar.
#include "codec/chunker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "tests/codec/codec_test_util.h"
#include "tests/random_bytes.h"

namespace densefs::codec {
namespace {

// splitmix64 bytes: the golden values below were computed from them.
using test::splitmix_bytes;

std::vector<std::string> chunks_of(std::string_view data, const cdc_options& o) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (const auto end : cut_points(data, o)) {
    out.emplace_back(data.substr(start, end - start));
    start = end;
  }
  return out;
}

// Version 1 is frozen: these values must never change. A failure here means
// boundaries moved, which silently breaks dedup against every existing store;
// make a new k_cdc_version instead.
TEST(chunker, GoldenCutPointsOfVersion1) {
  ASSERT_EQ(k_cdc_version, 1u);
  EXPECT_EQ(cdc_gear_table()[0], 0xf74e827635974e78u);
  EXPECT_EQ(cdc_gear_table()[255], 0x63bb225c393e8fc3u);

  const auto data = splitmix_bytes(std::size_t{1} << 20, 42);
  const auto cuts = cut_points(data, {1024, 4096, 16384});
  ASSERT_EQ(cuts.size(), 227u);
  const std::vector<std::size_t> first(cuts.begin(), cuts.begin() + 12);
  EXPECT_EQ(first, (std::vector<std::size_t>{1407, 5801, 10819, 12180, 16316, 20700, 24175, 27000,
                                             31154, 35479, 37729, 42239}));
  const std::vector<std::size_t> last(cuts.end() - 6, cuts.end());
  EXPECT_EQ(last, (std::vector<std::size_t>{1023598, 1028023, 1037735, 1040254, 1045618, 1048576}));
}

TEST(chunker, EmptyAndTinyInputs) {
  const cdc_options o;
  EXPECT_TRUE(cut_points("", o).empty());
  EXPECT_EQ(cut_points("x", o), std::vector<std::size_t>{1});
  const std::string below_min(o.min_size - 1, 'a');
  EXPECT_EQ(cut_points(below_min, o), std::vector<std::size_t>{below_min.size()});
}

TEST(chunker, ChunksStayWithinMinAndMaxExceptTheLast) {
  const std::vector<cdc_options> configs = {
      {}, {64, 128, 4096}, {2048, 8192, 32768}, {512 << 10, 1 << 20, 4 << 20}};
  const auto data = splitmix_bytes(24 << 20, 7);
  // Long runs of one byte never match a mask: they must be cut at max_size.
  const std::string zeros(3 << 20, '\0');
  for (const auto& o : configs) {
    for (const std::string_view d : {std::string_view(data), std::string_view(zeros)}) {
      const auto cuts = cut_points(d, o);
      ASSERT_FALSE(cuts.empty());
      EXPECT_EQ(cuts.back(), d.size());
      std::size_t start = 0;
      for (std::size_t i = 0; i < cuts.size(); ++i) {
        const auto len = cuts[i] - start;
        EXPECT_LE(len, o.max_size) << format_cdc_spec(o) << " chunk " << i;
        if (i + 1 < cuts.size()) {
          EXPECT_GE(len, o.min_size) << format_cdc_spec(o) << " chunk " << i;
        }
        start = cuts[i];
      }
    }
    // Random data: the mean lands near avg (normalized chunking keeps it
    // within about +-25% for these ratios).
    const auto cuts = cut_points(data, o);
    const double mean = static_cast<double>(data.size()) / static_cast<double>(cuts.size());
    if (data.size() / o.avg_size >= 64) {
      EXPECT_GT(mean, 0.75 * static_cast<double>(o.avg_size)) << format_cdc_spec(o);
      EXPECT_LT(mean, 1.5 * static_cast<double>(o.avg_size)) << format_cdc_spec(o);
    }
  }
  EXPECT_EQ(cut_points(zeros, {}).size(), zeros.size() / cdc_options{}.max_size);
}

// Feeds `data` in pieces of random sizes; returns the absolute cut points.
std::vector<std::size_t> streamed_cuts(std::string_view data, const cdc_options& o,
                                       std::mt19937_64& rng, std::size_t max_piece) {
  cdc_chunker c(o);
  std::vector<std::size_t> cuts;
  std::size_t offset = 0;
  std::size_t chunk_start = 0;
  while (offset < data.size()) {
    const std::size_t want = std::uniform_int_distribution<std::size_t>(0, max_piece)(rng);
    std::string_view piece = data.substr(offset, want);
    offset += piece.size();
    std::size_t piece_start = offset - piece.size();
    while (auto n = c.feed(piece)) {
      EXPECT_GE(*n, 1u);
      EXPECT_LE(*n, piece.size());
      piece_start += *n;
      cuts.push_back(piece_start);
      chunk_start = piece_start;
      piece.remove_prefix(*n);
    }
    EXPECT_EQ(c.pending(), offset - chunk_start);
  }
  if (const auto last = c.finish()) {
    EXPECT_EQ(chunk_start + *last, data.size());
    cuts.push_back(data.size());
  }
  EXPECT_EQ(c.pending(), 0u);
  return cuts;
}

TEST(chunker, StreamingGivesTheWholeBufferBoundaries) {
  const auto data = splitmix_bytes(6 << 20, 99);
  std::mt19937_64 rng(5);
  for (const cdc_options& o :
       {cdc_options{}, cdc_options{64, 256, 1024}, cdc_options{2048, 8192, 65536}}) {
    const auto whole = cut_points(data, o);
    for (const std::size_t max_piece : {1ul, 3ul, 100ul, 4096ul, 70000ul, 1ul << 20}) {
      // Tiny pieces over 6 MiB are slow; a prefix exercises them just as well.
      const std::string_view d =
          max_piece < 64 ? std::string_view(data).substr(0, 300000) : std::string_view(data);
      const auto expected = d.size() == data.size() ? whole : cut_points(d, o);
      EXPECT_EQ(streamed_cuts(d, o, rng, max_piece), expected)
          << format_cdc_spec(o) << " pieces up to " << max_piece;
    }
  }
}

TEST(chunker, FinishResetsForTheNextFile) {
  const auto data = splitmix_bytes(1 << 20, 3);
  const cdc_options o{1024, 4096, 16384};
  cdc_chunker c(o);
  c.feed(std::string_view(data).substr(0, 100));
  EXPECT_EQ(c.finish(), std::optional<std::size_t>(100));
  EXPECT_EQ(c.finish(), std::nullopt);
  std::vector<std::size_t> cuts;
  std::string_view rest = data;
  std::size_t offset = 0;
  while (auto n = c.feed(rest)) {
    offset += *n;
    cuts.push_back(offset);
    rest.remove_prefix(*n);
  }
  if (c.finish()) cuts.push_back(data.size());
  EXPECT_EQ(cuts, cut_points(data, o));
}

// The point of CDC: an insertion near the start changes only the chunks
// around it; with fixed blocks every later block would change.
TEST(chunker, InsertionsChangeOnlyNearbyChunks) {
  const auto v1 = splitmix_bytes(8 << 20, 11);
  const cdc_options o;
  const auto before = chunks_of(v1, o);
  const std::set<std::string> known(before.begin(), before.end());
  for (const std::size_t inserted : {std::size_t{1}, std::size_t{1024}}) {
    std::string v2 = v1;
    v2.insert(5000, splitmix_bytes(inserted, 12));
    const auto after = chunks_of(v2, o);
    const auto changed = std::count_if(after.begin(), after.end(),
                                       [&](const std::string& c) { return !known.contains(c); });
    EXPECT_GE(changed, 1) << inserted << " bytes inserted";
    // Not just 1: the shift moves content across the avg_size mask switch,
    // which can move the next few cuts before the stream resynchronizes (6
    // with another gear seed). 8 of ~250 still fails any offset-based cut.
    EXPECT_LE(changed, 8) << inserted << " bytes inserted, of " << after.size() << " chunks";
    EXPECT_GT(after.size(), 64u);
  }
}

void expect_rejected(const std::string& spec, const std::string& token) {
  testing::expect_spec_rejected(parse_cdc_spec, spec, token);
}

TEST(chunker_spec, ParsesAndFormats) {
  EXPECT_EQ(parse_cdc_spec("cdc"), cdc_options{});
  EXPECT_EQ(format_cdc_spec(cdc_options{}), "cdc:min=8K:avg=32K:max=128K");
  const auto o = parse_cdc_spec("cdc:avg=8K:min=2048:max=1M");
  EXPECT_EQ(o, (cdc_options{2048, 8192, 1 << 20}));
  EXPECT_EQ(format_cdc_spec(o), "cdc:min=2K:avg=8K:max=1M");
  EXPECT_EQ(parse_cdc_spec("cdc:min=100:avg=4k:max=4M"), (cdc_options{100, 4096, 4 << 20}));
  EXPECT_EQ(format_cdc_spec({100, 4096, 4 << 20}), "cdc:min=100:avg=4K:max=4M");
  for (const auto& c : {cdc_options{}, cdc_options{64, 128, 129}, cdc_options{1000, 1024, 3000}}) {
    EXPECT_EQ(parse_cdc_spec(format_cdc_spec(c)), c);
  }
}

TEST(chunker_spec, RejectsBadSpecsNamingTheToken) {
  expect_rejected("fixed:avg=8K", "fixed");
  expect_rejected("", "expected cdc");
  expect_rejected("cdc:", "expected key=value");
  expect_rejected("cdc:avg", "avg");
  expect_rejected("cdc:=8K", "=8K");
  expect_rejected("cdc:window=64", "window");
  expect_rejected("cdc:avg=8Q", "avg=8Q");
  expect_rejected("cdc:avg=K", "avg=K");
  expect_rejected("cdc:avg=-8K", "avg=-8K");
  expect_rejected("cdc:avg=8KK", "avg=8KK");
  expect_rejected("cdc:avg=99999999999999999999", "avg=99999999999999999999");
  expect_rejected("cdc:avg=48K", "avg=49152");                 // not a power of two
  expect_rejected("cdc:min=32", "min=32");                     // below 64
  expect_rejected("cdc:min=64K:avg=64K", "avg=65536");         // avg not above min
  expect_rejected("cdc:avg=128K", "max=131072");               // max not above avg
  expect_rejected("cdc:min=1M:avg=2M:max=8M", "max=8388608");  // above 4 MiB
}

void expect_chunker_rejected(const std::string& spec, const std::string& token) {
  testing::expect_spec_rejected(parse_chunker_spec, spec, token);
}

TEST(chunker_spec, FixedSizes) {
  EXPECT_EQ(parse_chunker_spec("fixed"), chunker_spec::fixed());
  EXPECT_EQ(format_chunker_spec(chunker_spec::fixed()), "fixed");
  EXPECT_EQ(parse_chunker_spec("fixed:size=64"), chunker_spec::fixed(64));
  EXPECT_EQ(parse_chunker_spec("fixed:size=5000"), chunker_spec::fixed(5000));
  EXPECT_EQ(format_chunker_spec(chunker_spec::fixed(5000)), "fixed:size=5000");
  EXPECT_EQ(format_chunker_spec(chunker_spec::fixed(64 << 10)), "fixed:size=64K");
  for (const std::size_t n : {std::size_t{64}, std::size_t{1000}, std::size_t{4} << 20}) {
    EXPECT_EQ(parse_chunker_spec(format_chunker_spec(chunker_spec::fixed(n))),
              chunker_spec::fixed(n));
  }
  expect_chunker_rejected("fixed:size=63", "size=63");
  expect_chunker_rejected("fixed:size=5M", "size=5M");
  expect_chunker_rejected("fixed:size=", "size=");
  expect_chunker_rejected("fixed:64K", "64K");
  expect_chunker_rejected("rabin", "rabin");
}

TEST(chunker_spec, FixedSizeThatDoesNotDivideTheSlot) {
  // A 4 MiB slot cut every 3000 bytes: full chunks, then a shorter last one.
  const std::string slot(k_cdc_max_chunk, 'x');
  const auto ends = chunk_ends(slot, chunker_spec::fixed(3000));
  ASSERT_EQ(ends.size(), k_cdc_max_chunk / 3000 + 1);
  EXPECT_EQ(ends[0], 3000u);
  EXPECT_EQ(ends[ends.size() - 2], (k_cdc_max_chunk / 3000) * 3000);
  EXPECT_EQ(ends.back(), k_cdc_max_chunk);
  EXPECT_EQ(chunk_ends(std::string_view(slot).substr(0, 2999), chunker_spec::fixed(3000)),
            std::vector<std::size_t>{2999});
  EXPECT_TRUE(chunk_ends("", chunker_spec::fixed(3000)).empty());
}

TEST(chunker_spec, ContextLinesSlotsUpWithOneStream) {
  // Sixteen 1 MiB "slots" of one stream: each cut with the end of the
  // previous one as context gives the stream's cut points (plus the slot
  // edges), where a cut without context restarts at every slot.
  constexpr std::size_t k_slot = 1 << 20;
  const std::string d = splitmix_bytes(16 * k_slot, 9);
  const chunker_spec spec = chunker_spec::content_defined();
  const auto stream = cut_points(d, spec.cdc);
  int lined_up = 0;
  int lined_up_without_context = 0;
  for (std::size_t slot = 1; slot < 16; ++slot) {
    const std::string_view data = std::string_view(d).substr(slot * k_slot, k_slot);
    const std::string_view before = std::string_view(d).substr(0, slot * k_slot);
    std::vector<std::size_t> expected;
    for (const std::size_t c : stream) {
      if (c > slot * k_slot && c < (slot + 1) * k_slot) expected.push_back(c - slot * k_slot);
    }
    expected.push_back(k_slot);
    const auto with = chunk_ends(data, spec, before);
    EXPECT_EQ(with.back(), k_slot);
    for (std::size_t i = 0, start = 0; i < with.size(); start = with[i++]) {
      EXPECT_LE(with[i] - start, spec.cdc.max_size) << "slot " << slot << " chunk " << i;
    }
    lined_up += with == expected ? 1 : 0;
    lined_up_without_context += chunk_ends(data, spec) == expected ? 1 : 0;
  }
  EXPECT_GE(lined_up, 14) << "of 15 slots";
  EXPECT_LE(lined_up_without_context, 2) << "of 15 slots";
  // Fixed chunking ignores the context.
  EXPECT_EQ(chunk_ends(d.substr(0, 100), chunker_spec::fixed(64), "context"),
            (std::vector<std::size_t>{64, 100}));
  EXPECT_EQ(chunk_context_bytes(chunker_spec::fixed()), 0u);
  EXPECT_EQ(chunk_context_bytes(spec), 2 * spec.cdc.max_size);
  // Never more than the slot before (fs/data_path.cpp reads no further).
  chunker_spec huge = spec;
  huge.cdc.max_size = k_cdc_max_chunk;
  EXPECT_EQ(chunk_context_bytes(huge), k_cdc_max_chunk);
}

TEST(chunker_spec, ConstructorValidates) {
  EXPECT_THROW(cdc_chunker(cdc_options{16, 64, 256}), codec_error);
  EXPECT_THROW(cut_points("abc", cdc_options{1024, 3000, 8192}), codec_error);
}

}  // namespace
}  // namespace densefs::codec
