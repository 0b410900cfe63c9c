// The metadata engines (store/metadata/metadata_engine.h) against one set of cases:
// RocksDB in a temporary directory and PostgreSQL on a private server
// (tests/postgres_server.h) must answer every get, get_many, scan and batch
// the same way, bytewise key order and scan orders included. Then what only
// the PostgreSQL engine has: its schema checks, credentials kept out of
// messages, failed commits, lost connections, its connection pool.
#include "store/metadata/metadata_engine.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>

#include "store/error.h"
#include "store/metadata/postgres_engine.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/store.h"
#include "tests/postgres_server.h"
#include "tests/random_bytes.h"
#include "tests/store/error_of.h"
#include "tests/temp_dir.h"

namespace densefs::test {
namespace {

using store::key_range;
using store::scan_options;
using store::scan_order;
using store::store_error;
using store::table;

// --- The engines under test.

struct rocksdb_kind {
  std::unique_ptr<temp_dir> dir;
  std::unique_ptr<store::metadata_engine> open() {
    dir = std::make_unique<temp_dir>();
    return store::rocksdb_engine::open(dir->path(), {.create = true});
  }
};

struct postgres_kind {
  postgres_server* server = nullptr;
  std::unique_ptr<store::metadata_engine> open() {
    store::postgres_engine_options o;
    o.conninfo = server->conninfo(server->create_database());
    store::postgres_engine::create(o);
    return store::postgres_engine::open(o);
  }
};

template <class Kind>
class metadata_engine : public ::testing::Test {
 protected:
  void SetUp() override {
    if constexpr (std::is_same_v<Kind, postgres_kind>) {
      DENSEFS_POSTGRES_SERVER(server);
      kind_.server = server;
    }
    engine_ = kind_.open();
  }

  Kind kind_;
  std::unique_ptr<store::metadata_engine> engine_;
};

struct kind_names {
  template <class Kind>
  static std::string GetName(int) {
    return std::is_same_v<Kind, rocksdb_kind> ? "rocksdb" : "postgresql";
  }
};
using kinds = ::testing::Types<rocksdb_kind, postgres_kind>;
TYPED_TEST_SUITE(metadata_engine, kinds, kind_names);

// --- Helpers.

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out += static_cast<char>(v);
  return out;
}

// A big-endian number, as record keys hold inode numbers and offsets.
std::string be64(std::uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[static_cast<std::size_t>(i)] = static_cast<char>(v);
  return out;
}

void put(store::metadata_engine& e, table t, std::string_view key, std::string_view value) {
  auto b = e.new_batch();
  b->put(t, key, value);
  e.write(*b, false);
}

void erase(store::metadata_engine& e, table t, std::string_view key) {
  auto b = e.new_batch();
  b->erase(t, key);
  e.write(*b, true);
}

using entries = std::vector<std::pair<std::string, std::string>>;

entries scan_all(const store::metadata_engine& e, table t, const key_range& range,
                 scan_order order = scan_order::forward, std::string_view start = {},
                 std::size_t stop_after = SIZE_MAX) {
  entries out;
  scan_options o;
  o.start = start;
  o.order = order;
  e.scan(t, range, o, "test scan", [&](std::string_view k, std::string_view v) {
    out.emplace_back(k, v);
    return out.size() < stop_after;
  });
  return out;
}

std::vector<std::string> keys_of(const entries& es) {
  std::vector<std::string> out;
  for (const auto& [k, v] : es) out.push_back(k);
  return out;
}

std::vector<std::string> scan_keys(const store::metadata_engine& e, table t, const key_range& range,
                                   scan_order order = scan_order::forward,
                                   std::string_view start = {}) {
  return keys_of(scan_all(e, t, range, order, start));
}

// "k00".."k09" in `t`, value "v" + the same digits.
void put_ten(store::metadata_engine& e, table t) {
  auto b = e.new_batch();
  for (int i = 0; i < 10; ++i) {
    const std::string n = std::string(i < 10 ? "0" : "") + std::to_string(i);
    b->put(t, "k" + n, "v" + n);
  }
  e.write(*b, true);
}

std::vector<std::string> names(std::initializer_list<int> ids) {
  std::vector<std::string> out;
  for (int i : ids) out.push_back("k0" + std::to_string(i));
  return out;
}

// --- get, put, erase.

TYPED_TEST(metadata_engine, get_of_a_missing_key_is_nothing) {
  auto& e = *this->engine_;
  EXPECT_EQ(e.get(table::inodes, "nope", "test"), std::nullopt);
  put(e, table::inodes, "there", "1");
  EXPECT_EQ(e.get(table::inodes, "nope", "test"), std::nullopt);
  EXPECT_EQ(e.get(table::inodes, "ther", "test"), std::nullopt);  // a prefix is not the key
  EXPECT_EQ(e.get(table::inodes, "there!", "test"), std::nullopt);
  // Tables are separate.
  EXPECT_EQ(e.get(table::dirents, "there", "test"), std::nullopt);
}

TYPED_TEST(metadata_engine, put_then_get_returns_the_exact_bytes) {
  auto& e = *this->engine_;
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte += static_cast<char>(i);
  const std::string key = bytes({0x00, 0xff, 0x00, 0x80});
  put(e, table::chunks, key, every_byte);
  put(e, table::chunks, "empty", "");
  EXPECT_EQ(e.get(table::chunks, key, "test"), every_byte);
  EXPECT_EQ(e.get(table::chunks, "empty", "test"), std::string());
  // A put replaces; the same key in another table is another record.
  put(e, table::chunks, key, "second");
  put(e, table::xattrs, key, "other table");
  EXPECT_EQ(e.get(table::chunks, key, "test"), "second");
  EXPECT_EQ(e.get(table::xattrs, key, "test"), "other table");
  // Every table keeps records.
  for (std::size_t i = 0; i < store::k_table_count; ++i) {
    const auto t = static_cast<table>(i);
    put(e, t, "per-table", std::to_string(i));
  }
  for (std::size_t i = 0; i < store::k_table_count; ++i)
    EXPECT_EQ(e.get(static_cast<table>(i), "per-table", "test"), std::to_string(i));
}

TYPED_TEST(metadata_engine, erase_removes_only_that_key) {
  auto& e = *this->engine_;
  put(e, table::dirents, "a", "1");
  put(e, table::dirents, "b", "2");
  erase(e, table::dirents, "a");
  EXPECT_EQ(e.get(table::dirents, "a", "test"), std::nullopt);
  EXPECT_EQ(e.get(table::dirents, "b", "test"), "2");
  erase(e, table::dirents, "never there");  // not an error
  EXPECT_EQ(scan_keys(e, table::dirents, {}), std::vector<std::string>{"b"});
}

TYPED_TEST(metadata_engine, get_many_answers_each_key_in_order) {
  auto& e = *this->engine_;
  put(e, table::inodes, "a", "A");
  put(e, table::inodes, "b", "B");
  put(e, table::inodes, bytes({0xff}), "FF");
  const std::vector<std::string> keys = {"b", "missing", "a", bytes({0xff}), "b", ""};
  const auto got = e.get_many(table::inodes, keys, "test");
  ASSERT_EQ(got.size(), keys.size());
  EXPECT_EQ(got[0], "B");
  EXPECT_EQ(got[1], std::nullopt);
  EXPECT_EQ(got[2], "A");
  EXPECT_EQ(got[3], "FF");
  EXPECT_EQ(got[4], "B");
  EXPECT_EQ(got[5], std::nullopt);
  EXPECT_TRUE(e.get_many(table::inodes, {}, "test").empty());
  const auto payloads = e.get_payloads(std::vector<std::string>{"a"}, "test");
  ASSERT_EQ(payloads.size(), 1u);
  EXPECT_EQ(payloads[0], std::nullopt);  // payloads is a table of its own
}

// --- Batches.

TYPED_TEST(metadata_engine, the_last_op_on_a_key_in_a_batch_wins) {
  auto& e = *this->engine_;
  put(e, table::extents, "erased then put", "old");
  put(e, table::extents, "put then erased", "old");
  auto b = e.new_batch();
  EXPECT_TRUE(b->empty());
  b->put(table::extents, "twice", "1");
  b->put(table::extents, "twice", "2");
  b->erase(table::extents, "erased then put");
  b->put(table::extents, "erased then put", "new");
  b->put(table::extents, "put then erased", "new");
  b->erase(table::extents, "put then erased");
  b->put(table::extents, "put erase put", "1");
  b->erase(table::extents, "put erase put");
  b->put(table::extents, "put erase put", "3");
  b->put(table::xattrs, "twice", "other table");
  EXPECT_FALSE(b->empty());
  e.write(*b, true);
  EXPECT_EQ(e.get(table::extents, "twice", "test"), "2");
  EXPECT_EQ(e.get(table::extents, "erased then put", "test"), "new");
  EXPECT_EQ(e.get(table::extents, "put then erased", "test"), std::nullopt);
  EXPECT_EQ(e.get(table::extents, "put erase put", "test"), "3");
  EXPECT_EQ(e.get(table::xattrs, "twice", "test"), "other table");
  // An empty batch and sync() are fine.
  auto empty = e.new_batch();
  e.write(*empty, true);
  e.sync();
}

// Writers set two keys to one counter in each batch; readers must never see
// them differ (a scan reads one snapshot in both engines).
TYPED_TEST(metadata_engine, a_batch_becomes_visible_at_once) {
  auto& e = *this->engine_;
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0}, reads{0};
  auto write_pair = [&](int i) {
    auto b = e.new_batch();
    b->put(table::meta, "pair/a", std::to_string(i));
    b->put(table::meta, "pair/z", std::to_string(i));
    e.write(*b, false);
  };
  write_pair(0);
  std::thread reader([&] {
    while (!done) {
      const entries es = scan_all(e, table::meta, store::prefix_range("pair/"));
      if (es.size() != 2 || es[0].second != es[1].second) ++mismatches;
      ++reads;
    }
  });
  // Until the reader has overlapped many writes (RocksDB writes fast).
  for (int i = 1; i <= 300 || (reads < 300 && i < 1000000); ++i) write_pair(i);
  done = true;
  reader.join();
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(reads, 0);
}

// --- Order and scans.

