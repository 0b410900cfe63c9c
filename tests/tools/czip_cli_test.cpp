// `densefs czip pack|unpack|info|verify|cat` run in-process: files and
// stdin/stdout pipes, JSON output, and one-line errors that leave no partial
// output behind.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "codec/policy.h"
#include "tests/random_bytes.h"
#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

using namespace tools::testing;  // tests/tools/tools_test_util.h
namespace stdfs = std::filesystem;

std::string sample(std::size_t n) {
  std::string out;
  std::uint64_t x = 88172645463325252ull;
  while (out.size() < n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    // Half text (compresses, repeats), half noise.
    out += (x % 4 == 0) ? std::string(reinterpret_cast<const char*>(&x), 8)
                        : "record " + std::to_string(x % 5000) + "\n";
  }
  out.resize(n);
  return out;
}

// Runs `fn` with standard input reading `data` through a pipe (not
// seekable, like `cat x | densefs czip ...`).
template <class F>
auto with_stdin_pipe(const std::string& data, F fn) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::thread feeder([&] {
    std::string_view rest = data;
    while (!rest.empty()) {
      const ssize_t n = ::write(fds[1], rest.data(), rest.size());
      if (n <= 0) break;
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    ::close(fds[1]);
  });
  const int saved = ::dup(STDIN_FILENO);
  ::dup2(fds[0], STDIN_FILENO);
  ::close(fds[0]);
  auto result = fn();
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  feeder.join();
  return result;
}

// Files in `dir` other than `keep`: leftovers of a failed command.
std::vector<std::string> other_files(const stdfs::path& dir, const std::set<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    if (!keep.count(e.path().filename().string())) out.push_back(e.path().filename().string());
  }
  return out;
}

// The chunker a czip's header names (`czip info --json`).
std::string chunker_of(const stdfs::path& czip) {
  const auto r = run_cli({"czip", "info", "--json", czip.string()});
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? nlohmann::json::parse(r.out)["chunker"].get<std::string>() : "";
}

