// The read side of snapshots (store/snapshot/): random
// writes and snapshots applied to a RocksDB engine with the pre-image rule
// of docs/backup.md (the first change of a key after the latest snapshot
// keeps its value before), then every snapshot read through snapshot_view
// against a model of the records at the time it was taken, by get and by
// scans in every order from random starts.
#include "store/snapshot/snapshot_view.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "store/metadata/rocksdb_engine.h"
#include "store/records.h"
#include "store/snapshot/pre_image.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

using model = std::map<std::string, std::string>;

TEST(pre_image, escaped_keys_keep_the_order_and_come_apart_again) {
  const std::vector<std::string> keys = {std::string("a"),        std::string("a\0", 2),
                                         std::string("a\0\0", 3), std::string("a\0b", 3),
                                         std::string("a\x01", 2), std::string("ab"),
                                         std::string("\xff\xff"), std::string("\0", 1)};
  for (const auto& a : keys) {
    EXPECT_EQ(unescape_key(escape_key(a)), a);
    const auto row = parse_pre_image_key(pre_image_key(table::dirents, a, 7));
    ASSERT_TRUE(row);
    EXPECT_EQ(row->key, a);
    EXPECT_EQ(row->snapshot, 7u);
    EXPECT_EQ(row->t, table::dirents);
    for (const auto& b : keys) {
      EXPECT_EQ(a < b, escape_key(a) < escape_key(b)) << "order of escaped keys";
      EXPECT_EQ(a < b, pre_image_key(table::dirents, a, 99) < pre_image_key(table::dirents, b, 1));
    }
  }
  EXPECT_FALSE(unescape_key(std::string("a\0", 2)));
  EXPECT_FALSE(unescape_key(std::string("a\0\x02", 3)));
}

TEST(snapshot_view, every_snapshot_reads_as_it_was_taken) {
  test::temp_dir dir;
  auto live = rocksdb_engine::open(dir.path(), {.create = true});
  std::mt19937_64 rng(20261130);
  const auto pick_key = [&] {
    // Keys with zero bytes and prefixes of each other.
    static const std::vector<std::string> alphabet = {"a", std::string("\0", 1), "b", "\xff"};
    std::string k;
    const int n = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) k += alphabet[rng() % alphabet.size()];
    return k;
  };
  model now;
  std::map<std::uint64_t, model> taken;  // snapshot id -> the records then
  std::uint64_t latest = 0;
  std::set<std::string> preserved;  // keys with a pre-image for `latest`
  for (int step = 0; step < 5000; ++step) {
    // More keys than one page of a cursor (256 rows) between snapshots.
    if (rng() % 400 == 0) {
      taken[++latest] = now;
      preserved.clear();
      continue;
    }
    const std::string k = pick_key();
    const bool erase = rng() % 3 == 0;
    auto b = live->new_batch();
    if (latest > 0 && !preserved.count(k)) {
      const auto it = now.find(k);
      b->put(table::meta, pre_image_key(table::dirents, k, latest),
             encode_pre_image(it == now.end() ? std::nullopt
                                              : std::optional<std::string_view>(it->second)));
      preserved.insert(k);
    }
    if (erase) {
      b->erase(table::dirents, k);
      now.erase(k);
    } else {
      const std::string v = "v" + std::to_string(step);
      b->put(table::dirents, k, v);
      now[k] = v;
    }
    live->write(*b, false);
  }
  ASSERT_GT(taken.size(), 5u);
  for (const auto& [id, want] : taken) {
    const snapshot_view view(*live, id);
    // Every key by get.
    for (int i = 0; i < 100; ++i) {
      const std::string k = pick_key();
      const auto it = want.find(k);
      EXPECT_EQ(view.get(table::dirents, k, "test"),
                it == want.end() ? std::nullopt : std::optional<std::string>(it->second))
          << "snapshot " << id;
    }
    // Scans in every order, from random starts, in random ranges.
    for (int i = 0; i < 60; ++i) {
      key_range range;
      if (rng() % 2) range.lower = pick_key();
      if (rng() % 2) range.upper = pick_key();
      if (!range.upper.empty() && range.upper < range.lower) std::swap(range.lower, range.upper);
      const std::string start = rng() % 3 ? pick_key() : std::string();
      const auto order = static_cast<scan_order>(rng() % 3);
      scan_options o;
      o.start = start;
      o.order = order;
      model got;
      std::vector<std::string> got_keys;
      view.scan(table::dirents, range, o, "test", [&](std::string_view k, std::string_view v) {
        got_keys.emplace_back(k);
        got[std::string(k)] = std::string(v);
        return true;
      });
      // The same scan over a plain engine holding the snapshot's records.
      std::vector<std::string> want_keys;
      const std::string lo = start.empty() || start < range.lower ? range.lower : start;
      std::vector<std::string> in_range;
      for (const auto& [k, v] : want)
        if (k >= range.lower && (range.upper.empty() || k < range.upper)) in_range.push_back(k);
      switch (order) {
        case scan_order::forward:
          for (const auto& k : in_range)
            if (k >= lo) want_keys.push_back(k);
          break;
        case scan_order::backward:
          for (auto it = in_range.rbegin(); it != in_range.rend(); ++it)
            if (start.empty() || *it <= lo) want_keys.push_back(*it);
          break;
        case scan_order::forward_from_floor: {
          std::size_t from = in_range.size();
          for (std::size_t j = in_range.size(); j-- > 0;)
            if (in_range[j] <= lo) {
              from = j;
              break;
            }
          if (from == in_range.size())
            for (std::size_t j = 0; j < in_range.size(); ++j)
              if (in_range[j] >= lo) {
                from = j;
                break;
              }
          for (std::size_t j = from; j < in_range.size(); ++j) want_keys.push_back(in_range[j]);
          break;
        }
      }
      EXPECT_EQ(got_keys, want_keys) << "snapshot " << id << " order " << static_cast<int>(order);
      for (const auto& k : got_keys) EXPECT_EQ(got[k], want.at(k));
    }
  }
  // A snapshot is read-only.
  snapshot_view view(*live, 1);
  auto b = view.new_batch();
  EXPECT_THROW(view.write(*b, false), store_error);
}

