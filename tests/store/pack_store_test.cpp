// Pack stores (store/payload/pack_store.h): round trips, rolling, the index rebuilt
// from the packs alone, compaction, damaged and truncated packs, untrusted
// lengths, and the backend recorded at mkfs.
#include "store/payload/pack_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <shared_mutex>

#include "store/check/fsck.h"
#include "store/error.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/object/directory_object_store.h"
#include "store/store.h"
#include "tests/random_bytes.h"
#include "tests/store/error_of.h"
#include "tests/store/raw_db.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;
using test::temp_dir;

using test::random_bytes;

codec::codec_options raw_codec() {
  codec::codec_options o;
  o.preferred = codec::codec_id::raw;
  return o;
}

// Chunks of `size` incompressible bytes (stored raw), one commit each.
std::vector<chunk_hash> add_chunks(store& s, int count, std::size_t size, std::uint32_t seed) {
  std::vector<chunk_hash> out;
  for (int i = 0; i < count; ++i) {
    transaction txn;
    const prepared_chunk c = s.prepare_chunk(
        random_bytes(size, seed + static_cast<std::uint32_t>(i)), raw_codec(), true);
    txn.ref_chunk(c);
    s.commit(txn);
    out.push_back(c.hash);
  }
  return out;
}

// A file in the root naming each chunk (of `chunk_size` plain bytes) once,
// one per 4 MiB slot, so fsck finds no leaked chunk.
void add_file(store& s, std::string_view name, const std::vector<chunk_hash>& hashes,
              std::uint32_t chunk_size) {
  transaction txn;
  inode_record r;
  r.ino = s.allocate_ino();
  r.mode = S_IFREG | 0644;
  r.nlink = 1;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    txn.put_extent(r.ino, i * k_chunk_size, {hashes[i], 0, chunk_size});
    r.size = i * k_chunk_size + chunk_size;
    r.stored_bytes += s.get_chunk(hashes[i])->stored_size;
  }
  txn.put_inode(r);
  txn.put_dirent(k_root_ino, name, {r.ino, S_IFREG});
  s.commit(txn);
}

void drop_chunks(store& s, const std::vector<chunk_hash>& hashes) {
  transaction txn;
  for (const auto& h : hashes) txn.unref_chunk(h);
  s.commit(txn);
}

using test::error_of;

// The payloads column family, key -> value.
std::map<std::string, std::string> payload_index(const store& s) {
  std::map<std::string, std::string> out;
  s.scan_records(k_cf_payloads, {}, [&](std::string_view k, std::string_view v) {
    out.emplace(k, v);
    return true;
  });
  return out;
}

std::vector<fs::path> pack_files(const fs::path& store_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(store_dir / "packs", ec))
    if (e.path().extension() == ".pack") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

class pack_store_test : public ::testing::Test {
 protected:
  void SetUp() override {
    store::create(dir_, codec::parse_policy("zstd:level=3"), payload_backend::pack);
    open();
  }
  void TearDown() override { close(); }
  void open() {
    lock_ = store::lock(dir_);
    store_open_options o;
    o.io = io_mode::pread;
    s_ = store::open(dir_, o);
  }
  void close() {
    s_.reset();
    if (lock_ >= 0) ::close(lock_);
    lock_ = -1;
  }
  void reopen() {
    close();
    open();
  }
  temp_dir tmp_;
  fs::path dir_ = tmp_ / "store";
  int lock_ = -1;
  std::unique_ptr<store> s_;
};

TEST_F(pack_store_test, mkfs_records_the_backend_and_a_reopen_keeps_it) {
  EXPECT_EQ(s_->payloads_backend(), payload_backend::pack);
  ASSERT_NE(s_->packs(), nullptr);
  reopen();
  EXPECT_EQ(s_->settings().payloads, payload_backend::pack);
  EXPECT_NE(to_json(s_->stats()).find("\"payload_backend\":\"pack\""), std::string::npos);

  store::create(tmp_ / "blob", {}, payload_backend::blob);
  const int l = store::lock(tmp_ / "blob");
  {
    auto b = store::open(tmp_ / "blob");
    EXPECT_EQ(b->payloads_backend(), payload_backend::blob);
    EXPECT_EQ(b->packs(), nullptr);
    EXPECT_EQ(b->garbage().payload_backend, "blob");
  }
  ::close(l);
}

