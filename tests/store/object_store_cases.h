// What every object_store promises (store/object/object_store.h), as cases
// each implementation's tests call with a store of their own: the S3 store
// against radosgw (s3_object_store_test.cpp), the directory store
// (directory_object_store_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "store/error.h"
#include "store/object/object_store.h"
#include "tests/random_bytes.h"
#include "tests/store/error_of.h"

namespace densefs::store::test_cases {

using test::error_of;

inline void an_object_reads_back_exactly_in_any_range(object_store& s) {
  const std::string bytes = test::random_bytes(9u << 20, 1);
  s.put("packs/00000001.pack", bytes);
  EXPECT_EQ(s.size("packs/00000001.pack"), bytes.size());
  EXPECT_EQ(s.get_range("packs/00000001.pack", 0, 64), bytes.substr(0, 64));
  EXPECT_EQ(s.get_range("packs/00000001.pack", 4u << 20, 1u << 20),
            bytes.substr(4u << 20, 1u << 20));
  EXPECT_EQ(s.get_range("packs/00000001.pack", bytes.size() - 1, 1),
            bytes.substr(bytes.size() - 1));
  EXPECT_EQ(s.get_range("packs/00000001.pack", 0, static_cast<std::uint32_t>(bytes.size())), bytes);
  EXPECT_EQ(s.get_range("packs/00000001.pack", 5, 0), "");
  // A replacing put.
  s.put("packs/00000001.pack", "short");
  EXPECT_EQ(s.size("packs/00000001.pack"), 5u);
  EXPECT_EQ(s.get_range("packs/00000001.pack", 1, 3), "hor");
}

// `named`: how the store's messages name object "a".
inline void reads_past_the_end_or_of_missing_objects_are_eio_naming_them(object_store& s,
                                                                         const std::string& named) {
  s.put("a", "0123456789");
  try {
    s.get_range("a", 5, 10);
    FAIL() << "a range past the end was read";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EIO);
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_of([&] { s.get_range("missing", 0, 10); }), EIO);
  EXPECT_EQ(s.size("missing"), std::nullopt);
}

// `objects`: more than a listing page where the store has pages (S3: 1,000).
inline void remove_and_list_in_order(object_store& s, int objects) {
  for (int i = 0; i < objects; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "packs/%08d.pack", i);
    s.put(name, std::to_string(i));
  }
  s.put("other/x", "not a pack");
  const std::vector<object_store::object_info> packs = s.list("packs/");
  ASSERT_EQ(packs.size(), static_cast<std::size_t>(objects));
  EXPECT_EQ(packs.front().name, "packs/00000000.pack");
  EXPECT_EQ(packs.front().size, 1u);  // "0"
  char last[32];
  std::snprintf(last, sizeof last, "packs/%08d.pack", objects - 1);
  EXPECT_EQ(packs.back().name, last);
  EXPECT_EQ(packs.back().size, std::to_string(objects - 1).size());
  EXPECT_TRUE(std::is_sorted(packs.begin(), packs.end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  EXPECT_EQ(s.list("").size(), static_cast<std::size_t>(objects + 1));

  s.remove("packs/00000007.pack");
  s.remove("packs/00000007.pack");  // again: no error
  EXPECT_EQ(s.size("packs/00000007.pack"), std::nullopt);
  EXPECT_EQ(s.list("packs/0000000").size(), 9u);
}

inline void names_with_odd_bytes_round_trip(object_store& s) {
  const std::vector<std::string> names = {"sp ace",   "plus+sign", "per%cent",
                                          "ünï/cødé", "amp&lt;",   "tilde~dot.dash-under_"};
  for (const std::string& n : names) s.put(n, "content of " + n);
  for (const std::string& n : names)
    EXPECT_EQ(s.get_range(n, 0, static_cast<std::uint32_t>(("content of " + n).size())),
              "content of " + n)
        << n;
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> listed;
  for (const auto& o : s.list("")) listed.push_back(o.name);
  EXPECT_EQ(listed, sorted);
}

inline void threads_share_one_store(object_store& s) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string name = "t" + std::to_string(t) + "/" + std::to_string(i);
        const std::string bytes =
            test::random_bytes(100'000 + static_cast<std::size_t>(i), t * 100 + i);
        try {
          s.put(name, bytes);
          if (s.get_range(name, 1000, 5000) != bytes.substr(1000, 5000)) ++failures;
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(s.list("t3/").size(), 10u);
}

}  // namespace densefs::store::test_cases
