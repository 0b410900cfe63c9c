// store::garbage() and store::collect_garbage(): deleted and replaced
// payloads give their space back, live payloads survive, metadata
// tombstones and the write-ahead log go.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "store/check/fsck.h"
#include "store/store.h"
#include "tests/random_bytes.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;
using test::temp_dir;

constexpr std::uint64_t k_mib = 1u << 20;

using test::random_bytes;

// What `du -sb` counts for the files of a directory.
std::uint64_t dir_bytes(const fs::path& dir) {
  std::uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

// `count` incompressible chunks of `size` bytes (stored raw, in blob files),
// each referenced once, committed one transaction each.
std::vector<chunk_hash> add_chunks(store& s, int count, std::size_t size, std::uint32_t seed) {
  std::vector<chunk_hash> out;
  for (int i = 0; i < count; ++i) {
    transaction txn;
    const prepared_chunk c = s.prepare_chunk(random_bytes(size, seed + i), true);
    txn.ref_chunk(c);
    s.commit(txn);
    out.push_back(c.hash);
  }
  return out;
}

void drop_chunks(store& s, const std::vector<chunk_hash>& hashes) {
  transaction txn;
  for (const auto& h : hashes) txn.unref_chunk(h);
  s.commit(txn);
}

class gc : public ::testing::Test {
 protected:
  void SetUp() override {
    store::create(tmp_ / "empty");
    empty_bytes_ = dir_bytes(tmp_ / "empty");
    store::create(dir_);
    lock_ = store::lock(dir_);
    s_ = store::open(dir_);
  }
  void TearDown() override {
    s_.reset();
    ::close(lock_);
  }
  temp_dir tmp_;
  fs::path dir_ = tmp_ / "store";
  std::uint64_t empty_bytes_ = 0;
  int lock_ = -1;
  std::unique_ptr<store> s_;
};

TEST_F(gc, deleted_payloads_are_counted_at_commit) {
  EXPECT_EQ(s_->garbage_since_collect(), 0u);
  const auto hashes = add_chunks(*s_, 4, 64 << 10, 1);
  EXPECT_EQ(s_->garbage_since_collect(), 0u);  // nothing deleted yet
  drop_chunks(*s_, {hashes[0], hashes[1]});
  const std::uint64_t stored = s_->get_chunk(hashes[2])->stored_size;
  EXPECT_EQ(s_->garbage_since_collect(), 2 * stored);
  // A chunk still referenced elsewhere is not garbage.
  transaction more;
  more.ref_chunk(prepared_chunk{hashes[2], 64 << 10, std::nullopt});
  s_->commit(more);
  drop_chunks(*s_, {hashes[2]});
  EXPECT_EQ(s_->garbage_since_collect(), 2 * stored);
  s_->collect_garbage();
  EXPECT_EQ(s_->garbage_since_collect(), 0u);
}

TEST_F(gc, replaced_payloads_count_as_garbage) {
  const std::string plain(256 << 10, 'a');
  codec::codec_options raw;
  raw.preferred = codec::codec_id::raw;
  transaction txn;
  const prepared_chunk c = s_->prepare_chunk(plain, raw, true);
  txn.ref_chunk(c);
  s_->commit(txn);
  const chunk_record rec = *s_->get_chunk(c.hash);
  ASSERT_EQ(rec.codec, codec::codec_id::raw);

  store::reencoding r =
      s_->reencode_chunk(c.hash, rec, codec::default_policy().for_type(codec::file_type::other));
  ASSERT_TRUE(r.smaller);
  transaction swap;
  swap.replace_payload(c.hash, rec.checksum, std::move(*r.smaller));
  s_->commit(swap);
  EXPECT_EQ(s_->garbage_since_collect(), rec.stored_size);
}

TEST_F(gc, collect_gives_back_deleted_payloads_and_keeps_live_ones) {
  const auto live = add_chunks(*s_, 8, 1 << 20, 100);   // 8 MiB kept
  const auto dead = add_chunks(*s_, 24, 1 << 20, 200);  // 24 MiB deleted
  drop_chunks(*s_, dead);

  // Looking changes nothing.
  const gc_report look = s_->garbage();
  EXPECT_EQ(look.chunks, 8u);
  EXPECT_EQ(look.live_payload_bytes, 8 * k_mib);
  EXPECT_GE(look.payload_garbage_bytes, 23 * k_mib) << to_json(look);
  EXPECT_GE(look.reclaimable_bytes, look.payload_garbage_bytes);
  EXPECT_GE(dir_bytes(dir_), 32 * k_mib);  // payloads in the WAL or blob files
  EXPECT_EQ(s_->garbage().chunks, 8u);

  const gc_result r = s_->collect_garbage();
  EXPECT_TRUE(r.rewrote_payloads);
  EXPECT_GE(r.reclaimed_bytes(), 23 * k_mib) << to_json(r);
  // The payload files hold the live payloads and little else.
  EXPECT_GE(s_->payload_file_bytes(), 8 * k_mib);
  EXPECT_LE(s_->payload_file_bytes(), 8 * k_mib + 64 * 1024) << to_json(r.after);
  EXPECT_EQ(r.after.payload_file_bytes, s_->payload_file_bytes());
  EXPECT_LE(r.after.payload_garbage_bytes, 64u * 1024);
  EXPECT_EQ(r.after.wal_bytes, 0u) << to_json(r.after);
  EXPECT_LE(dir_bytes(dir_), empty_bytes_ + 8 * k_mib + k_mib) << to_json(r.after);
  for (std::size_t i = 0; i < live.size(); ++i)
    EXPECT_EQ(*s_->read_chunk(live[i]), random_bytes(1 << 20, 100 + static_cast<std::uint32_t>(i)));

  // And after a reopen too (nothing only in memory).
  s_.reset();
  s_ = store::open(dir_);
  for (std::size_t i = 0; i < live.size(); ++i)
    EXPECT_EQ(*s_->read_chunk(live[i]), random_bytes(1 << 20, 100 + static_cast<std::uint32_t>(i)));
}

TEST_F(gc, after_deleting_everything_the_store_is_as_small_as_an_empty_one) {
  const auto hashes = add_chunks(*s_, 40, 1 << 20, 300);
  // Small payloads live in table files, not blob files.
  const auto small = add_chunks(*s_, 500, 1000, 400);
  s_.reset();  // close and reopen: the payloads reach blob and table files
  s_ = store::open(dir_);
  ASSERT_GE(s_->payload_file_bytes(), 40 * k_mib);
  drop_chunks(*s_, hashes);
  drop_chunks(*s_, small);
  s_->collect_garbage();
  EXPECT_EQ(s_->payload_file_bytes(), 0u);
  s_.reset();
  // A new MANIFEST and OPTIONS differ; everything that held data is gone.
  EXPECT_LE(dir_bytes(dir_), empty_bytes_ + k_mib)
      << dir_bytes(dir_) << " bytes vs " << empty_bytes_ << " for an empty store";
}

// What a store keeps beside its payloads stays put however often it is
// opened (issue 39: RocksDB's info logs of every mount, `densefs stats` and
// `densefs gc` were kept in the store, ~100 KB each).
TEST_F(gc, opening_a_store_again_and_again_keeps_no_info_logs) {
  add_chunks(*s_, 1, 64 << 10, 800);
  for (int i = 0; i < 5; ++i) {
    s_.reset();
    s_ = store::open(dir_);
  }
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    EXPECT_FALSE(name == "LOG" || name.starts_with("LOG.old.")) << name;
  }
  const gc_report r = s_->garbage();
  EXPECT_EQ(r.info_log_bytes + r.old_info_log_bytes, 0u) << to_json(r);
  // MANIFEST, OPTIONS (two, ~32 KB each), CURRENT, IDENTITY, FORMAT, the lock.
  EXPECT_LE(r.other_file_bytes, 96u << 10) << to_json(r);
}