TYPED_TEST(metadata_engine, keys_sort_bytewise_high_bytes_last) {
  auto& e = *this->engine_;
  // As unsigned bytes: 0x00 < 0x01 < 0x7f < 0x80 < 0xff, a prefix before
  // its extensions.
  const std::vector<std::string> sorted = {
      bytes({0x00}),       bytes({0x00, 0x00}), bytes({0x00, 0xff}), bytes({0x01}),
      bytes({0x7f}),       bytes({0x7f, 0x00}), bytes({0x80}),       bytes({0x80, 0x00}),
      bytes({0xfe, 0xff}), bytes({0xff}),       bytes({0xff, 0x00}), bytes({0xff, 0xff, 0xff}),
  };
  std::vector<std::string> shuffled = sorted;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  auto b = e.new_batch();
  for (const auto& k : shuffled) b->put(table::inodes, k, "v");
  e.write(*b, true);
  EXPECT_EQ(scan_keys(e, table::inodes, {}), sorted);
  std::vector<std::string> reversed(sorted.rbegin(), sorted.rend());
  EXPECT_EQ(scan_keys(e, table::inodes, {}, scan_order::backward), reversed);
  // Bounds with high bytes: [0x7f, 0xff) holds 0x7f.. up to 0xfe 0xff.
  EXPECT_EQ(scan_keys(e, table::inodes, {bytes({0x7f}), bytes({0xff})}),
            std::vector<std::string>(sorted.begin() + 4, sorted.begin() + 9));
  // Big-endian numbers sort as numbers.
  auto n = e.new_batch();
  for (std::uint64_t v : {0x100ull, 0xffull, 0x8000000000000000ull, 1ull, 0x7fffffffffffffffull})
    n->put(table::extents, be64(v), "n");
  e.write(*n, true);
  EXPECT_EQ(scan_keys(e, table::extents, {}),
            (std::vector<std::string>{be64(1), be64(0xff), be64(0x100), be64(0x7fffffffffffffff),
                                      be64(0x8000000000000000)}));
}

TYPED_TEST(metadata_engine, forward_scan_keeps_to_bounds_and_start) {
  auto& e = *this->engine_;
  put_ten(e, table::dirents);
  const key_range range{"k02", "k07"};
  EXPECT_EQ(scan_keys(e, table::dirents, range), names({2, 3, 4, 5, 6}));
  EXPECT_EQ(scan_keys(e, table::dirents, range, scan_order::forward, "k04"), names({4, 5, 6}));
  EXPECT_EQ(scan_keys(e, table::dirents, range, scan_order::forward, "k045"), names({5, 6}));
  EXPECT_EQ(scan_keys(e, table::dirents, range, scan_order::forward, "a"), names({2, 3, 4, 5, 6}));
  EXPECT_TRUE(scan_keys(e, table::dirents, range, scan_order::forward, "k07").empty());
  EXPECT_TRUE(scan_keys(e, table::dirents, range, scan_order::forward, "z").empty());
  EXPECT_EQ(scan_keys(e, table::dirents, {"k08", ""}), names({8, 9}));  // no upper bound
  EXPECT_EQ(scan_keys(e, table::dirents, {"", "k02"}), names({0, 1}));  // no lower bound
  EXPECT_TRUE(scan_keys(e, table::dirents, {"k05", "k05"}).empty());
  const entries values = scan_all(e, table::dirents, {"k03", "k05"});
  EXPECT_EQ(values, (entries{{"k03", "v03"}, {"k04", "v04"}}));
  EXPECT_TRUE(scan_keys(e, table::inodes, {}).empty());  // other tables are empty
}

TYPED_TEST(metadata_engine, prefix_range_visits_exactly_the_prefix) {
  auto& e = *this->engine_;
  auto b = e.new_batch();
  for (const std::string k : {"orphan", "orphan.", "orphan/", "orphan/1", "orphan/2", "orphan0",
                              "orphan/\xff\xff", "orphan1", "orphaN/"})
    b->put(table::meta, k, "x");
  b->put(table::meta, bytes({0x01, 0xff}), "x");
  b->put(table::meta, bytes({0x01, 0xff, 0x00}), "x");
  b->put(table::meta, bytes({0x02}), "x");
  b->put(table::meta, bytes({0xff, 0xff, 0x01}), "x");
  e.write(*b, true);
  EXPECT_EQ(store::prefix_range("orphan/").upper, "orphan0");
  EXPECT_EQ(scan_keys(e, table::meta, store::prefix_range("orphan/")),
            (std::vector<std::string>{"orphan/", "orphan/1", "orphan/2", "orphan/\xff\xff"}));
  EXPECT_EQ(scan_keys(e, table::meta, store::prefix_range(bytes({0x01, 0xff}))),
            (std::vector<std::string>{bytes({0x01, 0xff}), bytes({0x01, 0xff, 0x00})}));
  // All 0xff: no upper bound.
  EXPECT_EQ(scan_keys(e, table::meta, store::prefix_range(bytes({0xff, 0xff}))),
            (std::vector<std::string>{bytes({0xff, 0xff, 0x01})}));
}

// Extents are keyed inode + offset: the record that covers an offset is the
// last one at or before it.
TYPED_TEST(metadata_engine, forward_from_floor_starts_at_the_record_covering_start) {
  auto& e = *this->engine_;
  constexpr std::uint64_t mib = 1u << 20;
  auto b = e.new_batch();
  b->put(table::extents, be64(6) + be64(100 * mib), "other inode");
  for (std::uint64_t off : {4 * mib, 8 * mib, 12 * mib})
    b->put(table::extents, be64(7) + be64(off), std::to_string(off / mib));
  b->put(table::extents, be64(8) + be64(0), "next inode");
  e.write(*b, true);
  const key_range ino7 = store::prefix_range(be64(7));
  const auto from = [&](std::uint64_t off) {
    std::vector<std::string> out;
    for (const auto& [k, v] :
         scan_all(e, table::extents, ino7, scan_order::forward_from_floor, be64(7) + be64(off)))
      out.push_back(v);
    return out;
  };
  // Inside a record: that record first.
  EXPECT_EQ(from(5 * mib), (std::vector<std::string>{"4", "8", "12"}));
  EXPECT_EQ(from(9 * mib), (std::vector<std::string>{"8", "12"}));
  // Exactly at one.
  EXPECT_EQ(from(8 * mib), (std::vector<std::string>{"8", "12"}));
  // Nothing at or before start in range (inode 6's record is below the
  // lower bound): the first one after.
  EXPECT_EQ(from(1 * mib), (std::vector<std::string>{"4", "8", "12"}));
  // Past the last: the last one (it may still cover start).
  EXPECT_EQ(from(100 * mib), (std::vector<std::string>{"12"}));
  // Plain forward from the same start skips the covering record.
  std::vector<std::string> plain;
  for (const auto& [k, v] :
       scan_all(e, table::extents, ino7, scan_order::forward, be64(7) + be64(5 * mib)))
    plain.push_back(v);
  EXPECT_EQ(plain, (std::vector<std::string>{"8", "12"}));
  // A start at or past the upper bound: from the last key in range.
  EXPECT_EQ(keys_of(scan_all(e, table::extents, ino7, scan_order::forward_from_floor, be64(9))),
            std::vector<std::string>{be64(7) + be64(12 * mib)});
  // An empty inode range: nothing.
  EXPECT_TRUE(scan_all(e, table::extents, store::prefix_range(be64(5)),
                       scan_order::forward_from_floor, be64(5) + be64(mib))
                  .empty());
}

TYPED_TEST(metadata_engine, backward_scan_from_start_and_from_the_end) {
  auto& e = *this->engine_;
  put_ten(e, table::xattrs);
  const key_range range{"k02", "k08"};
  EXPECT_EQ(scan_keys(e, table::xattrs, range, scan_order::backward), names({7, 6, 5, 4, 3, 2}));
  EXPECT_EQ(scan_keys(e, table::xattrs, range, scan_order::backward, "k05"), names({5, 4, 3, 2}));
  EXPECT_EQ(scan_keys(e, table::xattrs, range, scan_order::backward, "k055"), names({5, 4, 3, 2}));
  EXPECT_EQ(scan_keys(e, table::xattrs, range, scan_order::backward, "k09"),
            names({7, 6, 5, 4, 3, 2}));
  // A start below lower is lower.
  EXPECT_EQ(scan_keys(e, table::xattrs, range, scan_order::backward, "a"), names({2}));
  EXPECT_EQ(scan_keys(e, table::xattrs, {}, scan_order::backward, "k015"), names({1, 0}));
  EXPECT_EQ(scan_keys(e, table::xattrs, {}, scan_order::backward).size(), 10u);
}

TYPED_TEST(metadata_engine, a_scan_stops_when_told) {
  auto& e = *this->engine_;
  auto b = e.new_batch();
  for (int i = 0; i < 3000; ++i) b->put(table::chunks, be64(static_cast<std::uint64_t>(i)), "v");
  e.write(*b, true);
  for (const scan_order order :
       {scan_order::forward, scan_order::forward_from_floor, scan_order::backward}) {
    for (const std::size_t stop :
         {std::size_t{1}, std::size_t{3}, std::size_t{40}, std::size_t{1500}}) {
      int calls = 0;
      scan_options o;
      o.order = order;
      e.scan(table::chunks, {}, o, "test", [&](std::string_view, std::string_view) {
        return static_cast<std::size_t>(++calls) < stop;
      });
      EXPECT_EQ(calls, static_cast<int>(stop)) << static_cast<int>(order);
      // The engine is fine afterwards.
      EXPECT_EQ(e.get(table::chunks, be64(5), "test"), "v");
    }
  }
}

// A scan reads the records as they were when it began, also when a write
// lands while it is running (here: from its own callback) and the scan is
// longer than one of an engine's pages.
TYPED_TEST(metadata_engine, a_scan_reads_one_snapshot) {
  auto& e = *this->engine_;
  auto b = e.new_batch();
  for (int i = 0; i < 200; ++i) b->put(table::inodes, be64(static_cast<std::uint64_t>(i)), "old");
  e.write(*b, true);
  int seen = 0;
  bool saw_new = false;
  scan_options o;
  e.scan(table::inodes, {}, o, "test", [&](std::string_view k, std::string_view v) {
    if (seen++ == 0) {
      auto w = e.new_batch();
      w->put(table::inodes, be64(1000), "new");
      w->put(table::inodes, be64(150), "new");
      w->erase(table::inodes, be64(199));
      e.write(*w, true);
      // Reads inside the callback see the write.
      EXPECT_EQ(e.get(table::inodes, be64(1000), "test"), "new");
    }
    if (v == "new") saw_new = true;
    return true;
  });
  EXPECT_EQ(seen, 200);
  EXPECT_FALSE(saw_new);
  EXPECT_EQ(scan_keys(e, table::inodes, {}).size(), 200u);  // 1000 added, 199 gone
}

