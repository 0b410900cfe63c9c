// The densefs CLI run in-process: what a user sees on stdout, stderr and in
// the exit status.
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "store/store.h"
#include "tests/tools/tools_test_util.h"
#include "tools/format.h"
#include "tools/render.h"

namespace densefs::tools {
namespace {

using nlohmann::json;
using namespace tools::testing;  // tests/tools/tools_test_util.h

TEST(cli, mkfs_creates_a_store_that_checks) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  const auto r = run_cli({"mkfs", dir});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find(dir), std::string::npos) << r.out;
  EXPECT_NO_THROW(store::store::check(dir));
  auto s = store::store::open(dir, store::store_open_options{.read_only = true});
  EXPECT_EQ(s->settings().codec_spec, codec::format_policy(codec::default_policy()));
}

TEST(cli, mkfs_records_the_codec) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  const auto r = run_cli({"mkfs", dir, "--codec", "zstd:level=9"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("zstd:level=9"), std::string::npos) << r.out;
  auto s = store::store::open(dir, store::store_open_options{.read_only = true});
  EXPECT_EQ(s->settings().codec_spec, "zstd:level=9");
}

TEST(cli, mkfs_into_a_non_empty_directory_fails_with_one_line) {
  temp_dir tmp;
  std::ofstream(tmp / "precious") << "do not touch";
  const auto r = run_cli({"mkfs", tmp.path().string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("densefs: mkfs: "), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(tmp / "precious"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "FORMAT"));
}

TEST(cli, mkfs_twice_fails) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  const auto r = run_cli({"mkfs", dir});
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(is_one_error_line(r.err));
}

TEST(cli, mkfs_with_a_bad_codec_fails_naming_it) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  for (const char* spec : {"gzip", "zstd:level=99", "zstd:speed=1"}) {
    SCOPED_TRACE(spec);
    const auto r = run_cli({"mkfs", dir, "--codec", spec});
    EXPECT_EQ(r.status, k_exit_usage);
    EXPECT_TRUE(is_one_error_line(r.err));
    EXPECT_FALSE(std::filesystem::exists(dir));
  }
  const auto r = run_cli({"mkfs", dir, "--codec", "gzip"});
  EXPECT_NE(r.err.find("gzip"), std::string::npos) << r.err;
}