// A store written by an earlier densefs holds RocksDB's info logs; gc
// counts them as reclaimable and removes them.
TEST_F(gc, info_logs_of_an_earlier_version_are_removed) {
  const std::string text(100 << 10, 'x');
  for (const char* name : {"LOG", "LOG.old.1796354240671195"}) {
    std::FILE* f = std::fopen((dir_ / name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  const gc_report before = s_->garbage();
  EXPECT_EQ(before.info_log_bytes, text.size());
  EXPECT_EQ(before.old_info_log_bytes, text.size());
  EXPECT_GE(before.reclaimable_bytes, 2 * text.size());
  const gc_result r = s_->collect_garbage();
  EXPECT_FALSE(fs::exists(dir_ / "LOG"));
  EXPECT_FALSE(fs::exists(dir_ / "LOG.old.1796354240671195"));
  EXPECT_EQ(r.after.info_log_bytes + r.after.old_info_log_bytes, 0u) << to_json(r.after);
}

TEST_F(gc, a_read_only_store_reports_but_does_not_collect) {
  const auto hashes = add_chunks(*s_, 2, 64 << 10, 500);
  s_.reset();  // to blob files (a flush drops a payload deleted in the same memtable)
  s_ = store::open(dir_);
  drop_chunks(*s_, hashes);
  s_.reset();
  store_open_options ro;
  ro.read_only = true;
  auto s = store::open(dir_, ro);
  EXPECT_GE(s->garbage().payload_garbage_bytes, 128u << 10);
  try {
    s->collect_garbage();
    ADD_FAILURE() << "collect_garbage on a read-only store did not throw";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EROFS);
  }
}

TEST_F(gc, a_canceled_collection_stops_and_loses_nothing) {
  const auto live = add_chunks(*s_, 4, 256 << 10, 600);
  drop_chunks(*s_, add_chunks(*s_, 4, 256 << 10, 700));
  s_->cancel_garbage_collection();
  try {
    s_->collect_garbage();
    ADD_FAILURE() << "a canceled collection ran";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), ECANCELED);
  }
  for (const auto& h : live) EXPECT_NO_THROW(s_->read_chunk(h));
}

