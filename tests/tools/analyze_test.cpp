// `densefs analyze DIR`, run in-process on small synthetic trees: the type
// breakdown, holes, dedup, sampling, JSON totals, and errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "codec/codec.h"
#include "tests/random_bytes.h"
#include "tests/test_env.h"
#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

using nlohmann::json;
using namespace tools::testing;  // tests/tools/tools_test_util.h
using test::random_bytes_mt19937;

namespace fs = std::filesystem;

void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

// Prose-like text: random words, random line lengths. Compresses well but
// not absurdly, and every piece of it compresses about the same.
std::string text_bytes(std::size_t n, std::uint32_t seed) {
  static const char* const words[] = {
      "the",    "file",  "system", "stores", "every", "chunk", "once",   "and",    "reads",
      "them",   "back",  "when",   "asked",  "zstd",  "for",   "binary", "brotli", "text",
      "lepton", "jpeg",  "photos", "while",  "raw",   "keeps", "media",  "as",     "it",
      "is",     "which", "saves",  "time",   "space", "disk",  "memory", "cache",  "inode"};
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(n + 16);
  while (s.size() < n) {
    s += words[rng() % std::size(words)];
    s += (rng() % 12 == 0) ? '\n' : ' ';
  }
  s.resize(n);
  return s;
}

json analyze_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"analyze"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("--json");
  const auto r = run_cli(args);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // no progress line off a terminal
  return json::parse(r.out);
}

const json* type_row(const json& report, const std::string& type) {
  for (const json& t : report.at("types")) {
    if (t.at("type") == type) return &t;
  }
  return nullptr;
}

std::uint64_t u64(const json& j, const char* key) {
  return j.at(key).get<std::uint64_t>();
}