TYPED_TEST(metadata_engine, large_values_round_trip) {
  auto& e = *this->engine_;
  constexpr std::size_t k_4mib = 4u << 20;
  std::vector<std::string> keys, values;
  auto b = e.new_batch();
  // 20 of 4 MiB: one batch of 80 MiB, more than one statement's worth for
  // PostgreSQL.
  for (int i = 0; i < 20; ++i) {
    keys.push_back(be64(static_cast<std::uint64_t>(i)));
    values.push_back(random_bytes(k_4mib, static_cast<std::uint32_t>(i)));
    b->put(table::payloads, keys.back(), values.back());
  }
  e.write(*b, true);
  EXPECT_EQ(e.get(table::payloads, keys[3], "test"), values[3]);
  const auto got = e.get_payloads(keys, "test");
  ASSERT_EQ(got.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(got[i] == values[i]) << i;
  std::size_t i = 0;
  e.scan(table::payloads, {}, {}, "test", [&](std::string_view k, std::string_view v) {
    EXPECT_EQ(k, keys[i]);
    EXPECT_TRUE(v == values[i]) << i;
    ++i;
    return true;
  });
  EXPECT_EQ(i, keys.size());
}

TYPED_TEST(metadata_engine, many_keys_scan_in_order_across_pages) {
  auto& e = *this->engine_;
  constexpr int k_keys = 5000;
  std::vector<std::string> keys;
  auto b = e.new_batch();
  for (int i = 0; i < k_keys; ++i) {
    keys.push_back(be64(static_cast<std::uint64_t>(i) * 7919));
    b->put(table::dirents, keys.back(), std::to_string(i));
  }
  e.write(*b, true);
  const entries forward = scan_all(e, table::dirents, {});
  ASSERT_EQ(forward.size(), keys.size());
  for (int i = 0; i < k_keys; ++i) {
    ASSERT_EQ(forward[static_cast<std::size_t>(i)].first, keys[static_cast<std::size_t>(i)]);
    ASSERT_EQ(forward[static_cast<std::size_t>(i)].second, std::to_string(i));
  }
  const entries backward = scan_all(e, table::dirents, {}, scan_order::backward);
  ASSERT_EQ(backward.size(), keys.size());
  for (int i = 0; i < k_keys; ++i)
    ASSERT_EQ(backward[static_cast<std::size_t>(i)].first,
              keys[static_cast<std::size_t>(k_keys - 1 - i)]);
  // From the middle, with bounds.
  EXPECT_EQ(
      scan_all(e, table::dirents, {keys[100], keys[4000]}, scan_order::forward, keys[2500]).size(),
      1500u);
  EXPECT_EQ(
      scan_all(e, table::dirents, {keys[100], keys[4000]}, scan_order::backward, keys[2500]).size(),
      2401u);
  const auto all = e.get_many(table::dirents, keys, "test");
  for (int i = 0; i < k_keys; ++i)
    ASSERT_EQ(all[static_cast<std::size_t>(i)], std::to_string(i)) << i;
  // Erase them all in one batch.
  auto d = e.new_batch();
  for (const auto& k : keys) d->erase(table::dirents, k);
  e.write(*d, true);
  EXPECT_TRUE(scan_keys(e, table::dirents, {}).empty());
}

TYPED_TEST(metadata_engine, concurrent_readers_and_writers) {
  auto& e = *this->engine_;
  constexpr int k_threads = 8;
  constexpr int k_batches = 25;
  constexpr int k_per_batch = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      try {
        const std::string prefix = "t" + std::to_string(t) + "/";
        for (int n = 0; n < k_batches; ++n) {
          std::vector<std::string> keys;
          auto b = e.new_batch();
          for (int i = 0; i < k_per_batch; ++i) {
            keys.push_back(prefix + be64(static_cast<std::uint64_t>(n * k_per_batch + i)));
            b->put(table::inodes, keys.back(), keys.back() + "=v");
          }
          e.write(*b, n % 2 == 0);
          // What this thread wrote is there at once.
          for (const auto& k : keys)
            if (e.get(table::inodes, k, "test") != k + "=v") ++failures;
          const auto many = e.get_many(table::inodes, keys, "test");
          for (std::size_t i = 0; i < keys.size(); ++i)
            if (many[i] != keys[i] + "=v") ++failures;
          const entries mine = scan_all(e, table::inodes, store::prefix_range(prefix));
          if (mine.size() != static_cast<std::size_t>((n + 1) * k_per_batch)) ++failures;
          // Everyone's, in order.
          const std::vector<std::string> all = keys_of(scan_all(e, table::inodes, {}));
          if (!std::is_sorted(all.begin(), all.end())) ++failures;
        }
      } catch (const std::exception& ex) {
        ADD_FAILURE() << ex.what();
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  const entries all = scan_all(e, table::inodes, {});
  ASSERT_EQ(all.size(), static_cast<std::size_t>(k_threads * k_batches * k_per_batch));
  for (const auto& [k, v] : all) EXPECT_EQ(v, k + "=v");
}

// --- One state of every table (a dump of a volume in use).

TYPED_TEST(metadata_engine, scan_consistent_sees_one_state_of_every_table) {
  auto& e = *this->engine_;
  // More records than one PostgreSQL page (1,024 rows), so later pages are
  // read after the commit below, in the scan's snapshot still.
  {
    auto b = e.new_batch();
    for (std::uint64_t i = 0; i < 2500; ++i) b->put(table::inodes, be64(i), "old");
    b->put(table::extents, "e1", "old");
    e.write(*b, true);
  }
  std::map<table, entries> seen;
  bool wrote = false;
  const table tables[] = {table::inodes, table::extents};
  e.scan_consistent(tables, "test scan", [&](table t, std::string_view k, std::string_view v) {
    seen[t].emplace_back(k, v);
    if (wrote) return;
    wrote = true;
    // One commit while the scan is on its first record: it must show in
    // neither table, though both are read after it.
    auto b = e.new_batch();
    b->put(table::inodes, be64(2400), "new");
    b->erase(table::inodes, be64(2499));
    b->put(table::inodes, be64(9999), "new");
    b->put(table::extents, "e2", "new");
    e.write(*b, true);
  });
  ASSERT_EQ(seen[table::inodes].size(), 2500u);
  for (std::uint64_t i = 0; i < 2500; ++i) {
    EXPECT_EQ(seen[table::inodes][i].first, be64(i));
    EXPECT_EQ(seen[table::inodes][i].second, "old");
  }
  EXPECT_EQ(seen[table::extents], (entries{{"e1", "old"}}));
  // Tables not asked for are not visited.
  EXPECT_EQ(seen.size(), 2u);
  // The commit is there for the next reader.
  EXPECT_EQ(e.get(table::inodes, be64(2400), "test"), "new");
  EXPECT_EQ(e.get(table::inodes, be64(2499), "test"), std::nullopt);
  EXPECT_EQ(scan_all(e, table::extents, {}).size(), 2u);
}

TYPED_TEST(metadata_engine, scan_consistent_stops_when_its_callback_throws) {
  auto& e = *this->engine_;
  put_ten(e, table::chunks);
  int calls = 0;
  const table tables[] = {table::chunks};
  EXPECT_THROW(e.scan_consistent(tables, "test scan",
                                 [&](table, std::string_view, std::string_view) {
                                   if (++calls == 3) throw std::runtime_error("stop");
                                 }),
               std::runtime_error);
  EXPECT_EQ(calls, 3);
  // The engine works on after it (PostgreSQL: the connection is usable).
  EXPECT_EQ(e.get(table::chunks, "k05", "test"), "v05");
  put(e, table::chunks, "k10", "v10");
  EXPECT_EQ(scan_all(e, table::chunks, {}).size(), 11u);
}

// --- PostgreSQL only.

class metadata_engine_postgres : public ::testing::Test {
 protected:
  void SetUp() override {
    DENSEFS_POSTGRES_SERVER(server);
    server_ = server;
    db_ = server_->create_database();
    options_.conninfo = server_->conninfo(db_);
  }
  std::unique_ptr<store::postgres_engine> make() {
    store::postgres_engine::create(options_);
    return store::postgres_engine::open(options_);
  }
  std::string sql(const std::string& text) { return server_->psql(db_, text); }
  // Ends the session holding the volume's lock (it also holds a key of its
  // own: sessions, not locks) and returns the count of sessions ended.
  std::string end_lock_holder() {
    return sql(
        "SELECT count(pg_terminate_backend(pid)) FROM (SELECT DISTINCT pid FROM pg_locks WHERE "
        "locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE "
        "datname = current_database())) s");
  }
  // Another writer of the volume, once the lock is free (terminating is
  // asynchronous); nullptr if it never is.
  std::unique_ptr<store::postgres_engine> next_writer(const store::postgres_engine_options& o) {
    for (int i = 0; i < 100; ++i) {
      try {
        return store::postgres_engine::open(o);
      } catch (const store::store_error&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return nullptr;
  }
  // A new store in `dir` with its records in this database, locked (the
  // lock's descriptor in `lock`).
  std::unique_ptr<store::store> new_store(const std::filesystem::path& dir, int& lock) {
    store::store::create(dir, codec::default_policy(), store::payload_backend::pack,
                         options_.conninfo);
    lock = store::store::lock(dir);
    return store::store::open(dir);
  }
  // Two stores of one new volume in `dir`/a and `dir`/b (a directory each
  // for its packs, as two machines would have), writing beside each other.
  std::vector<std::unique_ptr<store::store>> shared_stores(const std::filesystem::path& dir) {
    int lock = -1;
    new_store(dir / "a", lock).reset();
    ::close(lock);
    std::filesystem::create_directory(dir / "b");
    std::filesystem::copy_file(dir / "a" / "FORMAT", dir / "b" / "FORMAT");
    std::vector<std::unique_ptr<store::store>> stores;
    for (const char* name : {"a", "b"})
      stores.push_back(store::store::open(dir / name, {.shared_writer = true}));
    return stores;
  }
  // An extent of `length` bytes whose chunk is named by `tag`.
  static store::extent_record extent(std::uint32_t tag, std::uint32_t length) {
    store::extent_record e;
    e.hash = store::sha256_of(std::to_string(tag));
    e.length = length;
    return e;
  }

  postgres_server* server_ = nullptr;
  std::string db_;
  store::postgres_engine_options options_;
};

void expect_one_line(const std::string& message) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_FALSE(message.empty());
}

TEST_F(metadata_engine_postgres, create_refuses_an_existing_schema) {
  auto e = make();
  put(*e, table::inodes, "kept", "1");
  try {
    store::postgres_engine::create(options_);
    FAIL() << "a second create succeeded";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), EEXIST) << err.what();
    expect_one_line(err.what());
    EXPECT_NE(std::string(err.what()).find(db_), std::string::npos) << err.what();
  }
  EXPECT_EQ(e->get(table::inodes, "kept", "test"), "1");
  // A database with only some of the tables is refused too.
  const std::string other = server_->create_database();
  server_->psql(other, "CREATE TABLE densefs_xattrs (k bytea PRIMARY KEY, v bytea NOT NULL)");
  store::postgres_engine_options o;
  o.conninfo = server_->conninfo(other);
  EXPECT_THROW(store::postgres_engine::create(o), store_error);
}

TEST_F(metadata_engine_postgres, create_makes_the_documented_schema) {
  auto e = make();
  EXPECT_EQ(e->kind(), "postgresql");
  EXPECT_EQ(sql("SELECT version FROM densefs_schema"), "1\n");
  EXPECT_EQ(sql("SELECT count(*) FROM densefs_schema WHERE created <= now()"), "1\n");
  const std::string columns =
      sql("SELECT table_name || '.' || column_name || ':' || data_type || ':' || is_nullable "
          "FROM information_schema.columns WHERE table_name LIKE 'densefs%' "
          "ORDER BY table_name, ordinal_position");
  EXPECT_EQ(columns,
            "densefs_chunks.k:bytea:NO\ndensefs_chunks.v:bytea:NO\n"
            "densefs_dirents.k:bytea:NO\ndensefs_dirents.v:bytea:NO\n"
            "densefs_extents.k:bytea:NO\ndensefs_extents.v:bytea:NO\n"
            "densefs_inodes.k:bytea:NO\ndensefs_inodes.v:bytea:NO\n"
            "densefs_meta.k:bytea:NO\ndensefs_meta.v:bytea:NO\n"
            "densefs_payloads.k:bytea:NO\ndensefs_payloads.v:bytea:NO\n"
            "densefs_schema.version:integer:NO\ndensefs_schema.created:timestamp with time "
            "zone:NO\n"
            "densefs_xattrs.k:bytea:NO\ndensefs_xattrs.v:bytea:NO\n");
  // The rows hold the engine's bytes as they are.
  put(*e, table::inodes, bytes({0x00, 0x01, 0xff}), bytes({0x80, 0x00}));
  EXPECT_EQ(sql("SELECT encode(k, 'hex') || '=' || encode(v, 'hex') FROM densefs_inodes"),
            "0001ff=8000\n");
  // PostgreSQL orders bytea bytewise, independent of the collation.
  EXPECT_EQ(sql("SELECT '\\x80'::bytea > '\\x7f'::bytea AND '\\xff'::bytea > '\\x80'::bytea "
                "AND '\\x00'::bytea > ''::bytea AND '\\x0100'::bytea > '\\x01'::bytea"),
            "t\n");
}

// search_path picks the schema, so one database can hold several volumes.
TEST_F(metadata_engine_postgres, volumes_in_separate_schemas_stay_apart) {
  sql("CREATE SCHEMA vol1; CREATE SCHEMA vol2");
  store::postgres_engine_options one = options_, two = options_;
  one.conninfo += " options='-c search_path=vol1'";
  two.conninfo += " options='-c search_path=vol2'";
  store::postgres_engine::create(one);
  store::postgres_engine::create(two);
  auto a = store::postgres_engine::open(one);
  auto b = store::postgres_engine::open(two);
  put(*a, table::inodes, "k", "in vol1");
  put(*b, table::inodes, "k", "in vol2");
  EXPECT_EQ(a->get(table::inodes, "k", "test"), "in vol1");
  EXPECT_EQ(b->get(table::inodes, "k", "test"), "in vol2");
  EXPECT_EQ(sql("SELECT convert_from(v, 'UTF8') FROM vol2.densefs_inodes"), "in vol2\n");
  EXPECT_THROW(store::postgres_engine::open(options_), store_error);  // public has none
}

TEST_F(metadata_engine_postgres, open_refuses_a_database_without_the_schema) {
  try {
    store::postgres_engine::open(options_);
    FAIL() << "opened an empty database";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), ENOENT) << err.what();
    expect_one_line(err.what());
    EXPECT_NE(std::string(err.what()).find("densefs_schema"), std::string::npos) << err.what();
  }
  // One table missing.
  make().reset();
  sql("DROP TABLE densefs_extents");
  try {
    store::postgres_engine::open(options_);
    FAIL() << "opened a database without densefs_extents";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), ENOENT) << err.what();
    EXPECT_NE(std::string(err.what()).find("densefs_extents"), std::string::npos) << err.what();
  }
}