TEST_F(pack_store_test, payloads_round_trip_inline_and_in_packs_across_a_reopen) {
  // Below the threshold inline, at and above it in a pack.
  const std::vector<std::size_t> sizes = {
      1, 100, k_min_pack_payload - 1, k_min_pack_payload, 100 << 10, 4 << 20};
  std::vector<chunk_hash> hashes;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    hashes.push_back(add_chunks(*s_, 1, sizes[i], 10 + static_cast<std::uint32_t>(i))[0]);
  const auto check = [&] {
    for (std::size_t i = 0; i < sizes.size(); ++i)
      EXPECT_EQ(*s_->read_chunk(hashes[i]),
                random_bytes(sizes[i], 10 + static_cast<std::uint32_t>(i)))
          << sizes[i];
  };
  check();
  // Stored raw, so the stored size is the plain size: three records.
  const gc_report g = s_->garbage();
  EXPECT_EQ(g.pack_files, 1u);
  EXPECT_EQ(g.live_blob_payload_bytes,
            (k_min_pack_payload + (100 << 10) + (4 << 20)) + 3 * k_pack_record_header_size);
  EXPECT_EQ(g.payload_garbage_bytes, 0u) << to_json(g);

  // get_many in any order, repeats included.
  std::vector<chunk_hash> order = {hashes[5], hashes[0], hashes[4], hashes[5], hashes[3]};
  const std::vector<std::string> got = s_->packs()->get_many(order);
  ASSERT_EQ(got.size(), order.size());
  EXPECT_EQ(got[0], random_bytes(4 << 20, 15));
  EXPECT_EQ(got[1], random_bytes(1, 10));
  EXPECT_EQ(got[2], random_bytes(100 << 10, 14));
  EXPECT_EQ(got[3], got[0]);
  EXPECT_EQ(got[4], random_bytes(k_min_pack_payload, 13));

  reopen();
  check();
  // A reopen appends to a new pack, never after a possibly torn tail.
  add_chunks(*s_, 1, 8192, 99);
  EXPECT_EQ(pack_files(dir_).size(), 2u);
}