// A mixed tree: text (one file duplicated), random bytes, a gzip file, an
// all-zero file, two corpus JPEGs when the corpus is there, a symlink.
class analyze_tree : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path d = tmp_.path();
    write_file(d / "src/main.c", text_bytes(300'000, 1));
    write_file(d / "src/notes.txt", text_bytes(200'000, 2));
    write_file(d / "src/copy/notes.txt", text_bytes(200'000, 2));  // a duplicate
    write_file(d / "README", text_bytes(5'000, 3));
    write_file(d / "data/random.bin", random_bytes_mt19937(3 << 20, 4));
    write_file(d / "data/logs.gz", "\x1f\x8b\x08\x00" + random_bytes_mt19937(500'000, 5));
    write_file(d / "data/zeros.img", std::string(5 << 20, '\0'));  // 4 MiB + 1 MiB of holes
    write_file(d / "empty", "");
    fs::create_symlink(d / "data/random.bin", d / "link.bin");
    const fs::path corpus = test::corpus_dir("jpeg");
    for (const char* name : {"android.jpg", "iphone.jpg"}) {
      if (fs::exists(corpus / name)) {
        fs::create_directories(d / "photos");
        fs::copy_file(corpus / name, d / "photos" / name);
        ++jpegs_;
      }
    }
  }

  temp_dir tmp_;
  int jpegs_ = 0;
};

TEST_F(analyze_tree, type_breakdown) {
  const json r = analyze_json({tmp_.path().string()});
  const json* text = type_row(r, "text");
  const json* other = type_row(r, "other");
  const json* gzip = type_row(r, "gzip");
  ASSERT_TRUE(text && other && gzip) << r.dump(2);
  EXPECT_EQ(u64(*text, "files"), 4u);
  EXPECT_EQ(u64(*other, "files"), 2u);  // random.bin, zeros.img
  EXPECT_EQ(u64(*gzip, "files"), 1u);
  EXPECT_EQ(text->at("codec"), "broccoli:quality=5:window=22");
  EXPECT_EQ(gzip->at("codec"), "deflate");
  // Not a real deflate stream: the deflate codec refuses it, counted.
  EXPECT_EQ(u64(*gzip, "fallbacks"), 1u);
  EXPECT_EQ(other->at("codec"), "zstd:level=3");
  EXPECT_EQ(type_row(r, "unknown")->at("files"), 1);  // the empty file
  if (jpegs_ > 0) {
    const json* jpeg = type_row(r, "jpeg");
    ASSERT_TRUE(jpeg);
    EXPECT_EQ(u64(*jpeg, "files"), static_cast<std::uint64_t>(jpegs_));
    EXPECT_EQ(jpeg->at("codec"), "lepton");
    if (codec::is_known_codec(static_cast<std::uint8_t>(codec::codec_id::lepton))) {
      // Lepton (or its zstd fallback) never stores a JPEG bigger than raw.
      EXPECT_LE(u64(*jpeg, "stored_bytes"), u64(*jpeg, "logical_bytes"));
    }
  }
  // The symlink is not followed; nothing was unreadable.
  EXPECT_EQ(r.at("skipped").at("not_regular"), 1);
  EXPECT_EQ(r.at("skipped").at("unreadable"), 0);

  // Text compresses a lot; random data and the gzip stream do not.
  EXPECT_GT(text->at("savings").get<double>(), 0.5);
  EXPECT_EQ(u64(*gzip, "stored_bytes"), u64(*gzip, "logical_bytes"));
  // "other" is random data (stored raw by the raw guard) plus holes.
  EXPECT_EQ(u64(*other, "hole_bytes"), 5u << 20);
  EXPECT_EQ(u64(*other, "stored_bytes"), 3u << 20);
}

TEST_F(analyze_tree, totals_add_up) {
  const json r = analyze_json({tmp_.path().string()});
  const json& totals = r.at("totals");
  std::uint64_t files = 0, logical = 0, stored = 0, holes = 0, dups = 0, unique = 0;
  for (const json& t : r.at("types")) {
    files += u64(t, "files");
    logical += u64(t, "logical_bytes");
    stored += u64(t, "stored_bytes");
    holes += u64(t, "hole_bytes");
    dups += u64(t, "duplicate_bytes");
    unique += u64(t, "unique_bytes");
    EXPECT_EQ(u64(t, "logical_bytes"),
              u64(t, "hole_bytes") + u64(t, "duplicate_bytes") + u64(t, "unique_bytes"))
        << t.dump();
  }
  EXPECT_EQ(files, u64(totals, "files"));
  EXPECT_EQ(files, 8u + static_cast<std::uint64_t>(jpegs_));
  EXPECT_EQ(logical, u64(totals, "logical_bytes"));
  EXPECT_EQ(stored, u64(totals, "stored_bytes"));
  EXPECT_EQ(holes, u64(totals, "hole_bytes"));
  EXPECT_EQ(dups, u64(totals, "duplicate_bytes"));
  EXPECT_EQ(unique, u64(totals, "unique_bytes"));

  // The duplicated text file is stored once.
  EXPECT_EQ(u64(totals, "duplicate_bytes"), 200'000u);
  EXPECT_EQ(u64(totals, "duplicate_chunks"), 1u);  // text's chunks: 256 KiB and more

  // Everything fits in the default sample: exact, every unique chunk encoded.
  EXPECT_FALSE(totals.at("estimated").get<bool>());
  EXPECT_EQ(u64(totals, "measured_bytes"), unique);
  // Everything but the holes went through a codec (the gzip file through
  // deflate, which refused it, then zstd).
  EXPECT_EQ(u64(totals, "encoded_bytes"), unique);

  // The per-codec table covers the same unique bytes.
  std::uint64_t codec_plain = 0, codec_stored = 0;
  for (const json& c : r.at("codecs")) {
    codec_plain += u64(c, "plain_bytes");
    codec_stored += u64(c, "stored_bytes");
  }
  EXPECT_EQ(codec_plain, unique);
  EXPECT_EQ(codec_stored, stored);
  EXPECT_NEAR(totals.at("savings").get<double>(),
              1.0 - static_cast<double>(stored) / static_cast<double>(logical), 1e-9);
}

TEST_F(analyze_tree, human_output) {
  const auto r = run_cli({"analyze", tmp_.path().string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* word :
       {"type", "text", "gzip", "broccoli", "total", "stored as", "dedup", "exact"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from\n" << r.out;
  }
}

TEST_F(analyze_tree, policy_override) {
  const json r = analyze_json({tmp_.path().string(), "--codec", "zstd:level=1"});
  for (const json& t : r.at("types")) EXPECT_EQ(t.at("codec"), "zstd:level=1") << t.dump();
  EXPECT_EQ(r.at("policy").get<std::string>().find("broccoli"), std::string::npos);
  // gzip now goes through zstd, which cannot shrink random data: still raw.
  const json* gzip = type_row(r, "gzip");
  ASSERT_TRUE(gzip);
  EXPECT_EQ(u64(*gzip, "stored_bytes"), u64(*gzip, "logical_bytes"));
}

TEST(analyze, sampling_extrapolates_and_says_so) {
  temp_dir tmp;
  // 6 text files of 4 MiB + a bit: 12 chunks, all alike.
  for (int i = 0; i < 6; ++i) {
    write_file(tmp / ("t" + std::to_string(i) + ".txt"), text_bytes((4 << 20) + 100'000, 10 + i));
  }
  const json full = analyze_json({tmp.path().string(), "--full"});
  const json sampled = analyze_json({tmp.path().string(), "--sample-bytes", "8MiB"});
  const json& ft = *type_row(full, "text");
  const json& st = *type_row(sampled, "text");
  EXPECT_FALSE(ft.at("estimated").get<bool>());
  EXPECT_TRUE(st.at("estimated").get<bool>());
  EXPECT_TRUE(sampled.at("totals").at("estimated").get<bool>());
  EXPECT_EQ(u64(ft, "encoded_bytes"), u64(ft, "unique_bytes"));
  EXPECT_EQ(u64(ft, "measured_bytes"), u64(ft, "unique_bytes"));
  // Part of the data was encoded (about 8 MiB is expected), not all 24.6 MiB.
  EXPECT_GT(u64(st, "encoded_bytes"), 0u);
  EXPECT_LT(u64(st, "encoded_bytes"), u64(st, "unique_bytes") * 3 / 4);
  EXPECT_EQ(u64(st, "measured_bytes"), u64(st, "encoded_bytes"));
  EXPECT_EQ(u64(st, "unique_bytes"), u64(ft, "unique_bytes"));
  // The estimate is close to the exact figure for uniform data.
  const double exact = static_cast<double>(u64(ft, "stored_bytes"));
  EXPECT_NEAR(static_cast<double>(u64(st, "stored_bytes")), exact, exact * 0.03);
  // The same tree gives the same sample.
  EXPECT_EQ(analyze_json({tmp.path().string(), "--sample-bytes", "8MiB"}).at("totals"),
            sampled.at("totals"));

  const auto human = run_cli({"analyze", tmp.path().string(), "--sample-bytes", "8MiB"});
  EXPECT_NE(human.out.find("~ estimated"), std::string::npos) << human.out;
}

TEST(analyze, raw_types_are_exact_without_encoding) {
  temp_dir tmp;
  write_file(tmp / "a.xz", std::string("\xFD"
                                       "7zXZ\0",
                                       6) +
                               random_bytes_mt19937(5 << 20, 7));
  const json r = analyze_json({tmp.path().string(), "--sample-bytes", "1"});
  const json* archive_row = type_row(r, "archive");
  ASSERT_NE(archive_row, nullptr) << r.dump();
  const json& archive = *archive_row;
  EXPECT_FALSE(archive.at("estimated").get<bool>());
  EXPECT_EQ(u64(archive, "stored_bytes"), (5u << 20) + 6);
  EXPECT_EQ(u64(archive, "encoded_bytes"), 0u);
  EXPECT_EQ(u64(archive, "measured_bytes"), (5u << 20) + 6);
}

TEST(analyze, threads_do_not_change_the_figures) {
  temp_dir tmp;
  for (int i = 0; i < 5; ++i) {
    write_file(tmp / ("f" + std::to_string(i) + ".log"), text_bytes(3 << 20, 20 + i));
  }
  write_file(tmp / "r.bin", random_bytes_mt19937(6 << 20, 9));
  const json one = analyze_json({tmp.path().string(), "--threads", "1"});
  const json four = analyze_json({tmp.path().string(), "--threads", "4"});
  EXPECT_EQ(one.at("totals"), four.at("totals"));
  EXPECT_EQ(one.at("types"), four.at("types"));
}

TEST(analyze, errors_are_one_line) {
  temp_dir tmp;
  write_file(tmp / "file.txt", "hello\n");

  auto r = run_cli({"analyze", (tmp / "missing").string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());

  r = run_cli({"analyze", (tmp / "file.txt").string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.err;

  r = run_cli({"analyze", tmp.path().string(), "--codec", "default/picture=zstd"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("picture"), std::string::npos) << r.err;

  r = run_cli({"analyze", tmp.path().string(), "--sample-bytes", "lots"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));

  r = run_cli({"analyze"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
}

// Runs `check` as an unprivileged user when the test runs as root (root
// reads every file); returns whether it passed.
template <typename F>
bool run_unprivileged(F check) {
  if (::geteuid() != 0) return check();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // nobody:nogroup
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    ::_exit(check() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(analyze, unreadable_files_are_counted_and_skipped) {
  temp_dir tmp;
  fs::permissions(tmp.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  write_file(tmp / "ok.txt", text_bytes(10'000, 1));
  write_file(tmp / "secret.txt", text_bytes(10'000, 2));
  fs::create_directories(tmp / "private");
  write_file(tmp / "private/hidden.txt", text_bytes(10'000, 3));
  fs::permissions(tmp / "ok.txt",
                  fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(tmp / "secret.txt", fs::perms::none);
  fs::permissions(tmp / "private", fs::perms::owner_all);
  EXPECT_TRUE(run_unprivileged([&] {
    const auto r = run_cli({"analyze", tmp.path().string(), "--json"});
    if (r.status != 0) return false;
    const json j = json::parse(r.out);
    // secret.txt and the directory private/ could not be opened.
    return j.at("skipped").at("unreadable") == 2 && j.at("totals").at("files") == 1 &&
           j.at("totals").at("logical_bytes") == 10'000;
  }));
}

}  // namespace
}  // namespace densefs::tools