TEST_F(metadata_engine_postgres, open_refuses_a_newer_schema_version) {
  make().reset();
  sql("UPDATE densefs_schema SET version = 2");
  try {
    store::postgres_engine::open(options_);
    FAIL() << "opened a newer schema";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), EPROTONOSUPPORT) << err.what();
    expect_one_line(err.what());
    EXPECT_NE(std::string(err.what()).find("schema version 2"), std::string::npos) << err.what();
  }
  sql("DELETE FROM densefs_schema");
  EXPECT_THROW(store::postgres_engine::open(options_), store_error);
  sql("INSERT INTO densefs_schema VALUES (1, now())");
  EXPECT_NO_THROW(store::postgres_engine::open(options_));
}

TEST_F(metadata_engine_postgres, no_message_names_the_password) {
  const std::string secret = "hunter2-secret";
  // The private server trusts its socket, so a password is accepted and
  // ignored: the engine must still never repeat it.
  store::postgres_engine_options o;
  o.conninfo = server_->conninfo(db_) + " password=" + secret;
  store::postgres_engine::create(o);
  auto e = store::postgres_engine::open(o);
  const std::string where = e->where();
  EXPECT_EQ(where.find(secret), std::string::npos) << where;
  EXPECT_NE(where.find(db_), std::string::npos) << where;
  EXPECT_EQ(where.rfind("volume on postgresql://", 0), 0u) << where;
  EXPECT_NE(where.find(":5432/"), std::string::npos) << where;

  // The URI form, with the socket directory as its host.
  std::string dir;
  for (char c : server_->socket_dir().string())
    dir += c == '/' ? std::string("%2F") : std::string(1, c);
  store::postgres_engine_options uri;
  uri.conninfo = "postgresql://postgres:" + secret + "@" + dir + ":5432/" + db_;
  uri.read_only = true;  // `e` has the volume open for writing
  auto by_uri = store::postgres_engine::open(uri);
  EXPECT_EQ(by_uri->where().find(secret), std::string::npos) << by_uri->where();
  EXPECT_EQ(by_uri->where(), where);

  // Errors: a database that does not exist, a malformed string.
  for (const std::string& bad :
       {server_->conninfo("no_such_db") + " password=" + secret,
        "postgresql://postgres:" + secret + "@" + dir + ":5432/no_such_db",
        "host=" + server_->socket_dir().string() + " password=" + secret + " bogus_option=1",
        "postgresql://postgres:" + secret + "%zz@" + dir + ":5432/x"}) {
    try {
      store::postgres_engine::open({.conninfo = bad});
      ADD_FAILURE() << "opened " << bad;
    } catch (const store_error& err) {
      EXPECT_EQ(err.error_number(), EIO) << err.what();
      EXPECT_EQ(std::string(err.what()).find(secret), std::string::npos) << err.what();
      EXPECT_EQ(std::string(err.what()).find("hunter2"), std::string::npos) << err.what();
      expect_one_line(err.what());
    }
  }
}

TEST(metadata_engine_postgres_conninfo, names_a_password) {
  using store::postgres_engine;
  EXPECT_FALSE(postgres_engine::names_a_password(""));
  EXPECT_FALSE(postgres_engine::names_a_password("host=db1 dbname=vol1 user=densefs"));
  EXPECT_FALSE(postgres_engine::names_a_password("postgresql://densefs@db1:5432/vol1"));
  EXPECT_FALSE(postgres_engine::names_a_password("postgresql://db1/vol1?passfile=/etc/pgpass"));
  EXPECT_TRUE(postgres_engine::names_a_password("host=db1 password=s3cret dbname=vol1"));
  EXPECT_TRUE(postgres_engine::names_a_password("host=db1 password = 's3 cret'"));
  EXPECT_TRUE(postgres_engine::names_a_password("postgresql://densefs:s3cret@db1/vol1"));
  EXPECT_TRUE(postgres_engine::names_a_password("postgres://db1/vol1?password=s3cret"));
  // Also when libpq cannot parse the rest.
  EXPECT_TRUE(postgres_engine::names_a_password("host=db1 password=s3cret bogus"));
  EXPECT_TRUE(postgres_engine::names_a_password("postgresql://u:s3cret%zz@db1/vol1"));
}

// A statement that fails in the middle of a batch: nothing of the batch is
// applied, and the error names the commit and PostgreSQL's message.
TEST_F(metadata_engine_postgres, a_failing_batch_leaves_nothing) {
  auto e = make();
  put(*e, table::inodes, "before", "1");
  sql("CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
      "IF NEW.k = '\\x626f6f6d'::bytea THEN RAISE EXCEPTION 'refused by the test'; END IF; "
      "IF NEW.k = '\\x66756c6c'::bytea THEN "
      "RAISE EXCEPTION 'no space' USING ERRCODE = 'disk_full'; END IF; "
      "RETURN NEW; END $$ LANGUAGE plpgsql; "
      "CREATE TRIGGER refuse BEFORE INSERT ON densefs_xattrs "
      "FOR EACH ROW EXECUTE FUNCTION refuse()");
  auto b = e->new_batch();
  b->put(table::inodes, "new", "1");      // before the failing statement
  b->erase(table::inodes, "before");      // also before
  b->put(table::xattrs, "boom", "x");     // fails
  b->put(table::payloads, "after", "1");  // after it
  try {
    e->write(*b, true);
    FAIL() << "the batch committed";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), EIO) << err.what();
    EXPECT_NE(std::string(err.what()).find("refused by the test"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("committing"), std::string::npos) << err.what();
    expect_one_line(err.what());
  }
  EXPECT_EQ(e->get(table::inodes, "new", "test"), std::nullopt);
  EXPECT_EQ(e->get(table::inodes, "before", "test"), "1");
  EXPECT_EQ(e->get(table::payloads, "after", "test"), std::nullopt);
  EXPECT_EQ(e->get(table::xattrs, "boom", "test"), std::nullopt);

  auto full = e->new_batch();
  full->put(table::inodes, "new", "1");
  full->put(table::xattrs, "full", "x");
  try {
    e->write(*full, false);
    FAIL() << "the batch committed";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), ENOSPC) << err.what();
  }
  EXPECT_EQ(e->get(table::inodes, "new", "test"), std::nullopt);
  // The engine goes on.
  put(*e, table::inodes, "new", "2");
  EXPECT_EQ(e->get(table::inodes, "new", "test"), "2");
}

// A connection prepares each statement at its first use, in the same
// pipeline (run_pipeline): one that a failed statement before it skipped
// was never made, and must be made at its next use.
TEST_F(metadata_engine_postgres, statements_a_failed_batch_skipped_run_later) {
  options_.connections = 1;  // every call on the one connection
  auto e = make();
  put(*e, table::inodes, "a", "1");  // the usual statements, prepared
  sql("CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
      "IF NEW.k = '\\x626f6f6d'::bytea THEN RAISE EXCEPTION 'refused by the test'; END IF; "
      "RETURN NEW; END $$ LANGUAGE plpgsql; "
      "CREATE TRIGGER refuse BEFORE INSERT ON densefs_inodes "
      "FOR EACH ROW EXECUTE FUNCTION refuse()");
  auto failing = e->new_batch();
  failing->put(table::inodes, "boom", "x");  // fails
  failing->put(table::payloads, "p", "1");   // skipped, with the two below
  failing->erase(table::xattrs, "x");
  EXPECT_THROW(e->write(*failing, false), store_error);
  auto ok = e->new_batch();
  ok->put(table::inodes, "b", "1");
  ok->put(table::payloads, "p", "2");
  ok->erase(table::xattrs, "x");
  EXPECT_NO_THROW(e->write(*ok, false));
  EXPECT_EQ(e->get(table::payloads, "p", "test"), "2");
  EXPECT_EQ(e->get(table::inodes, "boom", "test"), std::nullopt);
}