TEST(czip_cli, cuts_as_a_mount_would_without_a_chunker) {
  const temp_dir tmp;
  // (name, bytes, the chunker a mount's default policy gives that type)
  const std::vector<std::tuple<std::string, std::string, std::string>> files = {
      {"notes.txt", std::string(300000, 'a') + "\nsome words of text\n",
       "cdc:min=256K:avg=1M:max=4M"},
      {"noise.bin", test::random_bytes(300000, 7), "cdc:min=8K:avg=32K:max=128K"},
      {"photo.jpg", std::string("\xff\xd8\xff\xe0", 4) + test::random_bytes(300000, 8), "fixed"},
  };
  for (const auto& [name, bytes, chunker] : files) {
    write_file(tmp / name, bytes);
    const auto r =
        run_cli({"czip", "pack", (tmp / name).string(), (tmp / (name + ".czip")).string()});
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_EQ(chunker_of(tmp / (name + ".czip")), chunker) << name;
    EXPECT_EQ(run_cli({"czip", "unpack", (tmp / (name + ".czip")).string(),
                       (tmp / (name + ".out")).string()})
                  .status,
              0);
    EXPECT_EQ(read_file(tmp / (name + ".out")), bytes) << name;
  }
  // --chunker still decides.
  const auto r = run_cli({"czip", "pack", "--chunker", "cdc", (tmp / "notes.txt").string(),
                          (tmp / "chosen.czip").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(chunker_of(tmp / "chosen.czip"), "cdc:min=8K:avg=32K:max=128K");
}

TEST(czip_cli, PackUnpackFiles) {
  const temp_dir tmp;
  const std::string data = sample(3 << 20);
  write_file(tmp / "in", data);
  auto r = run_cli({"czip", "pack", (tmp / "in").string(), (tmp / "in.czip").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  EXPECT_LT(stdfs::file_size(tmp / "in.czip"), data.size());
  r = run_cli({"czip", "unpack", (tmp / "in.czip").string(), (tmp / "out").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(tmp / "out"), data);

  r = run_cli({"czip", "verify", (tmp / "in.czip").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(": ok, "), std::string::npos) << r.out;

  r = run_cli({"czip", "info", (tmp / "in.czip").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("header mode"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("encryption       none"), std::string::npos) << r.out;

  r = run_cli({"czip", "info", (tmp / "in.czip").string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"], "header");
  EXPECT_EQ(j["original_size"], data.size());
  EXPECT_EQ(j["czip_size"], stdfs::file_size(tmp / "in.czip"));
  EXPECT_EQ(j["codec"], "zstd");
  // No --chunker: cut as a mount cuts a file of its type (czip_cli.
  // cuts_as_a_mount_would_without_a_chunker has each kind).
  EXPECT_EQ(j["chunker"], codec::format_chunker_spec(
                              codec::default_policy().chunker_for(codec::classify(data, "in"))));
  EXPECT_EQ(j["encryption"], "none");
  EXPECT_EQ(j["original_sha256"].get<std::string>().size(), 64u);
}

TEST(czip_cli, CatOffsetLength) {
  const temp_dir tmp;
  const std::string data = sample(1 << 20);
  write_file(tmp / "in", data);
  ASSERT_EQ(run_cli({"czip", "pack", (tmp / "in").string(), (tmp / "c").string()}).status, 0);
  auto r =
      run_cli({"czip", "cat", (tmp / "c").string(), "--offset", "123457", "--length", "70000"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, data.substr(123457, 70000));
  r = run_cli({"czip", "cat", (tmp / "c").string(), "--offset", "1048000"});
  EXPECT_EQ(r.out, data.substr(1048000));
  r = run_cli({"czip", "cat", (tmp / "c").string(), "--offset", "1048576", "--length", "10"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "");
  r = run_cli({"czip", "cat", (tmp / "c").string(), "--offset", "2000000"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(is_one_error_line(r.err));
}

TEST(czip_cli, StdoutGivesFooterModeAndStdinPipesWork) {
  const temp_dir tmp;
  const std::string data = sample(2 << 20);
  // pack - -: stdin from a pipe, stdout (not seekable) gets footer mode.
  const auto packed = with_stdin_pipe(data, [&] { return run_cli({"czip", "pack", "-", "-"}); });
  ASSERT_EQ(packed.status, 0) << packed.err;
  write_file(tmp / "f.czip", packed.out);
  auto r = run_cli({"czip", "info", "--json", (tmp / "f.czip").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["layout"], "footer");
  // unpack - -: a footer-mode czip through a pipe (spooled to a temp file).
  const auto unpacked = with_stdin_pipe(packed.out, [&] {
    return run_cli({"czip", "unpack", "-", "-"});
  });
  ASSERT_EQ(unpacked.status, 0) << unpacked.err;
  EXPECT_TRUE(unpacked.out == data);
  // cat from a pipe.
  const auto part = with_stdin_pipe(packed.out, [&] {
    return run_cli({"czip", "cat", "-", "--offset", "1000", "--length", "5000"});
  });
  EXPECT_EQ(part.out, data.substr(1000, 5000));
}

TEST(czip_cli, EncryptedWithPassphraseFileAndEnvironment) {
  const temp_dir tmp;
  const std::string data = sample(500000);
  write_file(tmp / "in", data);
  write_file(tmp / "pass", "s3cret words\n");
  write_file(tmp / "wrong", "s3cret word\n");
  auto r = run_cli({"czip", "pack", "--encrypt", "--passphrase-file", (tmp / "pass").string(),
                    (tmp / "in").string(), (tmp / "e.czip").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  // The plain data does not appear in the czip.
  EXPECT_EQ(read_file(tmp / "e.czip").find(data.substr(0, 40)), std::string::npos);

  r = run_cli({"czip", "unpack", "--passphrase-file", (tmp / "wrong").string(),
               (tmp / "e.czip").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("wrong passphrase or corrupt czip"), std::string::npos) << r.err;
  EXPECT_FALSE(stdfs::exists(tmp / "out"));

  r = run_cli({"czip", "unpack", (tmp / "e.czip").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("give the passphrase"), std::string::npos) << r.err;

  ::setenv("DENSEFS_CZIP_PASSPHRASE", "s3cret words", 1);
  r = run_cli({"czip", "unpack", (tmp / "e.czip").string(), (tmp / "out").string()});
  ::unsetenv("DENSEFS_CZIP_PASSPHRASE");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(tmp / "out"), data);

  // info works without the passphrase; verify checks the file hash only.
  r = run_cli({"czip", "info", "--json", (tmp / "e.czip").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["encryption"], "convergent-aes256gcm-scrypt");
  EXPECT_FALSE(j.contains("original_sha256"));
  r = run_cli({"czip", "verify", "--json", (tmp / "e.czip").string()});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["content_checked"], false);
  r = run_cli({"czip", "verify", "--json", "--passphrase-file", (tmp / "pass").string(),
               (tmp / "e.czip").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["content_checked"], true);

  // Never on the command line.
  r = run_cli(
      {"czip", "pack", "--passphrase", "x", (tmp / "in").string(), (tmp / "x.czip").string()});
  EXPECT_EQ(r.status, 2);
  // --encrypt without a passphrase is a usage error.
  r = run_cli({"czip", "pack", "--encrypt", (tmp / "in").string(), (tmp / "x.czip").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_FALSE(stdfs::exists(tmp / "x.czip"));
}

TEST(czip_cli, CorruptCzipIsOneLineAndLeavesOutputAlone) {
  const temp_dir tmp;
  const std::string data = sample(400000);
  write_file(tmp / "in", data);
  ASSERT_EQ(run_cli({"czip", "pack", "--chunker", "fixed:size=64K", (tmp / "in").string(),
                     (tmp / "c.czip").string()})
                .status,
            0);
  std::string bytes = read_file(tmp / "c.czip");
  bytes[300] ^= 0x10;  // chunk 0's payload
  write_file(tmp / "bad.czip", bytes);
  write_file(tmp / "out", "previous contents");

  auto r = run_cli({"czip", "unpack", (tmp / "bad.czip").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("bad.czip: chunk 0 (original offset 0)"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(tmp / "out"), "previous contents");
  EXPECT_EQ(other_files(tmp.path(), {"in", "c.czip", "bad.czip", "out"}),
            std::vector<std::string>{});

  r = run_cli({"czip", "verify", (tmp / "bad.czip").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("stored bytes hash mismatch"), std::string::npos) << r.out;
  r = run_cli({"czip", "verify", "--json", (tmp / "bad.czip").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(nlohmann::json::parse(r.out)["ok"], false);

  write_file(tmp / "short.czip", read_file(tmp / "c.czip").substr(0, 1000));
  r = run_cli({"czip", "info", (tmp / "short.czip").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("short.czip: truncated"), std::string::npos) << r.err;

  r = run_cli({"czip", "info", (tmp / "in").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("not a czip file"), std::string::npos) << r.err;

  r = run_cli({"czip", "unpack", (tmp / "missing").string(), (tmp / "out").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
}

TEST(czip_cli, CodecAndChunkerOptions) {
  const temp_dir tmp;
  const std::string data = sample(300000);
  write_file(tmp / "in", data);
  auto r = run_cli({"czip", "pack", "--codec", "zstd:level=9", "--chunker", "fixed:size=16K",
                    (tmp / "in").string(), (tmp / "c").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli({"czip", "info", "--json", (tmp / "c").string()});
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["chunker"], "fixed:size=16K");
  EXPECT_EQ(j["chunks"], (data.size() + 16383) / 16384);
  r = run_cli({"czip", "unpack", (tmp / "c").string(), "-"});
  EXPECT_TRUE(r.out == data);

  r = run_cli(
      {"czip", "pack", "--codec", "zstd:speed=9", (tmp / "in").string(), (tmp / "d").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli(
      {"czip", "pack", "--chunker", "fixed:size=8M", (tmp / "in").string(), (tmp / "d").string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_FALSE(stdfs::exists(tmp / "d"));
}

}  // namespace
}  // namespace densefs::tools