// Payloads written ahead of their commit (store::write_payloads_ahead, the
// group commit's pack writes without meta_mutex_), on a pack store.
class payloads_written_ahead : public ::testing::Test {
 protected:
  void SetUp() override {
    store::create(dir_, codec::default_policy(), payload_backend::pack);
    lock_ = store::lock(dir_);
    s_ = store::open(dir_);
  }
  void TearDown() override {
    s_.reset();
    ::close(lock_);
  }
  // (Chunks referenced by no file: fsck would count their references
  // wrong, so it checks only a store where none stays.)
  payloads_ahead write_ahead(const prepared_chunk& c) {
    const prepared_chunk* chunks[] = {&c};
    return s_->write_payloads_ahead(chunks);
  }
  temp_dir tmp_;
  fs::path dir_ = tmp_ / "store";
  int lock_ = -1;
  std::unique_ptr<store> s_;
};

TEST_F(payloads_written_ahead, are_what_the_commit_names_and_only_new_chunks_are_written) {
  const std::string bytes = random_bytes(1 << 20, 800);
  const prepared_chunk c = s_->prepare_chunk(bytes, true);
  payloads_ahead ahead = write_ahead(c);
  EXPECT_FALSE(ahead.empty());
  transaction txn;
  txn.ref_chunk(c);
  s_->commit(txn, false, {}, &ahead);
  EXPECT_EQ(*s_->read_chunk(c.hash), bytes);
  // Stored now: nothing to write ahead for it again.
  EXPECT_TRUE(write_ahead(c).empty());
}

TEST_F(payloads_written_ahead, a_commit_writes_what_they_lack) {
  const std::string bytes_a = random_bytes(1 << 20, 810), bytes_b = random_bytes(1 << 20, 811);
  const prepared_chunk a = s_->prepare_chunk(bytes_a, true);
  const prepared_chunk b = s_->prepare_chunk(bytes_b, true);
  payloads_ahead ahead = write_ahead(a);
  transaction txn;
  txn.ref_chunk(a);
  txn.ref_chunk(b);  // not written ahead
  s_->commit(txn, false, {}, &ahead);
  EXPECT_EQ(*s_->read_chunk(a.hash), bytes_a);
  EXPECT_EQ(*s_->read_chunk(b.hash), bytes_b);
}

TEST_F(payloads_written_ahead, never_committed_are_dead_bytes_that_gc_gives_back) {
  const prepared_chunk c = s_->prepare_chunk(random_bytes(1 << 20, 820), true);
  write_ahead(c);  // dropped: its commit never comes
  EXPECT_FALSE(s_->get_chunk(c.hash));
  EXPECT_TRUE(fsck(*s_).clean());
  const gc_result r = s_->collect_garbage();
  EXPECT_LE(r.after.payload_file_bytes + (1u << 20), r.before.payload_file_bytes) << to_json(r);
  EXPECT_TRUE(fsck(*s_).clean());
}

TEST_F(payloads_written_ahead, hold_pack_compaction_off_until_their_commit) {
  // The payload's pack holds no record an index entry names yet: to a
  // compaction planned now it is all dead, to be deleted. It must wait.
  const std::string bytes = random_bytes(1 << 20, 830);
  const prepared_chunk c = s_->prepare_chunk(bytes, true);
  payloads_ahead ahead = write_ahead(c);
  std::atomic<bool> collected{false};
  std::thread gc([&] {
    s_->collect_garbage();
    collected = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(collected) << "pack compaction ran beside a payload written ahead of its commit";
  transaction txn;
  txn.ref_chunk(c);
  s_->commit(txn, false, {}, &ahead);
  ahead = payloads_ahead();  // its hold ends with it
  gc.join();
  EXPECT_TRUE(collected);
  EXPECT_EQ(*s_->read_chunk(c.hash), bytes);
}

}  // namespace
}  // namespace densefs::store