TEST(pack_store, records_roll_over_to_new_packs_at_the_size_cap) {
  temp_dir tmp;
  store::create(tmp / "s", {}, payload_backend::pack);
  const std::unique_ptr<rocksdb_engine> engine = rocksdb_engine::open(tmp / "s", {});
  pack_store::options o;
  o.pack_size_cap = 64 << 10;
  o.io = io_mode::pread;
  pack_store packs(*engine, tmp / "s", o);

  std::vector<chunk_hash> hashes;
  std::vector<std::string> values;
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  for (int i = 0; i < 50; ++i) {
    values.push_back(
        random_bytes(5000 + static_cast<std::size_t>(i), static_cast<std::uint32_t>(i)));
    hashes.push_back(sha256_of(values.back()));
    packs.put(*batch, hashes.back(), values.back(), {codec::codec_id::raw, 0});
  }
  // Written already, but not visible until the batch commits.
  EXPECT_EQ(error_of([&] { packs.get(hashes[0]); }), EIO);
  packs.sync();
  engine->write(*batch, false);

  // 50 records of ~5 KiB in packs of at most 64 KiB plus one record.
  EXPECT_GE(pack_files(tmp / "s").size(), 4u);
  const std::vector<std::string> got = packs.get_many(hashes);
  for (std::size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(got[i], values[i]) << i;
  std::uint64_t live = 0;
  for (const auto& u : packs.usage()) {
    EXPECT_LE(u.file_bytes, (64u << 10) + 5100 + k_pack_record_header_size);
    EXPECT_EQ(u.dead_bytes(), 0u);
    live += u.live_records;
  }
  EXPECT_EQ(live, 50u);
  EXPECT_TRUE(packs.get_many({}).empty());
}

TEST_F(pack_store_test, the_index_rebuilt_from_the_packs_alone_is_the_same_index) {
  add_chunks(*s_, 30, 20 << 10, 1000);
  add_chunks(*s_, 5, 100, 2000);  // inline: not in any pack
  // A replaced payload leaves an older record of the same chunk behind; the
  // rebuild must pick the one the chunk record names.
  transaction txn;
  const prepared_chunk c =
      s_->prepare_chunk(random_bytes(32 << 10, 1) + std::string(32 << 10, '\0'), raw_codec(), true);
  txn.ref_chunk(c);
  s_->commit(txn);
  const chunk_record rec = *s_->get_chunk(c.hash);
  auto better = s_->reencode_chunk(
      c.hash, rec, codec::parse_policy("zstd:level=1").for_type(codec::file_type::other));
  ASSERT_TRUE(better.smaller);
  transaction swap;
  swap.replace_payload(c.hash, rec.checksum, std::move(*better.smaller));
  s_->commit(swap);
  // And a crash's leftovers: a record written but never committed.
  {
    // A batch nobody writes.
    struct unwritten_batch final : metadata_batch {
      void put(table, std::string_view, std::string_view) override {}
      void erase(table, std::string_view) override {}
      bool empty() const override { return true; }
    } never;
    s_->packs()->put(never, sha256_of("x"), std::string(8192, 'y'), {});
  }
  const std::map<std::string, std::string> before = payload_index(*s_);
  ASSERT_EQ(before.size(), 36u);
  close();

  // Every pack entry dropped: only the packs know where the payloads are.
  std::size_t dropped = 0;
  {
    test::raw_db raw(dir_);
    for (const auto& [k, v] : before) {
      if (decode_payload_value(chunk_hash::from_bytes(k), v).inline_bytes) continue;
      ASSERT_TRUE(raw.db()->Delete(rocksdb::WriteOptions(), raw.cf(k_cf_payloads), k).ok());
      ++dropped;
    }
  }
  EXPECT_EQ(dropped, 31u);
  open();
  fsck_options fo;
  const fsck_report broken = fsck(*s_, fo);
  EXPECT_EQ(broken[fsck_problem::bad_payload].found, 31u);
  fo.rebuild_index = true;
  const fsck_report rebuilt = fsck(*s_, fo);
  EXPECT_EQ(rebuilt.pack_index_rebuilt, 31u);
  // (The chunks have no files: fsck also calls them leaked.)
  EXPECT_EQ(rebuilt[fsck_problem::bad_payload].found, 0u) << to_text(rebuilt);
  EXPECT_EQ(payload_index(*s_), before);
  EXPECT_EQ(s_->rebuild_pack_index(), 0u);  // nothing left to change
}

TEST_F(pack_store_test, compaction_keeps_every_live_chunk_and_frees_the_dead_space) {
  const auto live = add_chunks(*s_, 10, 256 << 10, 3000);
  const auto dead = add_chunks(*s_, 30, 256 << 10, 4000);
  reopen();  // the first pack is closed; new records go to a second one
  const auto later = add_chunks(*s_, 2, 256 << 10, 5000);
  drop_chunks(*s_, dead);
  const gc_report before = s_->garbage();
  EXPECT_EQ(before.pack_files, 2u);
  EXPECT_EQ(before.payload_garbage_bytes, 30 * ((256u << 10) + k_pack_record_header_size))
      << to_json(before);

  const gc_result r = s_->collect_garbage();
  EXPECT_EQ(r.after.packs_deleted, 1u) << to_json(r);
  EXPECT_EQ(r.after.payload_garbage_bytes, 0u) << to_json(r.after);
  EXPECT_GE(r.reclaimed_bytes(), 30u * (256 << 10)) << to_json(r);
  EXPECT_EQ(r.after.live_blob_payload_bytes, before.live_blob_payload_bytes);
  for (std::size_t i = 0; i < live.size(); ++i)
    EXPECT_EQ(*s_->read_chunk(live[i]),
              random_bytes(256 << 10, 3000 + static_cast<std::uint32_t>(i)));
  // The second pack had no garbage: left alone.
  EXPECT_TRUE(fs::exists(dir_ / "packs" / pack_file_name(2)));
  EXPECT_FALSE(fs::exists(dir_ / "packs" / pack_file_name(1)));

  reopen();
  for (std::size_t i = 0; i < live.size(); ++i)
    EXPECT_EQ(*s_->read_chunk(live[i]),
              random_bytes(256 << 10, 3000 + static_cast<std::uint32_t>(i)));
  for (std::size_t i = 0; i < later.size(); ++i)
    EXPECT_EQ(*s_->read_chunk(later[i]),
              random_bytes(256 << 10, 5000 + static_cast<std::uint32_t>(i)));
  EXPECT_EQ(fsck(*s_)[fsck_problem::bad_payload].found, 0u);

  // Everything deleted: no pack file is left.
  drop_chunks(*s_, live);
  drop_chunks(*s_, later);
  s_->collect_garbage();
  EXPECT_EQ(s_->payload_file_bytes(), 0u);
  EXPECT_TRUE(pack_files(dir_).empty());
}

// The daemon's own collection rewrites a pack from 20% dead bytes; `densefs
// gc` asks for more: packs with less, most dead first, until at most 5% of
// the pack bytes stay dead (store.h, gc_depth). After `densefs recompress`
// the replaced payloads are a thin share of every pack.
TEST_F(pack_store_test, a_requested_collection_also_rewrites_packs_below_a_fifth_dead) {
  const auto live = add_chunks(*s_, 18, 256 << 10, 6000);
  drop_chunks(*s_, add_chunks(*s_, 2, 256 << 10, 6100));  // 10% of the one pack

  const gc_result automatic = s_->collect_garbage({}, store::gc_depth::automatic);
  EXPECT_EQ(automatic.after.packs_deleted, 0u) << to_json(automatic);
  EXPECT_GE(automatic.after.payload_garbage_bytes, 2u * (256 << 10)) << to_json(automatic.after);

  const gc_result requested = s_->collect_garbage();
  EXPECT_EQ(requested.after.packs_deleted, 1u) << to_json(requested);
  EXPECT_EQ(requested.after.payload_garbage_bytes, 0u) << to_json(requested.after);
  for (std::size_t i = 0; i < live.size(); ++i)
    EXPECT_EQ(*s_->read_chunk(live[i]),
              random_bytes(256 << 10, 6000 + static_cast<std::uint32_t>(i)));
}

TEST_F(pack_store_test, a_requested_collection_keeps_the_least_dead_packs_within_a_twentieth) {
  // Pack 1: 1 of 25 records dead (4%); pack 2: 5 of 25 (20%), rewritten by
  // any collection; pack 3: 3 of 25 (12%); pack 4: 1 of 25 (4%). Keeping
  // pack 3 would leave 5 of the 95 records left dead (5.3%), over the 5%:
  // it goes too. Packs 1 and 4 stay: 2 of 92 (2.2%).
  std::vector<chunk_hash> dead;
  const auto pack = [&](int dead_records, std::uint32_t seed) {
    const auto hashes = add_chunks(*s_, 25, 256 << 10, seed);
    dead.insert(dead.end(), hashes.begin(), hashes.begin() + dead_records);
    reopen();  // closes the pack
  };
  pack(1, 7000);
  pack(5, 7100);
  pack(3, 7200);
  pack(1, 7300);
  drop_chunks(*s_, dead);
  ASSERT_EQ(pack_files(dir_).size(), 4u);

  const gc_result r = s_->collect_garbage();
  EXPECT_EQ(r.after.packs_deleted, 2u) << to_json(r);
  EXPECT_TRUE(fs::exists(dir_ / "packs" / pack_file_name(1)));
  EXPECT_FALSE(fs::exists(dir_ / "packs" / pack_file_name(2)));
  EXPECT_FALSE(fs::exists(dir_ / "packs" / pack_file_name(3)));
  EXPECT_TRUE(fs::exists(dir_ / "packs" / pack_file_name(4)));
  EXPECT_EQ(r.after.payload_garbage_bytes, 2 * ((256u << 10) + k_pack_record_header_size))
      << to_json(r.after);
  EXPECT_EQ(fsck(*s_)[fsck_problem::bad_payload].found, 0u);
}

// Flips one byte of a pack file at `offset` from the end of the first
// record's header (negative: inside the header).
void flip_byte(const fs::path& pack, std::int64_t offset) {
  std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
  const auto at =
      static_cast<std::streamoff>(k_pack_header_size + k_pack_record_header_size) + offset;
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(at);
  f.write(&c, 1);
}

TEST_F(pack_store_test, a_flipped_byte_gives_eio_naming_the_chunk_never_wrong_bytes) {
  const auto hashes = add_chunks(*s_, 2, 64 << 10, 6000);
  close();
  const fs::path pack = pack_files(dir_).at(0);
  flip_byte(pack, 1000);  // payload of the first record
  open();
  std::string message;
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[0]); }, &message), EIO);
  EXPECT_NE(message.find(hashes[0].hex()), std::string::npos) << message;
  EXPECT_EQ(*s_->read_chunk(hashes[1]), random_bytes(64 << 10, 6001));
  fsck_report r = fsck(*s_);
  EXPECT_EQ(r[fsck_problem::bad_payload].found, 1u);
  ASSERT_EQ(r[fsck_problem::bad_payload].examples.size(), 1u);
  EXPECT_NE(r[fsck_problem::bad_payload].examples[0].find(hashes[0].hex()), std::string::npos);
  close();

  flip_byte(pack, 1000);  // back
  flip_byte(pack, -20);   // the first record's header (its stored size)
  open();
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[0]); }, &message), EIO);
  EXPECT_NE(message.find("header checksum"), std::string::npos) << message;
  EXPECT_NE(message.find(pack.filename().string()), std::string::npos) << message;
  EXPECT_EQ(fsck(*s_)[fsck_problem::bad_payload].found, 1u);
}

