// `densefs gc` in-process on unmounted stores: --dry-run changes nothing,
// gc gives the space back, --json, and one-line errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <random>

#include "store/store.h"
#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

using nlohmann::json;
using namespace tools::testing;  // tests/tools/tools_test_util.h

// 16 chunks of 1 MiB of incompressible data: written, then all deleted but
// the first. The store is closed again.
void write_and_delete(const std::string& dir) {
  auto s = store::store::open(dir);
  std::mt19937_64 rng(7);
  std::vector<store::chunk_hash> hashes;
  for (int i = 0; i < 16; ++i) {
    std::string data(1 << 20, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    store::transaction txn;
    const auto chunk = s->prepare_chunk(data, true);
    txn.ref_chunk(chunk);
    s->commit(txn);
    hashes.push_back(chunk.hash);
  }
  store::transaction txn;
  for (std::size_t i = 1; i < hashes.size(); ++i) txn.unref_chunk(hashes[i]);
  s->commit(txn, true);
}

std::uint64_t field(const json& j, const char* report, const char* name) {
  return j.at(report).at(name).get<std::uint64_t>();
}

TEST(gc_cli, dry_run_reports_and_changes_nothing_then_gc_collects) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  write_and_delete(dir);

  const auto dry = run_cli({"gc", dir, "--dry-run", "--json"});
  ASSERT_EQ(dry.status, 0) << dry.err;
  EXPECT_TRUE(dry.err.empty()) << dry.err;  // no progress line when not a terminal
  const json d = json::parse(dry.out);
  EXPECT_TRUE(d.at("dry_run").get<bool>());
  EXPECT_FALSE(d.at("mounted").get<bool>());
  EXPECT_FALSE(d.contains("after"));
  EXPECT_EQ(field(d, "before", "chunks"), 1u);
  EXPECT_EQ(field(d, "before", "live_payload_bytes"), 1u << 20);
  EXPECT_GE(field(d, "before", "reclaimable_bytes"), 15u << 20) << dry.out;

  const auto again = run_cli({"gc", dir, "--dry-run", "--json"});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(field(json::parse(again.out), "before", "payload_garbage_bytes"),
            field(d, "before", "payload_garbage_bytes"));

  const auto text = run_cli({"gc", dir, "--dry-run"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("reclaimable"), std::string::npos) << text.out;

  const auto collected = run_cli({"gc", dir, "--json"});
  ASSERT_EQ(collected.status, 0) << collected.err;
  const json c = json::parse(collected.out);
  EXPECT_FALSE(c.at("dry_run").get<bool>());
  EXPECT_GE(c.at("reclaimed_bytes").get<std::uint64_t>(), 15u << 20) << collected.out;
  EXPECT_EQ(field(c, "after", "chunks"), 1u);
  EXPECT_GE(field(c, "after", "payload_file_bytes"), 1u << 20);
  EXPECT_LE(field(c, "after", "payload_file_bytes"), (1u << 20) + (64u << 10)) << collected.out;
  EXPECT_EQ(c.at("before").at("disk_bytes").get<std::uint64_t>() -
                c.at("after").at("disk_bytes").get<std::uint64_t>(),
            c.at("reclaimed_bytes").get<std::uint64_t>());

  // The chunk left is intact (read_chunk checks the payload's checksum and
  // the content's SHA-256), and a second gc finds nothing to do.
  {
    const auto s = store::store::open(dir);
    std::vector<store::chunk_hash> left;
    s->scan_records(store::k_cf_chunks, {}, [&](std::string_view key, std::string_view) {
      left.push_back(store::chunk_hash::from_bytes(key));
      return true;
    });
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(s->read_chunk(left[0])->size(), 1u << 20);
  }
  const auto second = run_cli({"gc", dir});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.out.find("reclaimed"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("payload files"), std::string::npos) << second.out;
}

TEST(gc_cli, a_locked_store_without_a_daemon_is_one_error_line) {
  temp_dir tmp;
  const std::string dir = tmp / "store";
  ASSERT_EQ(run_cli({"mkfs", dir}).status, 0);
  const int fd = store::store::lock(dir);  // as a mount holds it, but no control socket
  const auto r = run_cli({"gc", dir});
  ::close(fd);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("no densefs daemon"), std::string::npos) << r.err;
}

TEST(gc_cli, not_a_store_and_bad_usage) {
  temp_dir tmp;
  const auto missing = run_cli({"gc", tmp / "nothing"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_TRUE(is_one_error_line(missing.err));
  const auto usage = run_cli({"gc"});
  EXPECT_EQ(usage.status, 2);
  EXPECT_TRUE(is_one_error_line(usage.err));
  const auto unknown = run_cli({"gc", tmp / "x", "--bogus"});
  EXPECT_EQ(unknown.status, 2);
}

}  // namespace
}  // namespace densefs::tools
