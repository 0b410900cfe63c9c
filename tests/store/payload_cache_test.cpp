// The local cache of a scale-out volume's pack payloads
// (store/cache/payload_cache.h): records and whole packs kept within the
// capacity, least recently used out first, the order kept across a reopen,
// and a read-only cache that changes nothing.
#include "store/cache/payload_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

std::string bytes(std::size_t n, char c) {
  return std::string(n, c);
}

// Sets a file's modification time, so that a reopen orders entries by it.
void set_mtime(const fs::path& p, std::time_t seconds) {
  const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0) << p;
}

TEST(payload_cache, a_record_reads_back_and_the_directories_are_private) {
  test::temp_dir dir;
  payload_cache cache(dir / "cache", 1 << 20, {});
  EXPECT_EQ(cache.get_record(1, 32), std::nullopt);
  cache.put_record(1, 32, "a record");
  EXPECT_EQ(cache.get_record(1, 32), "a record");
  EXPECT_EQ(cache.bytes(), 8u);
  struct stat sb {};
  ASSERT_EQ(::stat((dir / "cache").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
  cache.drop_record(1, 32);
  EXPECT_EQ(cache.get_record(1, 32), std::nullopt);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(payload_cache, the_least_recently_used_entries_go_first_and_packs_are_reported) {
  test::temp_dir dir;
  std::vector<std::uint32_t> evicted;
  payload_cache cache(dir / "cache", 3000, [&](std::uint32_t p) { evicted.push_back(p); });
  cache.put_record(1, 100, bytes(1000, 'a'));
  cache.put_record(1, 2000, bytes(1000, 'b'));
  // A whole pack (its file moved there by the pack store).
  { std::ofstream(cache.pack_path(7)) << bytes(1000, 'p'); }
  cache.add_pack(7, 1000);
  EXPECT_EQ(cache.bytes(), 3000u);
  // Reading the first record makes the second the oldest.
  EXPECT_TRUE(cache.get_record(1, 100));
  cache.put_record(2, 32, bytes(500, 'c'));
  EXPECT_EQ(cache.get_record(1, 2000), std::nullopt);
  EXPECT_TRUE(cache.get_record(1, 100));
  EXPECT_EQ(cache.bytes(), 2500u);
  EXPECT_TRUE(evicted.empty());
  // Touching the pack keeps it; the next entry pushes out both records.
  cache.touch_pack(7);
  cache.put_record(3, 32, bytes(1500, 'd'));
  EXPECT_EQ(cache.get_record(1, 100), std::nullopt);
  EXPECT_EQ(cache.get_record(2, 32), std::nullopt);
  EXPECT_EQ(cache.bytes(), 2500u);
  EXPECT_TRUE(evicted.empty());
  cache.put_record(4, 32, bytes(1000, 'e'));
  ASSERT_EQ(evicted, std::vector<std::uint32_t>{7});
  EXPECT_FALSE(fs::exists(cache.pack_path(7)));
  EXPECT_LE(cache.bytes(), cache.capacity());
  // A record bigger than the whole cache is not kept.
  cache.put_record(5, 32, bytes(4000, 'f'));
  EXPECT_EQ(cache.get_record(5, 32), std::nullopt);
}

TEST(payload_cache, forgetting_a_pack_drops_it_and_its_records) {
  test::temp_dir dir;
  payload_cache cache(dir / "cache", 1 << 20, {});
  { std::ofstream(cache.pack_path(3)) << "pack"; }
  cache.add_pack(3, 4);
  cache.put_record(3, 32, "r1");
  cache.put_record(3, 96, "r2");
  cache.put_record(4, 32, "other pack");
  cache.forget_pack(3);
  EXPECT_FALSE(fs::exists(cache.pack_path(3)));
  EXPECT_EQ(cache.get_record(3, 32), std::nullopt);
  EXPECT_EQ(cache.get_record(3, 96), std::nullopt);
  EXPECT_EQ(cache.get_record(4, 32), "other pack");
  EXPECT_EQ(cache.bytes(), 10u);
}

TEST(payload_cache, a_reopen_keeps_the_entries_in_their_order_and_evicts_to_the_new_bound) {
  test::temp_dir dir;
  {
    payload_cache cache(dir / "cache", 1 << 20, {});
    cache.put_record(1, 32, bytes(1000, 'a'));
    cache.put_record(2, 32, bytes(1000, 'b'));
    cache.put_record(3, 32, bytes(1000, 'c'));
  }
  // Arrival order by modification time: record 2 is the oldest.
  set_mtime(dir / "cache" / "records" / "00000002" / "32", 1000);
  set_mtime(dir / "cache" / "records" / "00000001" / "32", 2000);
  set_mtime(dir / "cache" / "records" / "00000003" / "32", 3000);
  // Left by a run that stopped mid-write: removed.
  { std::ofstream(dir / "cache" / "records" / "tmp.1.2") << "partial"; }
  payload_cache cache(dir / "cache", 2000, {});
  EXPECT_EQ(cache.bytes(), 2000u);
  EXPECT_EQ(cache.get_record(2, 32), std::nullopt);
  EXPECT_EQ(cache.get_record(1, 32), bytes(1000, 'a'));
  EXPECT_EQ(cache.get_record(3, 32), bytes(1000, 'c'));
  EXPECT_FALSE(fs::exists(dir / "cache" / "records" / "tmp.1.2"));
}

TEST(payload_cache, a_read_only_cache_reads_and_changes_nothing) {
  test::temp_dir dir;
  {
    payload_cache cache(dir / "cache", 1 << 20, {});
    cache.put_record(1, 32, "kept");
  }
  payload_cache cache(dir / "cache", 1, {}, true);
  EXPECT_EQ(cache.get_record(1, 32), "kept");
  cache.put_record(2, 32, "not kept");
  cache.drop_record(1, 32);
  cache.forget_pack(1);
  EXPECT_FALSE(fs::exists(dir / "cache" / "records" / "00000002"));
  EXPECT_TRUE(fs::exists(dir / "cache" / "records" / "00000001" / "32"));
}

}  // namespace
}  // namespace densefs::store