TEST_F(pack_store_test, a_truncated_pack_gives_eio_and_fsck_names_the_chunk) {
  const auto hashes = add_chunks(*s_, 3, 64 << 10, 7000);
  close();
  const fs::path pack = pack_files(dir_).at(0);
  fs::resize_file(pack, fs::file_size(pack) - 100);
  open();
  std::string message;
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[2]); }, &message), EIO);
  EXPECT_NE(message.find("end of the pack"), std::string::npos) << message;
  EXPECT_EQ(*s_->read_chunk(hashes[0]), random_bytes(64 << 10, 7000));
  const fsck_report r = fsck(*s_);
  EXPECT_EQ(r[fsck_problem::bad_payload].found, 1u) << to_text(r);
  // A lost pack file: every chunk in it is reported, none read.
  close();
  fs::remove(pack);
  open();
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[1]); }, &message), EIO);
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

TEST_F(pack_store_test, repair_rebuilds_a_damaged_index_entry_from_the_packs) {
  const auto hashes = add_chunks(*s_, 3, 64 << 10, 8000);
  add_file(*s_, "f", hashes, 64 << 10);
  close();
  {
    test::raw_db raw(dir_);
    const std::string key(hashes[1].view());
    // Points past the end of the pack.
    raw.put(k_cf_payloads, key, encode_pack_ref({1, 1u << 30, 1000}));
  }
  open();
  std::string message;
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[1]); }, &message), EIO);
  fsck_options fo;
  fo.repair = true;
  const fsck_report r = fsck(*s_, fo);
  EXPECT_EQ(r[fsck_problem::bad_payload].found, 1u);
  EXPECT_EQ(r[fsck_problem::bad_payload].repaired, 1u);
  EXPECT_TRUE(r.clean()) << to_text(r);
  EXPECT_EQ(*s_->read_chunk(hashes[1]), random_bytes(64 << 10, 8001));
}

