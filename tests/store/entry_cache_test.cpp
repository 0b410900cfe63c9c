// The directory-entry cache: answers kept exact across commits, reads that
// raced a change, notices, directories known whole, and its bound.
#include "store/cache/entry_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace densefs::store {
namespace {

dirent_record file(std::uint64_t ino) {
  return {ino, S_IFREG};
}

TEST(entry_cache, knows_nothing_until_told) {
  entry_cache cache(100);
  EXPECT_FALSE(cache.find(1, "a"));
  EXPECT_FALSE(cache.empty(1));
}

TEST(entry_cache, keeps_what_a_read_found_present_or_absent) {
  entry_cache cache(100);
  cache.keep(cache.generation(), 1, "a", file(7));
  cache.keep(cache.generation(), 1, "b", std::nullopt);
  const auto a = cache.find(1, "a");
  ASSERT_TRUE(a && *a);
  EXPECT_EQ((*a)->ino, 7u);
  const auto b = cache.find(1, "b");
  ASSERT_TRUE(b);
  EXPECT_FALSE(*b);
  EXPECT_FALSE(cache.find(2, "a"));  // another directory's name
}

TEST(entry_cache, a_read_that_raced_a_commit_is_not_kept) {
  entry_cache cache(100);
  const std::uint64_t before = cache.generation();
  // The read found "a" absent, then a commit made it before keep().
  const entry_cache::change made{1, "a", file(7)};
  cache.committed(std::span(&made, 1), {});
  cache.keep(before, 1, "a", std::nullopt);
  const auto a = cache.find(1, "a");
  ASSERT_TRUE(a && *a);
  EXPECT_EQ((*a)->ino, 7u);
}

TEST(entry_cache, a_commit_sets_and_removes_names) {
  entry_cache cache(100);
  cache.keep(cache.generation(), 1, "a", file(7));
  const std::vector<entry_cache::change> rename{{1, "a", std::nullopt}, {1, "b", file(7)}};
  cache.committed(rename, {});
  const auto a = cache.find(1, "a");
  ASSERT_TRUE(a);
  EXPECT_FALSE(*a);
  const auto b = cache.find(1, "b");
  ASSERT_TRUE(b && *b);
}

TEST(entry_cache, a_new_directory_is_known_whole_and_counts_its_names) {
  entry_cache cache(100);
  const std::uint64_t dir = 9;
  cache.committed({}, std::span(&dir, 1));
  // Any name in it is absent without a read.
  const auto x = cache.find(dir, "anything");
  ASSERT_TRUE(x);
  EXPECT_FALSE(*x);
  EXPECT_EQ(cache.empty(dir), true);
  const std::vector<entry_cache::change> two{{dir, "a", file(10)}, {dir, "b", file(11)}};
  cache.committed(two, {});
  EXPECT_EQ(cache.empty(dir), false);
  // Put again (a rename over it) counts once.
  const entry_cache::change again{dir, "a", file(12)};
  cache.committed(std::span(&again, 1), {});
  const std::vector<entry_cache::change> gone{{dir, "a", std::nullopt}, {dir, "b", std::nullopt}};
  cache.committed(gone, {});
  EXPECT_EQ(cache.empty(dir), true);
  // Removing a name that is not there leaves the count alone.
  const entry_cache::change absent{dir, "c", std::nullopt};
  cache.committed(std::span(&absent, 1), {});
  EXPECT_EQ(cache.empty(dir), true);
  const auto a = cache.find(dir, "a");
  ASSERT_TRUE(a);
  EXPECT_FALSE(*a);
}

TEST(entry_cache, a_notice_forgets_its_names_and_whether_their_directory_is_whole) {
  entry_cache cache(100);
  const std::uint64_t dir = 9;
  cache.committed({}, std::span(&dir, 1));
  cache.keep(cache.generation(), 1, "a", file(7));
  const std::uint64_t before = cache.generation();
  const std::vector<std::pair<std::uint64_t, std::string>> notice{{1, "a"}, {dir, "n"}};
  cache.forget(notice);
  EXPECT_FALSE(cache.find(1, "a"));
  EXPECT_FALSE(cache.find(dir, "other"));
  EXPECT_FALSE(cache.empty(dir));
  // A read from before the notice is not kept.
  cache.keep(before, 1, "a", file(8));
  EXPECT_FALSE(cache.find(1, "a"));
}

TEST(entry_cache, forget_all_empties_it) {
  entry_cache cache(100);
  const std::uint64_t dir = 9;
  cache.committed({}, std::span(&dir, 1));
  cache.keep(cache.generation(), 1, "a", file(7));
  cache.forget_all();
  EXPECT_FALSE(cache.find(1, "a"));
  EXPECT_FALSE(cache.find(dir, "a"));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(entry_cache, is_emptied_at_its_bound_and_fills_again) {
  entry_cache cache(4);
  for (int i = 0; i < 4; ++i) cache.keep(cache.generation(), 1, std::to_string(i), file(i + 10));
  EXPECT_EQ(cache.size(), 4u);
  cache.keep(cache.generation(), 1, "more", file(20));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_FALSE(cache.find(1, "0"));
  EXPECT_TRUE(cache.find(1, "more"));
}

}  // namespace
}  // namespace densefs::store