// The server ends the engine's sessions (a restart, an idle timeout): the
// next calls connect anew.
TEST_F(metadata_engine_postgres, lost_connections_are_made_again) {
  auto e = make();
  put_ten(*e, table::dirents);
  // Use several pooled connections, so several are dropped.
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] { EXPECT_EQ(scan_keys(*e, table::dirents, {}).size(), 10u); });
  for (auto& t : threads) t.join();
  // Ends every session of the engine and waits until they are gone, so
  // that the engine finds them closed (rather than racing their exit).
  const auto kill = [&] {
    const std::string killed =
        sql("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'densefs' AND datname = current_database()) t");
    for (int i = 0; i < 100; ++i) {
      if (sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'densefs' "
              "AND datname = current_database()") == "0\n")
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return killed;
  };
  EXPECT_NE(kill(), "0\n");
  EXPECT_EQ(e->get(table::dirents, "k03", "test"), "v03");
  EXPECT_NE(kill(), "0\n");
  EXPECT_EQ(scan_keys(*e, table::dirents, {}).size(), 10u);
  EXPECT_NE(kill(), "0\n");
  const std::vector<std::string> two = {"k01", "k02"};
  EXPECT_EQ(e->get_many(table::dirents, two, "test")[1], "v02");
  EXPECT_NE(kill(), "0\n");
  put(*e, table::dirents, "k10", "v10");  // a write checks its connection first
  EXPECT_EQ(e->get(table::dirents, "k10", "test"), "v10");
}

// Between libpq and the test server: a unix-socket proxy that can cut a
// connection at the moment that makes a commit's outcome unknown to the
// client. Armed with `after_commit`, it passes the client's next bytes on
// and then drops the connection instead of passing the server's answer
// back (PostgreSQL answers a pipeline at its Sync, after the COMMIT: the
// batch is stored, the client cannot know). Armed with `before_commit`, it
// drops the client's next bytes and the connection (nothing reached the
// server). One cut per arming.
class cutting_proxy {
 public:
  enum class cut { none, after_commit, before_commit };

  explicit cutting_proxy(const std::filesystem::path& server_socket)
      : server_socket_(server_socket) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = address(socket_path());
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 16) != 0)
      throw std::runtime_error(std::string("proxy socket: ") + std::strerror(errno));
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~cutting_proxy() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
    std::lock_guard lock(mutex_);
    for (auto& t : pipes_) t.join();
  }
  // A libpq connection string through the proxy for database `db`.
  std::string conninfo(const std::string& db) const {
    return "host=" + dir_.path().string() + " port=5432 user=postgres dbname=" + db;
  }
  void arm(cut c) { armed_ = c; }
  bool fired() const { return fired_; }

 private:
  std::filesystem::path socket_path() const { return dir_.path() / ".s.PGSQL.5432"; }
  static sockaddr_un address(const std::filesystem::path& p) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
    return a;
  }
  void accept_loop() {
    for (;;) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;  // shut down
      const int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a = address(server_socket_);
      if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(client);
        if (server >= 0) ::close(server);
        continue;
      }
      std::lock_guard lock(mutex_);
      pipes_.emplace_back([this, client, server] { pipe(client, server); });
    }
  }
  // Passes bytes both ways until either side closes, or a cut.
  void pipe(int client, int server) {
    bool doomed = false;  // cut when the server next answers
    char buffer[65536];
    for (;;) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 200) < 0) break;
      if (stopping_) break;
      if (fds[0].revents) {
        const ssize_t n = ::read(client, buffer, sizeof buffer);
        if (n <= 0) break;
        cut expected = cut::before_commit;
        if (armed_.compare_exchange_strong(expected, cut::none)) {
          fired_ = true;
          break;
        }
        expected = cut::after_commit;
        if (armed_.compare_exchange_strong(expected, cut::none)) doomed = true;
        if (::write(server, buffer, static_cast<std::size_t>(n)) != n) break;
      }
      if (fds[1].revents) {
        const ssize_t n = ::read(server, buffer, sizeof buffer);
        if (n <= 0) break;
        if (doomed) {
          fired_ = true;
          break;
        }
        if (::write(client, buffer, static_cast<std::size_t>(n)) != n) break;
      }
    }
    ::close(client);
    ::close(server);
  }

  std::filesystem::path server_socket_;
  temp_dir dir_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<cut> armed_{cut::none};
  std::atomic<bool> fired_{false};
  std::mutex mutex_;
  std::vector<std::thread> pipes_;
  std::thread thread_;
};

// A connection lost while a batch commits (a server restart, a network
// cut): the engine asks the server, on a new connection, whether the batch
// committed (its outcome row, docs/scale-out.md) instead of failing with
// EIO. Committed: it returns, the batch applied once. Not committed: it
// sends the batch again.
TEST_F(metadata_engine_postgres, a_commit_whose_connection_was_lost_is_settled_not_failed) {
  make();  // the schema, through the server's own socket
  cutting_proxy proxy(server_->socket_dir() / ".s.PGSQL.5432");
  store::postgres_engine_options through = options_;
  through.conninfo = proxy.conninfo(db_);
  auto e = store::postgres_engine::open(through);
  const auto token_row = [&] {
    return sql(
        "SELECT encode(v, 'hex') FROM densefs_meta WHERE k >= 'commit_outcome/' AND "
        "k < 'commit_outcome0'");
  };

  put(*e, table::inodes, "first", "1");
  EXPECT_EQ(token_row(), "0100000000000000\n") << "the first write's token";

  // Stored, answer lost: settled as committed, not sent again (the token
  // row keeps the second write's token; a resend would have stored the
  // third's).
  proxy.arm(cutting_proxy::cut::after_commit);
  put(*e, table::inodes, "second", "2");
  EXPECT_TRUE(proxy.fired());
  EXPECT_EQ(sql("SELECT count(*) FROM densefs_inodes WHERE k = 'second'"), "1\n");
  EXPECT_EQ(token_row(), "0200000000000000\n") << "committed once, not written again";

  // Never reached the server: written again, with the next token.
  proxy.arm(cutting_proxy::cut::before_commit);
  put(*e, table::inodes, "third", "3");
  EXPECT_EQ(sql("SELECT count(*) FROM densefs_inodes WHERE k = 'third'"), "1\n");
  EXPECT_EQ(token_row(), "0400000000000000\n") << "the lost send, then the one that landed";
  EXPECT_EQ(e->get(table::inodes, "second", "test"), "2");

  // A writer that opens the volume next clears the rows of those before.
  e.reset();
  auto next = store::postgres_engine::open(options_);
  EXPECT_EQ(token_row(), "") << "the previous writer's row";
}

TEST_F(metadata_engine_postgres, read_only_refuses_writes) {
  make()->sync();
  {
    auto w = store::postgres_engine::open(options_);
    put(*w, table::meta, "k", "v");
  }
  store::postgres_engine_options ro = options_;
  ro.read_only = true;
  auto e = store::postgres_engine::open(ro);
  EXPECT_EQ(e->get(table::meta, "k", "test"), "v");
  auto b = e->new_batch();
  b->put(table::meta, "k", "w");
  try {
    e->write(*b, true);
    FAIL() << "a read-only engine wrote";
  } catch (const store_error& err) {
    EXPECT_EQ(err.error_number(), EROFS) << err.what();
  }
  EXPECT_EQ(e->get(table::meta, "k", "test"), "v");
}