TEST_F(pack_store_test, untrusted_lengths_never_allocate_unbounded_memory) {
  const auto hashes = add_chunks(*s_, 1, 64 << 10, 9000);
  close();
  {
    test::raw_db raw(dir_);
    // A 4 GiB record length in the index is refused before any read.
    raw.put(k_cf_payloads, std::string(hashes[0].view()), encode_pack_ref({1, 32, 0xffffffffu}));
  }
  open();
  std::string message;
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[0]); }, &message), EIO);
  EXPECT_NE(message.find("impossible"), std::string::npos) << message;
  close();

  // A record header claiming a huge payload, with a valid header checksum:
  // the scan skips it (nothing is allocated: the pack is mapped).
  const fs::path pack = pack_files(dir_).at(0);
  {
    std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
    char h[k_pack_record_header_size];
    f.seekg(static_cast<std::streamoff>(k_pack_header_size));
    f.read(h, sizeof(h));
    const std::uint32_t huge = 0xfffffff0u;
    std::memcpy(h + 44, &huge, 4);
    const std::uint64_t sum = stored_checksum(std::string_view(h, 56));
    std::memcpy(h + 56, &sum, 8);
    f.seekp(static_cast<std::streamoff>(k_pack_header_size));
    f.write(h, sizeof(h));
  }
  open();
  std::vector<std::string> bad;
  std::size_t records = 0;
  s_->packs()->scan_packs([&](const pack_record_info&) { ++records; },
                          [&](const std::string& why) { bad.push_back(why); });
  EXPECT_EQ(records, 0u);
  ASSERT_FALSE(bad.empty());
  EXPECT_NE(bad[0].find("too large"), std::string::npos) << bad[0];
  // And the index cannot be pointed at it: no record matches.
  EXPECT_EQ(s_->rebuild_pack_index(), 0u);
  EXPECT_EQ(error_of([&] { s_->read_chunk(hashes[0]); }), EIO);
}

// The engine of a new volume whose payloads go to packs.
std::unique_ptr<rocksdb_engine> new_pack_volume(const fs::path& dir) {
  store::create(dir, {}, payload_backend::pack);
  return rocksdb_engine::open(dir, {});
}

// Options of a pack store whose packs are objects of `objects`.
pack_store::options in_objects(std::shared_ptr<object_store> objects, const fs::path& cache_dir) {
  pack_store::options o;
  o.io = io_mode::pread;
  o.remote = std::move(objects);
  o.cache_dir = cache_dir;
  return o;
}

// A scale-out volume's packs (pack_store::options::remote) over the
// directory object store: the same path as over S3, without a server.
TEST(pack_store, packs_in_an_object_store_are_sealed_at_sync_and_read_by_another_client) {
  temp_dir tmp;
  const std::unique_ptr<rocksdb_engine> engine = new_pack_volume(tmp / "s");
  const auto objects = std::make_shared<directory_object_store>(tmp / "bucket");
  pack_store::options o = in_objects(objects, tmp / "cache-a");
  o.gather_bytes = 0;  // every sync uploads (gathering: the test after the next)
  pack_store writer(*engine, tmp / "s", o);

  // Payloads of 8 KiB and more: under 4 KiB they are inline in the index.
  std::vector<chunk_hash> hashes;
  std::vector<std::string> values;
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  for (int i = 0; i < 20; ++i) {
    values.push_back(random_bytes(8000 + static_cast<std::size_t>(i) * 100,
                                  static_cast<std::uint32_t>(i) + 500));
    hashes.push_back(sha256_of(values.back()));
    writer.put(*batch, hashes.back(), values.back(), {codec::codec_id::raw, 0});
  }
  // Nothing is an object before the sync that seals the pack.
  EXPECT_TRUE(objects->list("packs/").empty());
  writer.sync();
  engine->write(*batch, false);
  const std::vector<object_store::object_info> sealed = objects->list("packs/");
  ASSERT_EQ(sealed.size(), 1u);
  EXPECT_EQ(sealed[0].name, "packs/" + pack_file_name(1));  // the volume's counter starts at 1
  for (std::size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(writer.get(hashes[i]), values[i]);
  // The next record starts a new pack: an object is written once.
  const std::unique_ptr<metadata_batch> more = engine->new_batch();
  const std::string late = random_bytes(9000, 999);  // over 4 KiB: not inline
  writer.put(*more, sha256_of(late), late, {codec::codec_id::raw, 0});
  writer.sync();
  engine->write(*more, false);
  EXPECT_EQ(objects->list("packs/").size(), 2u);
  EXPECT_EQ(objects->size(sealed[0].name), sealed[0].size);

  // Another client with an empty cache reads every payload from the objects.
  pack_store::options r = o;
  r.read_only = true;
  r.cache_dir = tmp / "cache-b";
  pack_store reader(*engine, tmp / "s", r);
  const std::vector<std::string> got = reader.get_many(hashes);
  ASSERT_EQ(got.size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], values[i]) << i;
  EXPECT_EQ(reader.get(sha256_of(late)), late);

  // An object that went missing is EIO naming the chunk, not other bytes.
  objects->remove(sealed[0].name);
  pack_store::options gone = r;
  gone.cache_dir = tmp / "cache-c";
  pack_store cold(*engine, tmp / "s", gone);
  std::string message;
  EXPECT_EQ(error_of([&] { cold.get(hashes[3]); }, &message), EIO);
  EXPECT_NE(message.find(hashes[3].hex()), std::string::npos) << message;
}

