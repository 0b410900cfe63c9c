// `densefs codec compress|decompress|concat` run in-process: round trips per
// codec, outputs that stock tools decode, and one-line errors that leave no
// partial output behind.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/test_env.h"
#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

using namespace tools::testing;  // tests/tools/tools_test_util.h
namespace stdfs = std::filesystem;

std::string text(std::size_t n) {
  static const char* const words[] = {"chunk", "store", "codec",  "brotli", "extent", "inode",
                                      "mount", "zstd",  "lepton", "daemon", "socket", "export"};
  std::mt19937_64 rng(42);
  std::string out;
  while (out.size() < n) {
    out += words[rng() % 12];
    out += rng() % 9 == 0 ? '\n' : ' ';
  }
  out.resize(n);
  return out;
}

std::string random(std::size_t n) {
  std::mt19937_64 rng(7);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

bool have_brotli() {
  return std::system("command -v brotli >/dev/null 2>&1") == 0;
}

// `brotli -d` of `in`; nullopt when it fails.
std::optional<std::string> stock_brotli_decode(const stdfs::path& in, const stdfs::path& out) {
  const std::string cmd =
      "brotli -d -f -o '" + out.string() + "' '" + in.string() + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  return read_file(out);
}

// The first corpus JPEG lepton takes (about 2 in 3 do), compressed to `out`.
std::optional<std::string> lepton_jpeg(const temp_dir& tmp, const stdfs::path& out) {
  const stdfs::path corpus = test::corpus_dir("jpeg");
  if (!stdfs::is_directory(corpus)) return std::nullopt;
  std::vector<stdfs::path> files;
  for (const auto& e : stdfs::directory_iterator(corpus)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (run_cli({"codec", "compress", "--codec", "lepton", f.string(), out.string()}).status == 0)
      return read_file(f);
  }
  return std::nullopt;
}

struct codec_case {
  const char* codec;
  std::vector<std::string> options;
};

class codec_cli : public ::testing::TestWithParam<codec_case> {};

INSTANTIATE_TEST_SUITE_P(
    codecs, codec_cli,
    ::testing::Values(codec_case{"zstd", {}}, codec_case{"zstd", {"--level", "9"}},
                      codec_case{"broccoli", {}},
                      codec_case{"broccoli", {"--quality", "1", "--window", "16"}}),
    [](const auto& info) {
      return std::string(info.param.codec) + (info.param.options.empty() ? "" : "_options");
    });

TEST_P(codec_cli, text_random_and_empty_round_trip) {
  temp_dir tmp;
  // 9 MiB of text spans three 4 MiB pieces: the pieces must join.
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"text", text(9u << 20)}, {"random", random(5u << 20)}, {"empty", ""}, {"small", "x"}};
  for (const auto& [name, data] : inputs) {
    SCOPED_TRACE(name);
    write_file(tmp / name, data);
    std::vector<std::string> args = {"codec", "compress", "--codec", GetParam().codec};
    args.insert(args.end(), GetParam().options.begin(), GetParam().options.end());
    args.push_back((tmp / name).string());
    args.push_back((tmp / (name + ".c")).string());
    auto r = run_cli(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(r.out.empty() && r.err.empty()) << r.out << r.err;
    const std::string compressed = read_file(tmp / (name + ".c"));
    if (name == "text") {
      EXPECT_LT(compressed.size(), data.size() / 3);
    }
    r = run_cli({"codec", "decompress", "--codec", GetParam().codec, (tmp / (name + ".c")).string(),
                 (tmp / (name + ".d")).string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(read_file(tmp / (name + ".d")), data);
    // "-" writes to standard output.
    r = run_cli(
        {"codec", "decompress", "--codec", GetParam().codec, (tmp / (name + ".c")).string(), "-"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, data);
  }
}

TEST(codec_cli, broccoli_output_is_one_stream_stock_brotli_decodes) {
  if (!have_brotli())
    DENSEFS_SKIP_UNLESS_REQUIRED("the brotli command (Debian package brotli) is missing");
  temp_dir tmp;
  const std::string data = text(9u << 20) + random(1u << 20);
  write_file(tmp / "in", data);
  auto r = run_cli({"codec", "compress", "--codec", "broccoli", (tmp / "in").string(),
                    (tmp / "in.br").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto decoded = stock_brotli_decode(tmp / "in.br", tmp / "out");
  ASSERT_TRUE(decoded) << "brotli -d refused the output";
  EXPECT_TRUE(*decoded == data);
}

TEST(codec_cli, concat_joins_broccoli_files_into_one_stream) {
  temp_dir tmp;
  const std::vector<std::string> parts = {text(3u << 20), random(100000), "", text(5u << 20)};
  std::vector<std::string> args = {"codec", "concat", (tmp / "joined.br").string()};
  std::string all;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string name = "p" + std::to_string(i);
    write_file(tmp / name, parts[i]);
    const auto r = run_cli({"codec", "compress", "--codec", "broccoli", (tmp / name).string(),
                            (tmp / (name + ".br")).string()});
    ASSERT_EQ(r.status, 0) << r.err;
    args.push_back((tmp / (name + ".br")).string());
    all += parts[i];
  }
  auto r = run_cli(args);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli({"codec", "decompress", "--codec", "broccoli", (tmp / "joined.br").string(), "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out == all);
  if (!have_brotli())
    DENSEFS_SKIP_UNLESS_REQUIRED("the brotli command (Debian package brotli) is missing");
  const auto decoded = stock_brotli_decode(tmp / "joined.br", tmp / "joined");
  ASSERT_TRUE(decoded) << "brotli -d refused the joined stream";
  EXPECT_TRUE(*decoded == all);
}

TEST(codec_cli, lepton_round_trips_a_corpus_jpeg) {
  temp_dir tmp;
  const auto jpeg = lepton_jpeg(tmp, tmp / "photo.lep");
  if (!jpeg) DENSEFS_SKIP_UNLESS_REQUIRED("no corpus JPEG that lepton takes");
  const std::string lep = read_file(tmp / "photo.lep");
  EXPECT_LT(lep.size(), jpeg->size());  // ~20% smaller
  const auto r =
      run_cli({"codec", "decompress", "--codec", "lepton", (tmp / "photo.lep").string(), "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out == *jpeg);
}

TEST(codec_cli, lepton_refuses_a_non_jpeg_with_one_line) {
  temp_dir tmp;
  write_file(tmp / "notes.txt", text(100000));
  const auto r = run_cli({"codec", "compress", "--codec", "lepton", (tmp / "notes.txt").string(),
                          (tmp / "out").string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("not a JPEG"), std::string::npos) << r.err;
  EXPECT_FALSE(stdfs::exists(tmp / "out"));
}

TEST(codec_cli, corrupt_input_fails_and_leaves_no_output) {
  temp_dir tmp;
  write_file(tmp / "in", text(1u << 20));
  for (const char* codec : {"zstd", "broccoli"}) {
    SCOPED_TRACE(codec);
    ASSERT_EQ(run_cli({"codec", "compress", "--codec", codec, (tmp / "in").string(),
                       (tmp / "in.c").string()})
                  .status,
              0);
    std::string c = read_file(tmp / "in.c");
    // A flipped byte in the middle, and a truncated copy.
    c[c.size() / 2] = static_cast<char>(c[c.size() / 2] ^ 0x5a);
    write_file(tmp / "flipped", c);
    write_file(tmp / "truncated", read_file(tmp / "in.c").substr(0, c.size() / 2));
    for (const char* bad : {"flipped", "truncated"}) {
      SCOPED_TRACE(bad);
      const auto r = run_cli(
          {"codec", "decompress", "--codec", codec, (tmp / bad).string(), (tmp / "out").string()});
      EXPECT_EQ(r.status, k_exit_failure);
      EXPECT_TRUE(is_one_error_line(r.err));
      EXPECT_FALSE(stdfs::exists(tmp / "out"));
    }
  }
  // Not a stream of that codec at all.
  const auto r = run_cli(
      {"codec", "decompress", "--codec", "lepton", (tmp / "in").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_FALSE(stdfs::exists(tmp / "out"));
  // Nothing but the inputs is left in the directory (no temporary files).
  std::size_t entries = 0;
  for (const auto& e : stdfs::directory_iterator(tmp.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 4u);  // in, in.c, flipped, truncated
}

TEST(codec_cli, max_size_bounds_the_output) {
  temp_dir tmp;
  write_file(tmp / "zeros", std::string(3u << 20, '\0'));
  ASSERT_EQ(run_cli({"codec", "compress", "--codec", "broccoli", (tmp / "zeros").string(),
                     (tmp / "zeros.br").string()})
                .status,
            0);
  auto r = run_cli({"codec", "decompress", "--codec", "broccoli", "--max-size", "1000000",
                    (tmp / "zeros.br").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_FALSE(stdfs::exists(tmp / "out"));
  r = run_cli({"codec", "decompress", "--codec", "broccoli", "--max-size", "3145728",
               (tmp / "zeros.br").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(codec_cli, missing_files_and_bad_usage_are_one_line_errors) {
  temp_dir tmp;
  write_file(tmp / "a.br", "not brotli");
  const std::vector<std::vector<std::string>> failures = {
      {"codec", "compress", "--codec", "zstd", (tmp / "missing").string(), (tmp / "o").string()},
      {"codec", "decompress", "--codec", "broccoli", (tmp / "missing").string(),
       (tmp / "o").string()},
      {"codec", "concat", (tmp / "o").string(), (tmp / "missing").string()},
      {"codec", "concat", (tmp / "o").string(), (tmp / "a.br").string()},
      {"codec", "compress", "--codec", "zstd", tmp.path().string(), (tmp / "o").string()},
      {"codec", "compress", "--codec", "zstd", (tmp / "a.br").string(),
       (tmp / "no-such-dir" / "o").string()},
  };
  for (const auto& args : failures) {
    SCOPED_TRACE(args[1] + " " + args.back());
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, k_exit_failure);
    EXPECT_TRUE(is_one_error_line(r.err));
    EXPECT_FALSE(stdfs::exists(tmp / "o"));
  }
  const std::vector<std::vector<std::string>> usage = {
      {"codec"},
      {"codec", "compress", "--codec", "gzip", (tmp / "a.br").string(), (tmp / "o").string()},
      {"codec", "compress", "--codec", "raw", (tmp / "a.br").string(), (tmp / "o").string()},
      {"codec", "compress", "--codec", "zstd", "--quality", "3", (tmp / "a.br").string(),
       (tmp / "o").string()},
      {"codec", "compress", "--codec", "broccoli", "--quality", "12", (tmp / "a.br").string(),
       (tmp / "o").string()},
      {"codec", "compress", "--codec", "broccoli", "--window", "30", (tmp / "a.br").string(),
       (tmp / "o").string()},
      {"codec", "compress", "--codec", "zstd", (tmp / "a.br").string()},
  };
  for (const auto& args : usage) {
    SCOPED_TRACE(args.size() > 3 ? args[3] : "codec");
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, k_exit_usage);
    EXPECT_TRUE(is_one_error_line(r.err));
    EXPECT_FALSE(stdfs::exists(tmp / "o"));
  }
  const auto r = run_cli({"codec", "compress", "--codec", "gzip", "x", "y"});
  EXPECT_NE(r.err.find("gzip"), std::string::npos) << r.err;
}

TEST(codec_cli, help_lists_the_subcommands) {
  const auto r = run_cli({"help", "codec"});
  EXPECT_EQ(r.status, 0);
  for (const char* word : {"compress", "decompress", "concat"})
    EXPECT_NE(r.out.find(word), std::string::npos) << r.out;
}

}  // namespace
}  // namespace densefs::tools