// A writer's commit in the middle of a long scan of a snapshot (past the
// first page of its cursors) shows in no record the scan yields: the
// records it removes, changes or adds read as they were (a live mount's
// `.snapshots` is read beside its writer).
TEST(snapshot_view, a_scan_beside_a_writer_reads_the_snapshot_whole) {
  for (const auto order : {scan_order::forward, scan_order::backward}) {
    test::temp_dir dir;
    auto live = rocksdb_engine::open(dir.path(), {.create = true});
    const auto key = [](int i) {
      char k[8];
      std::snprintf(k, sizeof k, "k%04d", i);
      return std::string(k);
    };
    {
      auto b = live->new_batch();
      for (int i = 0; i < 1000; ++i) b->put(table::dirents, key(i), "old");
      live->write(*b, false);
    }
    const std::uint64_t snapshot = 1;  // taken now: later changes keep pre-images of id 1
    const bool forward = order == scan_order::forward;
    // What the commit touches: the far end of the scan, which it reaches later.
    const int far_first = forward ? 600 : 0;
    const int far_last = forward ? 999 : 399;
    const auto commit = [&] {
      auto b = live->new_batch();
      for (int i = far_first; i <= far_last; ++i) {
        b->put(table::meta, pre_image_key(table::dirents, key(i), snapshot),
               encode_pre_image("old"));
        if (i % 2)
          b->erase(table::dirents, key(i));
        else
          b->put(table::dirents, key(i), "new");
        const std::string added = key(i) + "+";
        b->put(table::meta, pre_image_key(table::dirents, added, snapshot),
               encode_pre_image(std::nullopt));
        b->put(table::dirents, added, "new");
      }
      live->write(*b, false);
    };
    const snapshot_view view(*live, snapshot);
    scan_options o;
    o.order = order;
    std::vector<std::string> got;
    view.scan(table::dirents, {}, o, "test", [&](std::string_view k, std::string_view v) {
      EXPECT_EQ(v, "old") << std::string(k);
      got.emplace_back(k);
      if (got.size() == 300) commit();
      return true;
    });
    std::vector<std::string> want;
    for (int i = 0; i < 1000; ++i) want.push_back(key(forward ? i : 999 - i));
    EXPECT_EQ(got, want) << (forward ? "forward" : "backward");
  }
}

}  // namespace
}  // namespace densefs::store