// A directory object store whose puts fail while `failing` is set: the
// service going away between an append and the sync that uploads it.
class flaky_object_store final : public object_store {
 public:
  explicit flaky_object_store(fs::path root) : real_(std::move(root)) {}
  std::atomic<bool> failing{false};
  const std::string& where() const override { return real_.where(); }
  void put(std::string_view name, std::string_view bytes) override {
    if (failing) throw store_error(EIO, "PUT " + std::string(name) + ": the service went away");
    real_.put(name, bytes);
  }
  std::string get_range(std::string_view name, std::uint64_t offset,
                        std::uint32_t length) override {
    return real_.get_range(name, offset, length);
  }
  std::optional<std::uint64_t> size(std::string_view name) override { return real_.size(name); }
  void remove(std::string_view name) override { real_.remove(name); }
  std::vector<object_info> list(std::string_view prefix) override { return real_.list(prefix); }

 private:
  directory_object_store real_;
};

TEST(object_pack_home, a_failed_upload_fails_the_sync_and_the_next_sync_uploads_the_pack) {
  temp_dir tmp;
  const std::unique_ptr<rocksdb_engine> engine = new_pack_volume(tmp / "s");
  const auto objects = std::make_shared<flaky_object_store>(tmp / "bucket");
  pack_store::options o = in_objects(objects, tmp / "cache");
  o.gather_bytes = 0;
  pack_store packs(*engine, tmp / "s", o);

  const std::string value = random_bytes(9000, 7);
  const chunk_hash hash = sha256_of(value);
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  packs.put(*batch, hash, value, {codec::codec_id::raw, 0});
  objects->failing = true;
  std::string message;
  EXPECT_EQ(error_of([&] { packs.sync(); }, &message), EIO);
  EXPECT_NE(message.find("uploading pack " + pack_file_name(1)), std::string::npos) << message;
  EXPECT_TRUE(objects->list("packs/").empty());
  // The pack is sealed all the same: the next record starts pack 2.
  const std::string later = random_bytes(9500, 8);
  packs.put(*batch, sha256_of(later), later, {codec::codec_id::raw, 0});

  // The service is back: the next sync uploads both, the one the first
  // sync could not first, and only then is the batch naming them committed.
  objects->failing = false;
  packs.sync();
  engine->write(*batch, false);
  const std::vector<object_store::object_info> uploaded = objects->list("packs/");
  ASSERT_EQ(uploaded.size(), 2u);
  EXPECT_EQ(uploaded[0].name, pack_object_name(1));
  EXPECT_EQ(uploaded[1].name, pack_object_name(2));
  EXPECT_EQ(packs.get(hash), value);
  EXPECT_EQ(packs.get(sha256_of(later)), later);

  // Another client, with an empty cache, reads it from the object.
  pack_store::options r = o;
  r.read_only = true;
  r.cache_dir = tmp / "cache-b";
  pack_store reader(*engine, tmp / "s", r);
  EXPECT_EQ(reader.get(hash), value);
  EXPECT_EQ(reader.get(sha256_of(later)), later);
}

// The value of `hash`'s payload index entry: "inline", "pack N", or "none".
std::string entry_kind(const metadata_engine& engine, const chunk_hash& hash) {
  const std::optional<std::string> v = engine.get(table::payloads, hash.view(), "a test entry");
  if (!v) return "none";
  const payload_value p = decode_payload_value(hash, *v);
  return p.inline_bytes ? "inline" : "pack " + std::to_string(p.ref.pack);
}

