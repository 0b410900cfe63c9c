// `densefs fsck` in-process: exit status, the JSON report, refusing a store
// that is in use.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "store/store.h"
#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

using nlohmann::json;
using namespace tools::testing;  // tests/tools/tools_test_util.h

// A store with one chunk that no extent references.
void leak_a_chunk(const std::string& dir) {
  auto s = store::store::open(dir);
  store::transaction txn;
  txn.ref_chunk(s->prepare_chunk("nobody uses this chunk", true));
  s->commit(txn, true);
}

TEST(fsck_cli, a_fresh_store_is_clean) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  const auto r = run_cli({"fsck", dir});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("clean"), std::string::npos) << r.out;
  const auto deep = run_cli({"fsck", dir, "--deep", "--json"});
  EXPECT_EQ(deep.status, 0) << deep.err;
  EXPECT_TRUE(json::parse(deep.out).at("clean").get<bool>());
}

TEST(fsck_cli, problems_exit_1_until_repaired) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  leak_a_chunk(dir);

  const auto found = run_cli({"fsck", dir, "--json"});
  EXPECT_EQ(found.status, 1) << found.err;
  const json j = json::parse(found.out);
  EXPECT_FALSE(j.at("clean").get<bool>());
  EXPECT_EQ(j.at("problems").at("leaked_chunk").at("found").get<int>(), 1);

  const auto text = run_cli({"fsck", dir});
  EXPECT_EQ(text.status, 1);
  EXPECT_NE(text.out.find("leaked chunks"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--repair"), std::string::npos) << text.out;

  const auto repaired = run_cli({"fsck", dir, "--repair"});
  EXPECT_EQ(repaired.status, 0) << repaired.out << repaired.err;
  EXPECT_NE(repaired.out.find("1 repaired"), std::string::npos) << repaired.out;

  const auto again = run_cli({"fsck", dir, "--json"});
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_TRUE(json::parse(again.out).at("problems").empty());
}

TEST(fsck_cli, a_store_in_use_is_refused_with_one_line) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  const int fd = store::store::lock(dir);  // as a tool holds it
  auto r = run_cli({"fsck", dir, "--repair"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("in use by pid " + std::to_string(::getpid())), std::string::npos) << r.err;
  // As a mount holds it: the error names the mount point and the fix.
  store::store::record_lock_holder(fd, {::getpid(), "/mnt/somewhere", false, ""});
  r = run_cli({"fsck", dir});
  ::close(fd);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("is mounted on /mnt/somewhere"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("densefs umount /mnt/somewhere"), std::string::npos) << r.err;
}

TEST(fsck_cli, not_a_store_or_no_store_fails) {
  temp_dir tmp;
  const auto r = run_cli({"fsck", tmp.path().string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_EQ(run_cli({"fsck"}).status, 2);
}

}  // namespace
}  // namespace densefs::tools
