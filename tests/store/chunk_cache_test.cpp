// The decoded-chunk cache: byte budget, LRU order, merged concurrent loads.
#include "store/cache/chunk_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace densefs::store {
namespace {

chunk_hash hash_of(int i) {
  return sha256_of(std::to_string(i));
}
chunk_cache::value bytes(std::size_t n) {
  return std::make_shared<const std::string>(n, 'x');
}

TEST(store_chunk_cache, evicts_least_recently_used_by_bytes) {
  chunk_cache cache(300);
  cache.insert(hash_of(1), bytes(100));
  cache.insert(hash_of(2), bytes(100));
  cache.insert(hash_of(3), bytes(100));
  EXPECT_EQ(cache.size_bytes(), 300u);
  ASSERT_TRUE(cache.find(hash_of(1)));   // 1 is now the most recent
  cache.insert(hash_of(4), bytes(100));  // evicts 2, the least recent
  EXPECT_TRUE(cache.find(hash_of(1)));
  EXPECT_FALSE(cache.find(hash_of(2)));
  EXPECT_TRUE(cache.find(hash_of(3)));
  EXPECT_TRUE(cache.find(hash_of(4)));
  EXPECT_EQ(cache.size_bytes(), 300u);

  cache.insert(hash_of(5), bytes(250));  // needs room for 250: three go
  EXPECT_LE(cache.size_bytes(), 300u);
  EXPECT_TRUE(cache.find(hash_of(5)));
  EXPECT_EQ(cache.entries(), 1u);

  cache.insert(hash_of(6), bytes(301));  // larger than the budget: not kept
  EXPECT_FALSE(cache.find(hash_of(6)));
  EXPECT_TRUE(cache.find(hash_of(5)));

  cache.erase(hash_of(5));
  EXPECT_FALSE(cache.find(hash_of(5)));
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(store_chunk_cache, reinserting_a_key_replaces_its_size) {
  chunk_cache cache(1000);
  cache.insert(hash_of(1), bytes(100));
  cache.insert(hash_of(1), bytes(300));
  EXPECT_EQ(cache.size_bytes(), 300u);
  EXPECT_EQ(cache.entries(), 1u);
}

TEST(store_chunk_cache, clear_empties_it_and_later_loads_are_cached_again) {
  chunk_cache cache(1000);
  cache.insert(hash_of(1), bytes(100));
  cache.insert(hash_of(2), bytes(200));
  cache.clear();
  EXPECT_EQ(cache.size_bytes(), 0u);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_FALSE(cache.find(hash_of(1)));
  int loads = 0;
  const auto load = [&] {
    ++loads;
    return bytes(100);
  };
  cache.get_or_load(hash_of(1), load);
  cache.get_or_load(hash_of(1), load);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cache.size_bytes(), 100u);
}

TEST(store_chunk_cache, concurrent_misses_load_once) {
  chunk_cache cache(1 << 20);
  std::atomic<int> loads{0};
  std::atomic<int> started{0};
  const auto loader = [&] {
    ++loads;
    // Stay in the loader long enough for every thread to arrive.
    while (started < 8) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return bytes(1000);
  };
  std::vector<std::thread> threads;
  std::vector<chunk_cache::value> results(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      ++started;
      results[i] = cache.get_or_load(hash_of(1), loader);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(loads, 1);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
  EXPECT_EQ(cache.get_or_load(hash_of(1), [&] { return bytes(1); })->size(), 1000u);
}

TEST(store_chunk_cache, failed_loads_reach_every_waiter_and_are_not_cached) {
  chunk_cache cache(1 << 20);
  std::atomic<int> started{0};
  std::atomic<int> failures{0};
  const auto failing = [&]() -> chunk_cache::value {
    while (started < 4) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    throw std::runtime_error("bad chunk");
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      ++started;
      try {
        cache.get_or_load(hash_of(2), failing);
      } catch (const std::runtime_error&) {
        ++failures;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 4);
  EXPECT_FALSE(cache.find(hash_of(2)));
  EXPECT_EQ(cache.get_or_load(hash_of(2), [] { return bytes(7); })->size(), 7u);
}

TEST(store_chunk_cache, zero_budget_still_serves_loads) {
  chunk_cache cache(0);
  int loads = 0;
  const auto loader = [&] {
    ++loads;
    return bytes(10);
  };
  EXPECT_EQ(cache.get_or_load(hash_of(3), loader)->size(), 10u);
  EXPECT_EQ(cache.get_or_load(hash_of(3), loader)->size(), 10u);
  EXPECT_EQ(loads, 2);
}

}  // namespace
}  // namespace densefs::store

namespace densefs::store {
namespace {

TEST(store_chunk_cache, a_claim_makes_others_wait_for_its_result) {
  chunk_cache cache(1000);
  const auto first = cache.claim(hash_of(1));
  EXPECT_TRUE(first.mine);
  const auto second = cache.claim(hash_of(1));
  EXPECT_FALSE(second.mine);
  EXPECT_FALSE(second.cached);
  ASSERT_TRUE(second.pending.valid());
  std::thread waiter([&] {
    // get_or_load waits for the claim instead of loading.
    const auto v = cache.get_or_load(hash_of(1), []() -> chunk_cache::value {
      ADD_FAILURE() << "loaded twice";
      return nullptr;
    });
    EXPECT_EQ(*v, std::string(10, 'x'));
  });
  cache.fulfil(hash_of(1), bytes(10));
  waiter.join();
  EXPECT_EQ(*second.pending.get(), std::string(10, 'x'));
  EXPECT_TRUE(cache.claim(hash_of(1)).cached);
}

TEST(store_chunk_cache, an_abandoned_claim_lets_a_waiter_load_it_itself) {
  chunk_cache cache(1000);
  ASSERT_TRUE(cache.claim(hash_of(2)).mine);
  std::atomic<int> loads{0};
  std::thread waiter([&] {
    const auto v = cache.get_or_load(hash_of(2), [&] {
      ++loads;
      return bytes(7);
    });
    EXPECT_EQ(v->size(), 7u);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // usually waiting by now
  cache.fail(hash_of(2), std::make_exception_ptr(chunk_cache::load_abandoned()));
  waiter.join();
  EXPECT_EQ(loads.load(), 1);
  // A real failure reaches the waiters as it is.
  ASSERT_TRUE(cache.claim(hash_of(3)).mine);
  const auto pending = cache.claim(hash_of(3)).pending;
  cache.fail(hash_of(3), std::make_exception_ptr(std::runtime_error("bad chunk")));
  EXPECT_THROW(pending.get(), std::runtime_error);
  EXPECT_TRUE(cache.claim(hash_of(3)).mine);  // not cached: the next reader tries again
}

}  // namespace
}  // namespace densefs::store