// One connection, eight threads, and reads from inside scan callbacks: a
// thread that holds the connection gets another instead of waiting for
// itself.
TEST_F(metadata_engine_postgres, one_connection_serves_threads_and_nested_reads) {
  make().reset();
  store::postgres_engine_options o = options_;
  o.connections = 1;
  auto e = store::postgres_engine::open(o);
  put_ten(*e, table::dirents);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < 5; ++n) {
        int seen = 0;
        e->scan(table::dirents, {}, {}, "test", [&](std::string_view k, std::string_view v) {
          if (e->get(table::dirents, k, "nested") != std::string(v)) ++failures;
          ++seen;
          return true;
        });
        if (seen < 10) ++failures;
        put(*e, table::meta, "t" + std::to_string(t), std::to_string(n));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(e->get(table::meta, "t" + std::to_string(t), "test"), "4");
  // Nested calls do not leave extra sessions behind (a closed session's
  // server process exits a moment later): the pool's one, and the one that
  // holds the volume's lock.
  std::string sessions;
  for (int i = 0; i < 100; ++i) {
    sessions =
        sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'densefs' "
            "AND datname = current_database()");
    if (sessions == "2\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(sessions, "2\n");
}

// One writer per volume (until several clients can share one): a second
// read-write open is refused while the first is open, readers are not, and
// the lock goes with the engine.
TEST_F(metadata_engine_postgres, one_writer_at_a_time) {
  const store::postgres_engine_options o = options_;
  store::postgres_engine::create(o);
  {
    auto writer = store::postgres_engine::open(o);
    try {
      store::postgres_engine::open(o);
      ADD_FAILURE() << "a second writer opened the volume";
    } catch (const store::store_error& e) {
      EXPECT_EQ(e.error_number(), EBUSY) << e.what();
      EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
    }
    store::postgres_engine_options ro = o;
    ro.read_only = true;
    EXPECT_NO_THROW(store::postgres_engine::open(ro));
  }
  EXPECT_NO_THROW(store::postgres_engine::open(o));
}

// A batch's expectations: it applies only while every record it expects is
// as expected (absent ones too), and otherwise applies nothing and throws
// write_conflict, on the volume's writer and on writers beside each other.
TEST_F(metadata_engine_postgres, a_batch_applies_only_while_its_expectations_hold) {
  auto writer = make();
  put(*writer, table::chunks, "c1", std::string("r\0c1", 4));
  const auto try_write = [&](store::metadata_engine& e, std::optional<std::string_view> c1,
                             std::optional<std::string_view> c2) {
    auto b = e.new_batch();
    b->expect(table::chunks, "c1", c1);
    b->expect(table::chunks, "c2", c2);
    b->put(table::inodes, "written", "1");
    b->put(table::chunks, "c1", "next");
    try {
      e.write(*b, false);
      return true;
    } catch (const store::write_conflict& err) {
      expect_one_line(err.what());
      EXPECT_EQ(err.error_number(), EAGAIN);
      EXPECT_FALSE(e.get(table::inodes, "written", "test")) << "a conflicting batch applied";
      return false;
    }
  };
  EXPECT_FALSE(try_write(*writer, "other", std::nullopt));                 // c1 differs
  EXPECT_FALSE(try_write(*writer, std::string("r\0c1", 4), "x"));          // c2 absent
  EXPECT_FALSE(try_write(*writer, std::nullopt, std::nullopt));            // c1 present
  EXPECT_TRUE(try_write(*writer, std::string("r\0c1", 4), std::nullopt));  // as it is
  EXPECT_EQ(writer->get(table::chunks, "c1", "test"), "next");
  writer.reset();
  // Writers beside each other (no volume lock): the same.
  store::postgres_engine_options shared = options_;
  shared.lock_volume = false;
  auto a = store::postgres_engine::open(shared);
  erase(*a, table::inodes, "written");
  EXPECT_FALSE(try_write(*a, "r", std::nullopt));
  EXPECT_TRUE(try_write(*a, "next", std::nullopt));
}

// Writers beside each other on one volume (several mounts, each with a pool
// of connections) that read a counter and write it back incremented,
// expecting what they read, lose no increment: their commits take turns,
// and a write that read a stale value fails and is done again.
TEST_F(metadata_engine_postgres, writers_beside_each_other_lose_no_update) {
  make();
  store::postgres_engine_options shared = options_;
  shared.lock_volume = false;
  std::vector<std::unique_ptr<store::postgres_engine>> engines;
  for (int i = 0; i < 2; ++i) engines.push_back(store::postgres_engine::open(shared));
  const auto encode = [](std::uint64_t n) { return std::to_string(n); };
  put(*engines[0], table::meta, "counter", encode(0));
  constexpr int k_threads_per_engine = 3, k_increments = 40;
  std::atomic<int> conflicts{0};
  std::vector<std::thread> threads;
  for (auto& e : engines) {
    for (int t = 0; t < k_threads_per_engine; ++t) {
      threads.emplace_back([&, engine = e.get()] {
        for (int i = 0; i < k_increments; ++i) {
          for (;;) {
            const std::string read = engine->get(table::meta, "counter", "test").value();
            auto b = engine->new_batch();
            b->expect(table::meta, "counter", read);
            b->put(table::meta, "counter", encode(std::stoull(read) + 1));
            try {
              engine->write(*b, false);
              break;
            } catch (const store::write_conflict&) {
              ++conflicts;
            }
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(engines[0]->get(table::meta, "counter", "test"),
            encode(2 * k_threads_per_engine * k_increments));
  // How many reads went stale is up to timing (usually dozens).
  std::printf("metadata_engine_postgres: %d conflicts in %d increments\n", conflicts.load(),
              2 * k_threads_per_engine * k_increments);
}

// Expectations name records by their bytes, whatever they are (quotes,
// backslashes, NULs) and whatever the session's standard_conforming_strings
// (off: a backslash in a plain literal is an escape).
TEST_F(metadata_engine_postgres, expectations_hold_for_any_bytes_and_string_settings) {
  make();
  sql("ALTER DATABASE " + db_ + " SET standard_conforming_strings = off");
  auto e = store::postgres_engine::open(options_);
  const std::string key("k'\\x00\0$$\\", 10), value("v\\'\0\xff", 5);
  put(*e, table::chunks, key, value);
  auto stale = e->new_batch();
  stale->expect(table::chunks, key, std::nullopt);
  stale->put(table::chunks, key, "lost");
  EXPECT_THROW(e->write(*stale, false), store::write_conflict);
  auto current = e->new_batch();
  current->expect(table::chunks, key, value);
  current->expect(table::chunks, std::string("absent\\'", 8), std::nullopt);
  current->put(table::chunks, key, "next");
  EXPECT_NO_THROW(e->write(*current, false));
  EXPECT_EQ(e->get(table::chunks, key, "test"), "next");
}

// Writers that share a volume (share_volume) take its lock shared: any
// number of them at once, never beside a writer that has it alone, and the
// other way round.
TEST_F(metadata_engine_postgres, shared_writers_and_a_writer_alone_exclude_each_other) {
  make().reset();
  store::postgres_engine_options shared = options_;
  shared.share_volume = true;
  const auto refused = [](const store::postgres_engine_options& o) {
    try {
      store::postgres_engine::open(o);
      return std::string("opened");
    } catch (const store::store_error& e) {
      EXPECT_EQ(e.error_number(), EBUSY) << e.what();
      expect_one_line(e.what());
      return std::string(e.what());
    }
  };
  {
    auto a = store::postgres_engine::open(shared);
    auto b = store::postgres_engine::open(shared);
    EXPECT_NE(refused(options_).find("in use"), std::string::npos);
    put(*a, table::meta, "a", "1");
    put(*b, table::meta, "b", "1");
  }
  auto alone = store::postgres_engine::open(options_);
  EXPECT_NE(refused(shared).find("writes it alone"), std::string::npos);
  EXPECT_EQ(alone->get(table::meta, "b", "test"), "1");
}

// Read-modify-writes of writers beside each other (write_locked): three
// threads on each of two engines increment one counter, reading it in the
// locked transaction: no increment is lost and none has to be done again.
// Two builds have their connection ended by the server, one before a read
// of its own and one before its commit: each runs again, and each
// increment still counts once.
TEST_F(metadata_engine_postgres, locked_writes_of_writers_beside_each_other_lose_no_update) {
  make().reset();
  store::postgres_engine_options shared = options_;
  shared.share_volume = true;
  std::vector<std::unique_ptr<store::postgres_engine>> engines;
  for (int i = 0; i < 2; ++i) engines.push_back(store::postgres_engine::open(shared));
  put(*engines[0], table::meta, "counter", "0");
  constexpr int k_threads_per_engine = 3, k_increments = 40;
  std::atomic<int> builds{0};
  std::atomic<int> cuts{0};
  std::vector<std::thread> threads;
  for (auto& e : engines) {
    for (int t = 0; t < k_threads_per_engine; ++t) {
      threads.emplace_back([&, engine = e.get()] {
        for (int i = 0; i < k_increments; ++i) {
          engine->write_locked(
              store::k_commit_section,
              [&](store::locked_reads& reads, store::metadata_batch& batch) {
                ++builds;
                std::string n = reads.get(table::meta, "counter", "test").value();
                if (const int cut = cuts.fetch_add(1); cut < 2) {
                  // This transaction's server process, idle between its reads
                  // and its commit: ended.
                  EXPECT_EQ(sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE datname = current_database() AND state = 'idle in "
                                "transaction'"),
                            "1\n");
                  std::this_thread::sleep_for(std::chrono::milliseconds(200));
                  if (cut == 0) n = reads.get(table::meta, "counter", "test").value();
                }
                batch.put(table::meta, "counter", std::to_string(std::stoull(n) + 1));
              },
              false);
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  constexpr int k_total = 2 * k_threads_per_engine * k_increments;
  EXPECT_EQ(engines[0]->get(table::meta, "counter", "test"), std::to_string(k_total));
  EXPECT_EQ(builds.load(), k_total + 2);
}

// The file locks' transactions (update_apart, docs/scale-out.md "Locks
// across clients"): a writer alone and a follower (no volume lock) each
// run them, and two threads on each increment one counter in a section of
// their own: no increment is lost. Meanwhile the volume's own commits do
// not wait for them: a plain write goes through while a build holds its
// section.
TEST_F(metadata_engine_postgres, updates_apart_of_a_writer_and_a_follower_lose_no_update) {
  auto writer = make();
  store::postgres_engine_options follower_options = options_;
  follower_options.lock_volume = false;
  auto follower = store::postgres_engine::open(follower_options);
  put(*writer, table::meta, "counter", "0");
  constexpr int k_threads_per_engine = 2, k_increments = 30;
  std::vector<std::thread> threads;
  for (store::postgres_engine* engine : {writer.get(), follower.get()}) {
    for (int t = 0; t < k_threads_per_engine; ++t) {
      threads.emplace_back([engine] {
        for (int i = 0; i < k_increments; ++i) {
          engine->update_apart("lock 5", [](store::locked_reads& reads,
                                            store::metadata_batch& batch) {
            const std::string n = reads.get(table::meta, "counter", "test").value();
            EXPECT_EQ(reads.scan(table::meta, store::prefix_range("count"), 4, "test").size(), 1u);
            batch.put(table::meta, "counter", std::to_string(std::stoull(n) + 1));
          });
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(writer->get(table::meta, "counter", "test"),
            std::to_string(2 * k_threads_per_engine * k_increments));

  std::atomic<bool> holding{false}, written{false};
  std::thread holder([&] {
    follower->update_apart("lock 5", [&](store::locked_reads&, store::metadata_batch& batch) {
      holding = true;
      for (int i = 0; i < 100 && !written; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      batch.put(table::meta, "held", "1");
    });
  });
  while (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  put(*writer, table::inodes, "a commit", "1");
  written = true;
  holder.join();
  EXPECT_EQ(writer->get(table::meta, "held", "test"), "1");
  // More rows than the caller bounds its scan to: refused, not read whole.
  for (int i = 0; i < 5; ++i) put(*writer, table::meta, "row" + std::to_string(i), "x");
  EXPECT_EQ(error_of([&] {
              writer->update_apart(
                  "lock 6", [](store::locked_reads& reads, store::metadata_batch&) {
                    (void)reads.scan(table::meta, store::prefix_range("row"), 4, "test");
                  });
            }),
            EIO);
}

// Two stores writing one volume beside each other (store_open_options::
// shared_writer; each with a directory of its own for its packs, as two
// machines would have), four threads each: each takes inode numbers and
// references the same chunks, the first use of a chunk creating it on both
// at once, later drops them all again, and then both add and drop them in
// turn, so that chunks are created and deleted under each other's commits.
// No number is handed out twice and no reference is lost: the refcounts end
// exact, then at zero with every chunk and payload entry deleted.
TEST_F(metadata_engine_postgres, stores_writing_one_volume_beside_each_other_lose_nothing) {
  temp_dir tmp;
  std::vector<std::unique_ptr<store::store>> stores = shared_stores(tmp.path());

  // Half of them inline in the payloads table, half in packs.
  constexpr int k_chunks = 6, k_threads = 4, k_rounds = 10;
  std::vector<std::string> plain;
  for (int i = 0; i < k_chunks; ++i)
    plain.push_back(random_bytes(i % 2 ? 3000 + i : 9000 + i, 100 + static_cast<std::uint32_t>(i)));
  std::mutex mutex;
  std::vector<std::uint64_t> numbers;
  enum class phase { add, drop, both };
  const auto run = [&](store::store& s, phase ph) {
    std::vector<store::prepared_chunk> chunks;
    for (const std::string& p : plain) chunks.push_back(s.prepare_chunk(p, true));
    const auto commit = [&](bool add) {
      store::transaction t;
      for (const store::prepared_chunk& c : chunks)
        if (add)
          t.ref_chunk(c);
        else
          t.unref_chunk(c.hash);
      s.commit(t);
    };
    for (int round = 0; round < k_rounds; ++round) {
      if (ph == phase::both) {
        commit(true);
        commit(false);
        continue;
      }
      std::vector<std::uint64_t> mine;
      for (int i = 0; i < 3 && ph == phase::add; ++i) mine.push_back(s.allocate_ino());
      commit(ph == phase::add);
      std::lock_guard l(mutex);
      numbers.insert(numbers.end(), mine.begin(), mine.end());
    }
  };
  for (const phase ph : {phase::add, phase::drop, phase::both}) {
    std::vector<std::thread> threads;
    for (auto& s : stores)
      for (int t = 0; t < k_threads; ++t) threads.emplace_back([&, st = s.get()] { run(*st, ph); });
    for (std::thread& t : threads) t.join();
    for (const std::string& p : plain) {
      const store::chunk_hash h = store::sha256_of(p);
      const auto rec = stores[0]->get_chunk(h);
      if (ph == phase::add) {
        ASSERT_TRUE(rec);
        EXPECT_EQ(rec->refcount, 2u * k_threads * k_rounds);
      } else {
        EXPECT_FALSE(rec) << "refcount " << rec->refcount;
      }
      EXPECT_EQ(
          sql("SELECT count(*) FROM densefs_payloads WHERE k = decode('" + h.hex() + "', 'hex')"),
          ph == phase::add ? "1\n" : "0\n");
    }
  }
  std::sort(numbers.begin(), numbers.end());
  EXPECT_EQ(numbers.size(), 2u * k_threads * k_rounds * 3);
  EXPECT_EQ(std::adjacent_find(numbers.begin(), numbers.end()), numbers.end())
      << "an inode number was handed out twice";
}

// store::commit's `fill` runs inside the commit's lock: two stores writing
// one volume beside each other, three threads each, raise one inode's link
// count by reading its record in the fill and writing it back plus one.
// No increment is lost; with the fill run before the lock, 83 of 180 were
// (the file system's namespace operations rely on this).
TEST_F(metadata_engine_postgres, a_commits_fill_reads_inside_the_lock) {
  temp_dir tmp;
  std::vector<std::unique_ptr<store::store>> stores = shared_stores(tmp.path());
  store::inode_record file;
  file.ino = stores[0]->allocate_ino();
  file.mode = S_IFREG | 0644;
  {
    store::transaction t;
    t.put_inode(file);
    stores[0]->commit(t);
  }
  constexpr int k_threads = 3, k_increments = 30;
  std::vector<std::thread> threads;
  for (auto& s : stores) {
    for (int i = 0; i < k_threads; ++i) {
      threads.emplace_back([&, st = s.get()] {
        for (int n = 0; n < k_increments; ++n) {
          store::transaction t;
          st->commit(t, false, [&](store::transaction& txn) {
            store::inode_record r = st->get_inode(file.ino).value();
            ++r.nlink;
            txn.put_inode(r);
          });
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(stores[0]->get_inode(file.ino)->nlink, 2u * k_threads * k_increments);
}

// A follower (no lock) hears the notices of the writer's batches that
// commit, in order, and none of a batch that fails; the listener comes
// back after its connection is cut and says so with "".
TEST_F(metadata_engine_postgres, a_follower_hears_committed_notices_only) {
  auto writer = make();
  store::postgres_engine_options fo = options_;
  fo.lock_volume = false;
  auto follower = store::postgres_engine::open(fo);
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::string> heard;
  ASSERT_TRUE(follower->watch([&](std::string_view n) {
    std::lock_guard lock(m);
    heard.emplace_back(n);
    cv.notify_all();
  }));
  const auto wait_for = [&](std::size_t count) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return heard.size() >= count; });
  };
  // The LISTEN runs on the follower's thread: wait until the server has it.
  for (int i = 0; i < 200 && sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                                 "'LISTEN %' AND datname = current_database()") == "0\n";
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  const auto write = [&](const std::string& key, const std::string& notice) {
    auto b = writer->new_batch();
    b->put(table::inodes, key, "v");
    if (!notice.empty()) b->set_notice(notice);
    writer->write(*b, false);
  };
  write("a", "1 i1");
  write("b", "");  // no notice
  write("c", "1 i3");
  ASSERT_TRUE(wait_for(2));
  sql("CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$ "
      "LANGUAGE plpgsql; CREATE TRIGGER refuse BEFORE INSERT ON densefs_xattrs "
      "FOR EACH ROW EXECUTE FUNCTION refuse()");
  auto failing = writer->new_batch();
  failing->put(table::xattrs, "x", "v");
  failing->set_notice("1 i9");
  EXPECT_THROW(writer->write(*failing, false), store_error);
  write("d", "1 i4");
  ASSERT_TRUE(wait_for(3));
  {
    std::lock_guard lock(m);
    EXPECT_EQ(heard, (std::vector<std::string>{"1 i1", "1 i3", "1 i4"}));
  }
  // A follower writes its own rows (its session) without the volume's lock.
  auto own = follower->new_batch();
  own->put(table::meta, "session/x", "v");
  EXPECT_NO_THROW(follower->write(*own, false));
  // The listening connection cut: "" once it listens again.
  sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' "
      "AND datname = current_database()");
  ASSERT_TRUE(wait_for(4));
  {
    std::lock_guard lock(m);
    EXPECT_EQ(heard[3], "");
  }
  follower->unwatch();
}

// A write that waits on another session's lock ends with one line (and
// applies nothing) once the statement timeout passes, instead of hanging;
// densefs sets 60 s when the server has none, the connection string's
// options may set another.
TEST_F(metadata_engine_postgres, a_blocked_write_times_out_instead_of_hanging) {
  store::postgres_engine_options o = options_;
  o.conninfo += " options='-c statement_timeout=1000'";
  store::postgres_engine::create(o);
  auto e = store::postgres_engine::open(o);
  EXPECT_EQ(sql("SELECT current_setting('statement_timeout')"), "0\n");  // the server's
  std::thread holder([&] {
    sql("BEGIN; LOCK TABLE densefs_meta IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(4); COMMIT;");
  });
  // Until the holder has the lock.
  for (int i = 0; i < 200; ++i) {
    if (sql("SELECT count(*) FROM pg_locks WHERE relation = 'densefs_meta'::regclass AND mode = "
            "'AccessExclusiveLock' AND granted") == "1\n")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Without the timeout the write would wait for the holder (4 s) and then
  // succeed.
  try {
    put(*e, table::meta, "k", "v");
    ADD_FAILURE() << "a write through another session's exclusive lock succeeded";
  } catch (const store::store_error& err) {
    EXPECT_EQ(err.error_number(), EIO) << err.what();
    EXPECT_NE(std::string(err.what()).find("57014"), std::string::npos) << err.what();
    expect_one_line(err.what());
  }
  holder.join();
  EXPECT_EQ(e->get(table::meta, "k", "test"), std::nullopt);
  put(*e, table::meta, "k", "v");  // the lock is gone: it goes through
  EXPECT_EQ(e->get(table::meta, "k", "test"), "v");
}

// The lock's connection dropped (a server restart, an idle timeout, a
// terminated backend): the next write takes the lock again and goes
// through; when another writer took it meanwhile, writes fail and apply
// nothing.
TEST_F(metadata_engine_postgres, a_writer_that_lost_the_lock_writes_only_while_it_holds_it) {
  const store::postgres_engine_options o = options_;
  store::postgres_engine::create(o);
  auto writer = store::postgres_engine::open(o);
  put(*writer, table::meta, "a", "1");
  const std::string held =
      "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
      "database = (SELECT oid FROM pg_database WHERE datname = current_database())";
  EXPECT_EQ(end_lock_holder(), "1\n");
  // Terminating is asynchronous: wait until the lock is gone.
  for (int i = 0; i < 200 && sql(held) != "0\n"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(sql(held), "0\n") << "the terminated session still holds the lock";
  put(*writer, table::meta, "b", "2");  // took it again
  EXPECT_EQ(sql(held), "1\n");
  EXPECT_EQ(writer->get(table::meta, "b", "test"), "2");
  try {
    store::postgres_engine::open(o);
    ADD_FAILURE() << "a second writer opened the volume after the first took its lock again";
  } catch (const store::store_error& e) {
    EXPECT_EQ(e.error_number(), EBUSY) << e.what();
  }

  EXPECT_EQ(end_lock_holder(), "1\n");
  std::unique_ptr<store::postgres_engine> other = next_writer(o);
  ASSERT_TRUE(other) << "the lock was not released";
  try {
    put(*writer, table::meta, "c", "3");
    ADD_FAILURE() << "a writer without the volume's lock wrote";
  } catch (const store::store_error& e) {
    EXPECT_EQ(e.error_number(), EIO) << e.what();
    EXPECT_NE(std::string(e.what()).find("lost the volume's lock"), std::string::npos) << e.what();
  }
  EXPECT_EQ(other->get(table::meta, "c", "test"), std::nullopt);
  // Nor later: each write tries to take the lock first.
  EXPECT_THROW(put(*writer, table::meta, "d", "1"), store::store_error);
  put(*other, table::meta, "c", "4");
  EXPECT_EQ(other->get(table::meta, "c", "test"), "4");
  EXPECT_EQ(other->get(table::meta, "d", "test"), std::nullopt);
  // Once the other writer has gone, the first takes the lock and writes.
  other.reset();
  put(*writer, table::meta, "e", "1");
  EXPECT_EQ(writer->get(table::meta, "e", "test"), "1");
  try {
    store::postgres_engine::open(o);
    ADD_FAILURE() << "a second writer opened the volume after the first took its lock again";
  } catch (const store::store_error& e) {
    EXPECT_EQ(e.error_number(), EBUSY) << e.what();
  }
}

// A store on PostgreSQL end to end in-process (docs/scale-out.md): format 5,
// FORMAT naming the database, records only in the database, a reopen that
// reads them, and the refusals: a password, blob payloads, a database that
// holds another store.
// The extent lists a store on PostgreSQL caches (store::extents,
// prefetch_extents) are exact after every commit, and a follower's after
// the writer's notice.
TEST_F(metadata_engine_postgres, cached_extent_lists_follow_commits) {
  temp_dir tmp;
  const std::filesystem::path dir = tmp / "store";
  int lock = -1;
  auto s = new_store(dir, lock);
  using list = store::extent_list;
  const auto whole = [](store::store& st, std::uint64_t ino) {
    return st.extents(ino, 0, std::numeric_limits<std::uint64_t>::max());
  };
  // Files with 1, 2 and 40 extents, and files not asked for between them.
  std::map<std::uint64_t, list> expected;
  {
    store::transaction t;
    for (int i = 0; i < 60; ++i) {
      const std::uint64_t ino = s->allocate_ino();
      const std::size_t count = i == 30 ? 40 : 1 + i % 2;
      for (std::size_t k = 0; k < count; ++k) {
        const store::extent_record e = extent(static_cast<std::uint8_t>(i + k), 100);
        t.put_extent(ino, k * 100, e);
        expected[ino].emplace_back(k * 100, e);
      }
    }
    s->commit(t);
  }
  std::vector<std::uint64_t> asked;
  for (const auto& [ino, l] : expected)
    if (ino % 3 != 0) asked.push_back(ino);
  s->prefetch_extents(asked);
  for (const auto& [ino, l] : expected) {
    EXPECT_EQ(whole(*s, ino), l) << "inode " << ino;
    // A range from the cached list: the extent covering 150, and no more.
    if (l.size() > 1) {
      EXPECT_EQ(s->extents(ino, 150, 160), list(l.begin() + 1, l.begin() + 2));
    }
  }

  auto follower = store::store::open(dir, {.read_only = true, .follower = true});
  std::mutex m;
  std::condition_variable cv;
  int notices = 0;
  ASSERT_TRUE(follower->watch([&](const store::change_notice&) {
    std::lock_guard l(m);
    ++notices;
    cv.notify_all();
  }));
  const std::uint64_t ino = expected.begin()->first;
  EXPECT_EQ(whole(*follower, ino), expected[ino]);  // cached there too
  for (int i = 0; i < 200 && sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                                 "'LISTEN %' AND datname = current_database()") == "0\n";
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));

  // Replaced, added, deleted: the writer's cache follows at once, the
  // follower's once the notice is in.
  const store::extent_record replaced = extent(200, 50);
  const store::extent_record added = extent(201, 70);
  store::transaction t;
  t.put_extent(ino, 0, replaced);
  t.put_extent(ino, 1000, added);
  s->commit(t);
  const list now = {{0, replaced}, {1000, added}};
  EXPECT_EQ(whole(*s, ino), now);
  {
    std::unique_lock l(m);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return notices >= 1; }));
  }
  EXPECT_EQ(whole(*follower, ino), now);
  store::transaction t2;
  t2.delete_extent(ino, 0);
  s->commit(t2);
  EXPECT_EQ(whole(*s, ino), list({{1000, added}}));
  // A follower's open that finds the file changed before the notice drops
  // it itself.
  follower->forget_extents(ino);
  EXPECT_EQ(whole(*follower, ino), list({{1000, added}}));
  follower.reset();
  s.reset();
  ::close(lock);
}

// The directory entries a writer alone on PostgreSQL caches
// (store/cache/entry_cache.h) follow its commits, a directory it made
// answers lookups and emptiness from memory, and after it lost the
// volume's lock and took it again, what another writer committed in
// between is read, not the cached answer.
TEST_F(metadata_engine_postgres, cached_entries_follow_commits_and_a_retaken_lock) {
  temp_dir tmp;
  const std::filesystem::path dir = tmp / "store";
  int lock = -1;
  auto s = new_store(dir, lock);
  const std::uint64_t d = s->allocate_ino();
  {
    store::inode_record r;
    r.ino = d;
    r.mode = S_IFDIR | 0755;
    r.nlink = 2;
    r.parent = store::k_root_ino;
    store::transaction t;
    t.put_inode(r);
    t.made_inode(d, true);
    t.put_dirent(store::k_root_ino, "d", {d, S_IFDIR});
    s->commit(t);
  }
  EXPECT_FALSE(s->get_dirent(d, "x"));
  EXPECT_TRUE(s->dir_is_empty(d));
  {
    store::transaction t;
    t.put_dirent(d, "x", {d + 1, S_IFREG});
    s->commit(t);
  }
  ASSERT_TRUE(s->get_dirent(d, "x"));
  EXPECT_EQ(s->get_dirent(d, "x")->ino, d + 1);
  EXPECT_FALSE(s->dir_is_empty(d));
  {
    store::transaction t;
    t.delete_dirent(d, "x");
    t.put_dirent(d, "y", {d + 1, S_IFREG});
    s->commit(t);
  }
  EXPECT_FALSE(s->get_dirent(d, "x"));
  EXPECT_FALSE(s->dir_is_empty(d));
  EXPECT_FALSE(s->get_dirent(store::k_root_ino, "late"));  // cached absent now

  // The lock's session ends; another writer takes the volume, adds "late"
  // and goes.
  EXPECT_EQ(end_lock_holder(), "1\n");
  std::unique_ptr<store::postgres_engine> other = next_writer(options_);
  ASSERT_TRUE(other) << "the lock was not released";
  {
    auto b = other->new_batch();
    b->put(table::dirents, store::dirent_key(store::k_root_ino, "late"),
           store::encode_dirent({d + 2, S_IFREG}));
    other->write(*b, true);
  }
  other.reset();
  // This writer's next commit takes the lock again: what it cached goes.
  {
    store::transaction t;
    t.put_dirent(d, "z", {d + 3, S_IFREG});
    s->commit(t);
  }
  const auto late = s->get_dirent(store::k_root_ino, "late");
  ASSERT_TRUE(late) << "a cached absence outlived the lock's loss";
  EXPECT_EQ(late->ino, d + 2);
  EXPECT_EQ(s->get_dirent(d, "y")->ino, d + 1);
  s.reset();
  ::close(lock);
}

// A file with more extents than a cached list holds is read through
// windows of its extents (store::extent_window): every range gives exactly
// the extents a scan would, with holes between them, before and after
// commits that change the file inside and outside the window read last.
TEST_F(metadata_engine_postgres, windows_of_a_big_files_extents_follow_commits) {
  temp_dir tmp;
  int lock = -1;
  auto s = new_store(tmp / "store", lock);
  // 2,600 extents of 100 bytes, 150 apart (holes of 50), from offset 1000:
  // three windows and a bit.
  const std::uint64_t ino = s->allocate_ino();
  std::map<std::uint64_t, store::extent_record> file;
  {
    store::transaction t;
    for (std::uint32_t k = 0; k < 2600; ++k) {
      const std::uint64_t offset = 1000 + std::uint64_t{k} * 150;
      file[offset] = extent(k, 100);
      t.put_extent(ino, offset, file[offset]);
    }
    s->commit(t);
  }
  const auto expected = [&](std::uint64_t begin, std::uint64_t end, std::size_t limit) {
    store::extent_list out;
    for (const auto& [offset, e] : file)
      if (offset < end && offset + e.length > begin && out.size() < limit)
        out.emplace_back(offset, e);
    return out;
  };
  const auto check = [&](std::uint64_t begin, std::uint64_t end,
                         std::size_t limit = std::numeric_limits<std::size_t>::max()) {
    EXPECT_EQ(s->extents(ino, begin, end, limit), expected(begin, end, limit))
        << "[" << begin << ", " << end << ") limit " << limit;
  };
  const std::uint64_t size = 1000 + 2600 * 150;
  // Sequential reads of 64 KiB, then backwards, then ranges across windows,
  // starting in holes, before the first extent and past the last.
  for (std::uint64_t at = 0; at < size + 1000; at += 65536) check(at, at + 65536);
  for (std::uint64_t at = size; at > 65536; at -= 65536) check(at - 65536, at);
  check(0, 1);
  check(0, 1001);
  check(1120, 1130);  // a hole
  check(1099, 1101);
  check(100000, 400000);  // more than a window
  check(150000, 400000, 10);
  check(size - 10, size + 10);
  check(size + 10, size + 20);
  // To the end of the file, with and without a limit (an unlink's purge, a
  // seek for data): a window, then a scan after it.
  const std::uint64_t all = std::numeric_limits<std::uint64_t>::max();
  check(0, all);
  check(0, all, 2000);
  check(500000, all, 5);
  check(1000 + 100 * 150, all);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t begin = rng() % (size + 2000);
    check(begin, begin + 1 + rng() % 300000, 1 + rng() % 3000);
  }
  // Inside the window read last, outside it, and past the end: replaced,
  // deleted, added.
  check(200000, 210000);
  store::transaction t;
  file[201100] = extent(9001, 40);
  t.put_extent(ino, 201100, file[201100]);
  file.erase(1000);
  t.delete_extent(ino, 1000);
  file[size + 500] = extent(9002, 100);
  t.put_extent(ino, size + 500, file[size + 500]);
  s->commit(t);
  check(200000, 210000);
  check(0, 5000);
  check(size - 1000, size + 1000);
  for (std::uint64_t at = 0; at < size + 1000; at += 65536) check(at, at + 65536);
  s.reset();
  ::close(lock);
}

TEST_F(metadata_engine_postgres, a_store_keeps_its_records_in_postgresql) {
  temp_dir tmp;
  const std::filesystem::path dir = tmp / "store";
  store::store::create(dir, codec::default_policy(), store::payload_backend::pack,
                       options_.conninfo);
  std::ifstream format_file(dir / "FORMAT");
  const std::string format((std::istreambuf_iterator<char>(format_file)), {});
  EXPECT_NE(format.find("format_version=5\n"), std::string::npos) << format;
  EXPECT_NE(format.find("postgresql=" + options_.conninfo + "\n"), std::string::npos) << format;
  EXPECT_FALSE(std::filesystem::exists(dir / "CURRENT")) << "a RocksDB database was made";
  {
    const int lock = store::store::lock(dir);
    auto s = store::store::open(dir);
    EXPECT_EQ(s->metadata_engine_kind(), "postgresql");
    EXPECT_EQ(s->settings().format_version, store::k_postgres_format_version);
    store::transaction t;
    store::inode_record r;
    r.ino = s->allocate_ino();
    r.mode = S_IFREG | 0644;
    r.nlink = 1;
    t.put_inode(r);
    t.put_dirent(store::k_root_ino, "file", {r.ino, S_IFREG});
    s->commit(t, true);
    s.reset();
    ::close(lock);
  }
  EXPECT_EQ(sql("SELECT count(*) FROM densefs_dirents"), "1\n");
  {
    auto s = store::store::open(dir, {.read_only = true});
    const auto d = s->get_dirent(store::k_root_ino, "file");
    ASSERT_TRUE(d);
    EXPECT_TRUE(s->get_inode(d->ino));
  }

  const auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const store::store_error& e) {
      return e.what();
    }
    return {};
  };
  EXPECT_NE(error_of([&] {
              store::store::create(tmp / "pw", codec::default_policy(),
                                   store::payload_backend::pack,
                                   server_->conninfo(server_->create_database()) + " password=x");
            }).find("password"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              store::store::create(tmp / "blob", codec::default_policy(),
                                   store::payload_backend::blob,
                                   server_->conninfo(server_->create_database()));
            }).find("pack"),
            std::string::npos);
  // Another store's directory pointed at this database.
  const std::filesystem::path other = tmp / "other";
  store::store::create(other, codec::default_policy(), store::payload_backend::pack,
                       server_->conninfo(server_->create_database()));
  std::string other_format;
  {
    std::ifstream in(other / "FORMAT");
    other_format.assign((std::istreambuf_iterator<char>(in)), {});
  }
  const std::size_t line = other_format.find("postgresql=");
  other_format = other_format.substr(0, line) + "postgresql=" + options_.conninfo + "\n";
  {
    std::ofstream out(other / "FORMAT", std::ios::trunc);
    out << other_format;
  }
  EXPECT_NE(error_of([&] { store::store::open(other, {.read_only = true}); }).find("not this one"),
            std::string::npos);
}

}  // namespace
}  // namespace densefs::test