TEST(cli, mkfs_usage_errors) {
  auto r = run_cli({"mkfs"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({"mkfs", "a", "b"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({"mkfs", "a", "--bogus"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
}

TEST(cli, stats_of_a_fresh_store_as_json) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  const auto r = run_cli({"stats", dir, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("files").get<std::uint64_t>(), 0u);
  EXPECT_EQ(j.at("logical_bytes").get<std::uint64_t>(), 0u);
  EXPECT_EQ(j.at("stored_bytes").get<std::uint64_t>(), 0u);
  EXPECT_EQ(j.at("chunks").get<std::uint64_t>(), 0u);
  EXPECT_GT(j.at("disk_bytes").get<std::uint64_t>(), 0u);
  EXPECT_TRUE(j.at("codecs").is_object());
}

TEST(cli, stats_of_a_fresh_store_for_humans) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  const auto r = run_cli({"stats", dir});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("logical size"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir), std::string::npos) << r.out;
}

TEST(cli, stats_of_a_plain_directory_fails_with_one_line) {
  temp_dir tmp;
  const auto r = run_cli({"stats", tmp.path().string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("is neither a densefs store nor a densefs mount"), std::string::npos)
      << r.err;
}

TEST(cli, stats_of_a_missing_path_fails_with_one_line) {
  temp_dir tmp;
  const auto r = run_cli({"stats", tmp / "missing"});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

TEST(cli, info_outside_a_mount_fails_with_one_line) {
  temp_dir tmp;
  std::ofstream(tmp / "file") << "x";
  auto r = run_cli({"info", tmp / "file"});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("not inside a densefs mount"), std::string::npos) << r.err;
  r = run_cli({"info", tmp / "missing", "--json"});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
}

TEST(cli, umount_of_something_not_mounted_fails_with_one_line) {
  temp_dir tmp;
  const auto r = run_cli({"umount", tmp.path().string()});
  EXPECT_EQ(r.status, k_exit_failure);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("densefs: umount " + tmp.path().string()), std::string::npos) << r.err;
}

TEST(cli, unknown_commands_are_usage_errors) {
  auto r = run_cli({"frobnicate"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("frobnicate"), std::string::npos);
  r = run_cli({"frobnicate", "a", "b", "c"});  // three paths are not the mount form
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({"--frobnicate"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({"help", "frobnicate"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({""});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_NE(r.err.find("usage"), std::string::npos);
}

TEST(cli, version_and_help) {
  auto r = run_cli({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("densefs ", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find("unknown"), std::string::npos) << r.out;

  r = run_cli({"help"});
  EXPECT_EQ(r.status, 0);
  for (const char* c : {"mkfs", "mount", "umount", "stats", "info"}) {
    EXPECT_NE(r.out.find(c), std::string::npos) << c;
  }
  r = run_cli({"help", "mkfs"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--codec"), std::string::npos) << r.out;
  r = run_cli({"stats", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--json"), std::string::npos) << r.out;
}

TEST(format, human_sizes) {
  EXPECT_EQ(human_size(0), "0 B");
  EXPECT_EQ(human_size(1023), "1023 B");
  EXPECT_EQ(human_size(1024), "1.0 KiB");
  EXPECT_EQ(human_size(1536), "1.5 KiB");
  EXPECT_EQ(human_size(1048575), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(human_size(std::uint64_t{5} << 30), "5.0 GiB");
  EXPECT_EQ(human_size(std::uint64_t{3} << 40), "3.0 TiB");
}

TEST(format, ratios) {
  EXPECT_EQ(human_ratio(0, 0), "-");
  EXPECT_EQ(human_ratio(25, 100), "25.0% (4.00 x)");
  EXPECT_EQ(human_ratio(0, 100), "0.0%");
  EXPECT_EQ(human_ratio(100, 100), "100.0% (1.00 x)");
}

TEST(render, stats_table) {
  store::store_stats s;
  s.files = 3;
  s.directories = 2;
  s.logical_bytes = std::uint64_t{8} << 20;
  s.referenced_bytes = s.logical_bytes;
  s.chunks = 2;
  s.unique_plain_bytes = std::uint64_t{4} << 20;
  s.stored_bytes = std::uint64_t{2} << 20;
  s.dedup_saved_bytes = std::uint64_t{4} << 20;
  s.chunks_by_codec[1] = 2;
  s.stored_by_codec[1] = s.stored_bytes;
  s.disk_bytes = std::uint64_t{3} << 20;
  const std::string out = render_stats("/srv/store", json::parse(store::to_json(s)));
  EXPECT_NE(out.find("3 (2 directories)"), std::string::npos) << out;
  EXPECT_NE(out.find("8.0 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("25.0% (4.00 x)"), std::string::npos) << out;
  EXPECT_NE(out.find("zstd"), std::string::npos) << out;
  EXPECT_NE(out.find("dedup savings   4.0 MiB"), std::string::npos) << out;
}

TEST(render, info_table_follows_the_xattr_schema) {
  const json j = json::parse(R"({
    "ino": 42, "type": "file", "size": 5000000, "stored_bytes": 1000000,
    "chunks": [
      {"offset": 0, "length": 4194304, "hash": "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
       "codec": "zstd", "plain_size": 4194304, "stored_size": 900000, "refcount": 2},
      {"offset": 4194304, "length": 805696, "hash": "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100",
       "codec": "raw", "plain_size": 805696, "stored_size": 805696, "refcount": 1}],
    "pending_bytes": 0})");
  std::string out = render_info("/mnt/f", j, false);
  EXPECT_EQ(
      out.rfind(
          "/mnt/f: file, inode 42, size 4.8 MiB, stored 976.6 KiB (20.0% (5.00 x)), 2 chunks\n", 0),
      0u)
      << out;
  EXPECT_NE(out.find("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
            std::string::npos);
  EXPECT_NE(out.find("4194304  805696"), std::string::npos) << out;
  out = render_info("/mnt/f", j, true);
  EXPECT_NE(out.find("0011223344556677..."), std::string::npos) << out;
  EXPECT_EQ(out.find("00112233445566778899aabbccddeeff0011"), std::string::npos) << out;

  json broken = j;
  broken.erase("pending_bytes");
  EXPECT_THROW(render_info("/mnt/f", broken, false), json::exception);
}

}  // namespace
}  // namespace densefs::tools