// Small commits on a scale-out volume: their records are gathered in one
// pack across syncs, with the bytes in the index entries meanwhile; the pack
// is uploaded once it holds gather_bytes, and then the entries move to it.
TEST(pack_store, small_commits_gather_into_one_object_and_their_entries_move_to_it) {
  temp_dir tmp;
  const std::unique_ptr<rocksdb_engine> engine = new_pack_volume(tmp / "s");
  const auto objects = std::make_shared<directory_object_store>(tmp / "bucket");
  pack_store::options o = in_objects(objects, tmp / "cache-a");
  o.gather_bytes = 256u << 10;
  pack_store writer(*engine, tmp / "s", o);

  std::vector<chunk_hash> hashes;
  std::vector<std::string> values;
  // One commit of five 9,000-byte payloads, its sync, its write.
  const auto commit_five = [&] {
    const std::unique_ptr<metadata_batch> batch = engine->new_batch();
    for (int i = 0; i < 5; ++i) {
      values.push_back(random_bytes(9000, static_cast<std::uint32_t>(values.size()) + 100));
      hashes.push_back(sha256_of(values.back()));
      writer.put(*batch, hashes.back(), values.back(), {codec::codec_id::raw, 0});
    }
    writer.sync();
    engine->write(*batch, false);
  };
  // 5 commits: 225 KB, under 256 KiB: no object, every entry inline, read.
  for (int c = 0; c < 5; ++c) commit_five();
  EXPECT_TRUE(objects->list("packs/").empty());
  EXPECT_FALSE(writer.has_moves_ready());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    EXPECT_EQ(entry_kind(*engine, hashes[i]), "inline") << i;
    EXPECT_EQ(writer.get(hashes[i]), values[i]) << i;
  }
  // The 6th passes 256 KiB: its sync uploads the one pack, with all 30.
  commit_five();
  ASSERT_EQ(objects->list("packs/").size(), 1u);
  const std::string pack = "pack " + std::to_string(1);
  // 28 records of 9,064 bytes fill it: the 29th, past 256 KiB, names it,
  // and so does the one after it.
  EXPECT_EQ(entry_kind(*engine, hashes[27]), "inline");
  EXPECT_EQ(entry_kind(*engine, hashes[28]), pack);
  EXPECT_EQ(entry_kind(*engine, hashes[29]), pack);
  ASSERT_TRUE(writer.has_moves_ready());

  // Before the moves: compaction leaves the pack, all but dead by the index.
  std::shared_mutex gate;
  std::mutex commit_mutex;
  const std::atomic<bool> cancel{false};
  EXPECT_EQ(writer.compact(0.5, gate, commit_mutex, cancel).packs_deleted, 0u);
  EXPECT_EQ(objects->list("packs/").size(), 1u);

  // An entry changed meanwhile keeps its value: one deleted (its chunk
  // went), one holding other bytes of the same size (a recompression's).
  const std::string other = random_bytes(values[4].size(), 4444);
  {
    const std::unique_ptr<metadata_batch> b = engine->new_batch();
    b->erase(table::payloads, hashes[3].view());
    b->put(table::payloads, hashes[4].view(), encode_inline_payload(other));
    engine->write(*b, false);
  }
  const std::uint64_t moved = writer.move_gathered();
  EXPECT_EQ(moved, 26u);  // 28 gathered, less the two changed
  // The deleted one is looked for again (its commit could be still to
  // come), but not at once: by the calls with every_record below.
  EXPECT_FALSE(writer.has_moves_ready());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (i == 3 || i == 4) continue;
    EXPECT_EQ(entry_kind(*engine, hashes[i]), pack) << i;
    EXPECT_EQ(writer.get(hashes[i]), values[i]) << i;
  }
  EXPECT_EQ(entry_kind(*engine, hashes[3]), "none");
  EXPECT_EQ(writer.get(hashes[4]), other);

  // Another client with an empty cache reads them from the object.
  pack_store::options r = o;
  r.read_only = true;
  r.cache_dir = tmp / "cache-b";
  pack_store reader(*engine, tmp / "s", r);
  EXPECT_EQ(reader.get(hashes[0]), values[0]);
  EXPECT_EQ(reader.get(hashes[28]), values[28]);

  // A record put but not yet committed when its pack uploads moves once its
  // commit comes (a later call), and one whose commit never comes is given
  // up after a few.
  const std::unique_ptr<metadata_batch> late = engine->new_batch();
  const std::string late_value = random_bytes(9000, 77);
  const std::string lost_value = random_bytes(9000, 78);
  writer.put(*late, sha256_of(late_value), late_value, {codec::codec_id::raw, 0});
  {
    const std::unique_ptr<metadata_batch> never = engine->new_batch();
    writer.put(*never, sha256_of(lost_value), lost_value, {codec::codec_id::raw, 0});
  }
  writer.seal_gathered();
  writer.sync();
  EXPECT_EQ(objects->list("packs/").size(), 2u);
  ASSERT_TRUE(writer.has_moves_ready());
  EXPECT_EQ(writer.move_gathered(), 0u);
  EXPECT_FALSE(writer.has_moves_ready());  // due again in a second
  engine->write(*late, false);
  EXPECT_EQ(writer.move_gathered(true), 1u);
  EXPECT_EQ(entry_kind(*engine, sha256_of(late_value)), "pack 2");
  EXPECT_EQ(writer.get(sha256_of(late_value)), late_value);
  int calls = 0;
  while (calls < 10 && writer.move_gathered(true) == 0 && writer.moves_pending() > 0) ++calls;
  EXPECT_EQ(writer.moves_pending(), 0u);
  EXPECT_LT(calls, 10);
  EXPECT_EQ(entry_kind(*engine, sha256_of(lost_value)), "none");
  EXPECT_EQ(entry_kind(*engine, hashes[3]), "none");
}

