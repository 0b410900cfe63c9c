// Lepton through the codec API: the JPEG corpus round-trips byte-exact
// through lepton, broccoli and zstd (one walk of the corpus, Lepton is slow),
// non-JPEG chunks fall back to zstd, and corrupt Lepton payloads give
// codec_error, never a crash or a wrong size.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "tests/codec/codec_test_util.h"
#include "tests/test_env.h"

namespace densefs::codec {
namespace {

namespace fs = std::filesystem;

const fs::path k_corpus = test::corpus_dir("jpeg");

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> corpus_files() {
  std::vector<fs::path> files;
  if (!fs::is_directory(k_corpus)) return files;
  for (const auto& e : fs::directory_iterator(k_corpus)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

codec_options options_for(codec_id id) {
  codec_options o;
  o.preferred = id;
  return o;
}

// One walk of the corpus, two files at a time (lepton_jpeg runs ~5 MB/s per
// core): every file through every codec's encode_chunk, decode_chunk and
// decode_any_size, byte-exact.
TEST(lepton_corpus, every_jpeg_round_trips_through_each_codec) {
  const auto files = corpus_files();
  if (files.empty()) DENSEFS_SKIP_UNLESS_REQUIRED("no JPEG corpus at " << k_corpus);

  std::atomic<std::size_t> next{0};
  std::atomic<int> lepton_accepted{0};
  std::atomic<std::size_t> jpeg_bytes{0}, lepton_bytes{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    const std::lock_guard lock(failures_mutex);
    failures.push_back(what);
  };
  auto worker = [&] {
    for (std::size_t i; (i = next++) < files.size();) {
      const std::string name = files[i].filename().string();
      const std::string plain = read_file(files[i]);
      for (const codec_id id : {codec_id::lepton, codec_id::broccoli, codec_id::zstd}) {
        const std::string label = name + " via " + codec_name(id);
        try {
          codec_options o = options_for(id);
          // Count every JPEG Lepton verifies on, however little it saves
          // (FIELD-NOTES counted the same way).
          if (id == codec_id::lepton) o.min_savings = 0;
          const encoded_chunk e = encode_chunk(plain, o);
          if (decode_chunk(e.codec, e.bytes, plain.size()) != plain) {
            fail(label + ": decode_chunk returned different bytes");
          }
          if (id == codec_id::lepton) {
            if (e.codec == codec_id::lepton) {
              ++lepton_accepted;
              jpeg_bytes += plain.size();
              lepton_bytes += e.bytes.size();
              if (e.fell_back_from) fail(label + ": fell_back_from set on a lepton chunk");
              if (decode_any_size(e.codec, e.bytes, plain.size()) != plain) {
                fail(label + ": decode_any_size returned different bytes");
              }
            } else if (std::getenv("DENSEFS_TEST_VERBOSE")) {
              std::printf("%s: %s\n", label.c_str(), e.fallback_reason.c_str());
            }
            if (e.codec != codec_id::lepton &&
                (e.fell_back_from != codec_id::lepton || e.fallback_reason.empty())) {
              fail(label + ": stored as " + codec_name(e.codec) + " without a fallback reason");
            }
          } else if (e.codec != codec_id::raw &&
                     decode_any_size(e.codec, e.bytes, plain.size()) != plain) {
            fail(label + ": decode_any_size returned different bytes");
          }
        } catch (const std::exception& ex) {
          fail(label + ": " + ex.what());
        }
      }
    }
  };
  std::thread helper(worker);
  worker();
  helper.join();

  for (const auto& f : failures) ADD_FAILURE() << f;
  std::printf("lepton accepted %d of %zu corpus files, %.1f%% saved on those\n",
              lepton_accepted.load(), files.size(),
              jpeg_bytes ? 100.0 * (1.0 - double(lepton_bytes) / double(jpeg_bytes)) : 0.0);
  // FIELD-NOTES: lepton_jpeg 0.5.8 verifies on 33 of the 48 corpus files.
  EXPECT_GE(lepton_accepted.load(), 33);
  EXPECT_LT(lepton_accepted.load(), int(files.size()));  // the corpus holds files it rejects
}

TEST(lepton_codec, non_jpeg_chunks_fall_back_to_zstd_without_a_lepton_attempt) {
  std::string text;
  while (text.size() < 100000) text += "not a jpeg, just text that compresses well ";
  const encoded_chunk e = encode_chunk(text, options_for(codec_id::lepton));
  EXPECT_EQ(e.codec, codec_id::zstd);
  EXPECT_EQ(e.fell_back_from, codec_id::lepton);
  EXPECT_NE(e.fallback_reason.find("JPEG"), std::string::npos) << e.fallback_reason;
  EXPECT_EQ(decode_chunk(e.codec, e.bytes, text.size()), text);

  // Random bytes after a JPEG signature: lepton rejects, zstd cannot shrink
  // it either, so the raw guard applies; the fallback is still recorded.
  std::mt19937 rng(1);
  std::string fake = "\xff\xd8\xff";
  while (fake.size() < 50000) fake += static_cast<char>(rng());
  const encoded_chunk r = encode_chunk(fake, options_for(codec_id::lepton));
  EXPECT_EQ(r.codec, codec_id::raw);
  EXPECT_EQ(r.fell_back_from, codec_id::lepton);
  EXPECT_FALSE(r.fallback_reason.empty());
  EXPECT_EQ(r.bytes, fake);

  EXPECT_EQ(encode_chunk("", options_for(codec_id::lepton)).codec, codec_id::raw);
}

// The smallest corpus file Lepton takes, encoded once for the hostile-input
// tests.
class lepton_decode : public testing::damaged_chunk_test<codec_id::lepton> {
 protected:
  void SetUp() override {
    auto files = corpus_files();
    if (files.empty()) DENSEFS_SKIP_UNLESS_REQUIRED("no JPEG corpus at " << k_corpus);
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return fs::file_size(a) < fs::file_size(b); });
    for (const auto& f : files) {
      if (fs::file_size(f) < 20000) continue;  // big enough to have real scan data
      plain_ = read_file(f);
      const encoded_chunk e = encode_chunk(plain_, options_for(codec_id::lepton));
      if (e.codec == codec_id::lepton) {
        stored_ = e.bytes;
        return;
      }
    }
    FAIL() << "lepton took no corpus file";
  }
};

TEST_F(lepton_decode, rejects_truncations) {
  std::vector<std::string> cut;
  for (const std::size_t keep : {std::size_t{0}, std::size_t{1}, std::size_t{10}, std::size_t{27},
                                 std::size_t{28}, std::size_t{100}, stored_.size() / 3,
                                 stored_.size() / 2, stored_.size() - 100, stored_.size() - 1}) {
    cut.push_back(stored_.substr(0, keep));
  }
  EXPECT_EQ(count_errors(cut), static_cast<int>(cut.size()));
}

TEST_F(lepton_decode, rejects_wrong_sizes_and_garbage) {
  EXPECT_EQ(decode_chunk(codec_id::lepton, stored_, plain_.size()), plain_);
  EXPECT_THROW(decode_chunk(codec_id::lepton, stored_, plain_.size() - 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::lepton, stored_, plain_.size() + 1), codec_error);
  EXPECT_THROW(decode_chunk(codec_id::lepton, stored_, 0), codec_error);
  // decode_any_size stops at its bound instead of growing past it.
  EXPECT_THROW(decode_any_size(codec_id::lepton, stored_, plain_.size() / 2), codec_error);

  std::mt19937 rng(2);
  std::vector<std::string> garbage;
  for (const std::size_t n : {1, 28, 100, 5000, 100000}) {
    std::string g(n, '\0');
    for (auto& c : g) c = static_cast<char>(rng());
    garbage.push_back(g);
    // A valid-looking Lepton magic and header followed by noise.
    garbage.push_back(stored_.substr(0, std::min<std::size_t>(28, stored_.size())) + g);
  }
  garbage.push_back(stored_ + stored_);
  garbage.push_back(stored_ + "garbage after the end");
  EXPECT_EQ(count_errors(garbage), static_cast<int>(garbage.size()));
}

TEST_F(lepton_decode, bit_flips_never_crash_or_change_the_size) {
  std::mt19937 rng(3);
  std::vector<std::string> flipped;
  // Every byte of the fixed header, then positions across the whole file.
  for (std::size_t pos = 0; pos < std::min<std::size_t>(32, stored_.size()); ++pos) {
    std::string bad = stored_;
    bad[pos] = static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
    flipped.push_back(bad);
  }
  for (int i = 0; i < 100; ++i) {
    std::string bad = stored_;
    const std::size_t pos = rng() % bad.size();
    bad[pos] = static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
    flipped.push_back(bad);
  }
  const int errors = count_errors(flipped);
  std::printf("lepton: %d of %zu bit flips detected as errors\n", errors, flipped.size());
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace densefs::codec