// The gathered records of a pack whose upload failed stay inline and
// readable; they move once a later sync uploads it.
TEST(pack_store, gathered_records_of_a_failed_upload_move_after_the_next_one) {
  temp_dir tmp;
  const std::unique_ptr<rocksdb_engine> engine = new_pack_volume(tmp / "s");
  const auto objects = std::make_shared<flaky_object_store>(tmp / "bucket");
  pack_store packs(*engine, tmp / "s", in_objects(objects, tmp / "cache"));
  const std::string value = random_bytes(9000, 7);
  const chunk_hash hash = sha256_of(value);
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  packs.put(*batch, hash, value, {codec::codec_id::raw, 0});
  packs.sync();
  engine->write(*batch, false);
  EXPECT_EQ(entry_kind(*engine, hash), "inline");
  packs.seal_gathered();
  objects->failing = true;
  EXPECT_EQ(error_of([&] { packs.sync(); }), EIO);
  EXPECT_FALSE(packs.has_moves_ready());
  EXPECT_EQ(packs.move_gathered(true), 0u);
  EXPECT_EQ(entry_kind(*engine, hash), "inline");
  EXPECT_EQ(packs.get(hash), value);
  objects->failing = false;
  packs.sync();
  ASSERT_EQ(objects->list("packs/").size(), 1u);
  EXPECT_EQ(packs.move_gathered(), 1u);
  EXPECT_EQ(entry_kind(*engine, hash), "pack 1");
  pack_store::options r = in_objects(objects, tmp / "cache-b");
  r.read_only = true;
  pack_store reader(*engine, tmp / "s", r);
  EXPECT_EQ(reader.get(hash), value);
}

// A commit of big files gathers at most one window (1 MiB) of its records:
// the rest name the pack, which its sync uploads with them.
TEST(pack_store, a_big_commit_is_uploaded_at_its_sync) {
  temp_dir tmp;
  const std::unique_ptr<rocksdb_engine> engine = new_pack_volume(tmp / "s");
  const auto objects = std::make_shared<directory_object_store>(tmp / "bucket");
  pack_store writer(*engine, tmp / "s", in_objects(objects, tmp / "cache"));
  std::vector<chunk_hash> hashes;
  std::vector<std::string> values;
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  for (int i = 0; i < 24; ++i) {  // 24 x 100 KB
    values.push_back(random_bytes(100000, static_cast<std::uint32_t>(i) + 300));
    hashes.push_back(sha256_of(values.back()));
    writer.put(*batch, hashes.back(), values.back(), {codec::codec_id::raw, 0});
  }
  writer.sync();
  engine->write(*batch, false);
  const std::vector<object_store::object_info> uploaded = objects->list("packs/");
  ASSERT_EQ(uploaded.size(), 1u);
  EXPECT_GT(uploaded[0].size, 2400000u);
  std::size_t inline_entries = 0;
  for (const chunk_hash& h : hashes) inline_entries += entry_kind(*engine, h) == "inline";
  EXPECT_EQ(inline_entries, 10u);  // 10 records of 100 KB (and a header each) in 1 MiB
  EXPECT_EQ(writer.move_gathered(), 10u);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    EXPECT_EQ(entry_kind(*engine, hashes[i]), "pack 1") << i;
    EXPECT_EQ(writer.get(hashes[i]), values[i]) << i;
  }
}

TEST(pack_store, index_values_that_do_not_decode_are_eio) {
  const chunk_hash h = sha256_of("a");
  EXPECT_EQ(error_of([&] { decode_payload_value(h, ""); }), EIO);
  EXPECT_EQ(error_of([&] { decode_payload_value(h, std::string(1, '\x07')); }), EIO);
  EXPECT_EQ(error_of([&] {
              decode_payload_value(h, encode_pack_ref({1, 32, 100}).substr(0, 9));
            }),
            EIO);
  EXPECT_EQ(error_of([&] { decode_payload_value(h, encode_pack_ref({1, 0, 100})); }), EIO);
  const payload_value v = decode_payload_value(h, encode_pack_ref({7, 4096, 100}));
  EXPECT_FALSE(v.inline_bytes);
  EXPECT_EQ(v.ref, (pack_ref{7, 4096, 100}));
  EXPECT_EQ(*decode_payload_value(h, encode_inline_payload("abc")).inline_bytes, "abc");
}

}  // namespace
}  // namespace densefs::store
