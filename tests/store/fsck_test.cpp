// fsck on stores built through the store API and then damaged behind its
// back (tests/store/raw_db.h): each kind of damage is found, --repair fixes
// the repairable ones, and the rest stay reported with the files they hit.
#include "store/check/fsck.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "store/store.h"
#include "tests/random_bytes.h"
#include "tests/store/raw_db.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

std::string text(std::size_t n, std::string_view word) {
  std::string out;
  while (out.size() < n) out += std::string(word) + " " + std::to_string(out.size()) + "\n";
  out.resize(n);
  return out;
}

class fsck_test : public ::testing::Test {
 protected:
  // A root with a directory "d", a file "a" (one chunk), a hard link d/b to
  // it, and a file "c" of two chunks.
  void SetUp() override {
    store::create(dir(), codec::parse_policy("zstd:level=3"));
    auto s = store::open(dir());
    transaction txn;
    inode_record root = *s->get_inode(k_root_ino);
    root.nlink = 3;  // "d"
    txn.put_inode(root);
    inode_record d = make(2, S_IFDIR | 0755, 2);
    d.parent = k_root_ino;
    txn.put_inode(d);
    txn.put_dirent(k_root_ino, "d", {2, S_IFDIR});
    add_file(*s, txn, 3, {text(1000, "alpha")}, 2);
    txn.put_dirent(k_root_ino, "a", {3, S_IFREG});
    txn.put_dirent(2, "b", {3, S_IFREG});
    add_file(*s, txn, 4, {text(k_chunk_size, "beta"), text(5000, "gamma")}, 1);
    txn.put_dirent(k_root_ino, "c", {4, S_IFREG});
    s->commit(txn, true);
    a_chunk_ = sha256_of(text(1000, "alpha"));
    c_second_chunk_ = sha256_of(text(5000, "gamma"));
  }

  static inode_record make(std::uint64_t ino, std::uint32_t mode, std::uint32_t nlink) {
    inode_record r;
    r.ino = ino;
    r.mode = mode;
    r.nlink = nlink;
    return r;
  }

  static void add_file(store& s, transaction& txn, std::uint64_t ino,
                       const std::vector<std::string>& chunks, std::uint32_t nlink) {
    inode_record r = make(ino, S_IFREG | 0644, nlink);
    std::uint64_t off = 0;
    for (const std::string& plain : chunks) {
      const prepared_chunk p = s.prepare_chunk(plain, true);
      txn.ref_chunk(p);
      txn.put_extent(ino, off, {p.hash, 0, static_cast<std::uint32_t>(plain.size())});
      r.stored_bytes += p.encoded->bytes.size();
      off += plain.size();
    }
    r.size = off;
    txn.put_inode(r);
  }

  fs::path dir() const { return tmp_.path() / "store"; }

  fsck_report check(bool repair = false, bool deep = false) {
    auto s = store::open(dir());
    fsck_options o;
    o.repair = repair;
    o.deep = deep;
    return fsck(*s, o);
  }

  void put_chunk_record(const chunk_hash& h, const chunk_record& r) {
    test::raw_db db(dir());
    db.put(k_cf_chunks, std::string(h.view()), encode_chunk(r));
  }
  chunk_record get_chunk_record(const chunk_hash& h) {
    test::raw_db db(dir());
    return decode_chunk(db.get(k_cf_chunks, std::string(h.view())));
  }

  test::temp_dir tmp_;
  chunk_hash a_chunk_;
  chunk_hash c_second_chunk_;
};

std::uint64_t total_found(const fsck_report& r) {
  std::uint64_t n = 0;
  for (const auto& k : r.problems) n += k.found;
  return n;
}

TEST_F(fsck_test, a_consistent_store_is_clean) {
  const fsck_report r = check(false, true);
  EXPECT_TRUE(r.clean()) << to_text(r);
  EXPECT_EQ(total_found(r), 0u) << to_text(r);
  EXPECT_EQ(r.inodes, 4u);
  EXPECT_EQ(r.dirents, 4u);
  EXPECT_EQ(r.extents, 3u);
  EXPECT_EQ(r.chunks, 3u);
  EXPECT_NE(to_text(r).find("clean"), std::string::npos);
}

TEST_F(fsck_test, repairs_refcounts_leaks_links_queue_and_accounting) {
  chunk_hash leaked;
  const chunk_hash gone = sha256_of("a chunk that does not exist");
  {
    auto s = store::open(dir());
    transaction txn;
    // A chunk with a reference but no extent: leaked.
    const prepared_chunk p = s->prepare_chunk(text(3000, "leak"), true);
    leaked = p.hash;
    txn.ref_chunk(p);
    // A queue entry for a chunk that does not exist.
    txn.queue_recompress(gone, 3);
    // Wrong link counts: file 4 has one entry, directory 2 no subdirectory.
    inode_record c = *s->get_inode(4);
    c.nlink = 5;
    c.stored_bytes += 7;  // and wrong accounting
    txn.put_inode(c);
    inode_record d = *s->get_inode(2);
    d.nlink = 3;
    txn.put_inode(d);
    s->commit(txn, true);
  }
  chunk_record a = get_chunk_record(a_chunk_);
  ASSERT_EQ(a.refcount, 1u);
  a.refcount = 7;
  put_chunk_record(a_chunk_, a);

  const fsck_report r = check();
  EXPECT_FALSE(r.clean());
  EXPECT_EQ(r[fsck_problem::wrong_refcount].found, 1u) << to_text(r);
  EXPECT_EQ(r[fsck_problem::leaked_chunk].found, 1u);
  EXPECT_EQ(r[fsck_problem::dangling_queue_entry].found, 1u);
  EXPECT_EQ(r[fsck_problem::wrong_nlink].found, 2u);
  EXPECT_EQ(r[fsck_problem::stored_bytes_mismatch].found, 1u);
  EXPECT_EQ(total_found(r), 6u) << to_text(r);
  EXPECT_NE(r[fsck_problem::wrong_refcount].examples.at(0).find(a_chunk_.hex()), std::string::npos);
  EXPECT_NE(r[fsck_problem::leaked_chunk].examples.at(0).find(leaked.hex()), std::string::npos);
  EXPECT_NE(to_text(r).find("repairable with --repair"), std::string::npos) << to_text(r);

  // A check changes nothing.
  EXPECT_EQ(get_chunk_record(a_chunk_).refcount, 7u);

  const fsck_report fixed = check(true);
  EXPECT_TRUE(fixed.clean()) << to_text(fixed);
  EXPECT_EQ(fixed[fsck_problem::wrong_refcount].repaired, 1u);
  EXPECT_EQ(fixed[fsck_problem::leaked_chunk].repaired, 1u);
  EXPECT_EQ(fixed[fsck_problem::dangling_queue_entry].repaired, 1u);
  EXPECT_EQ(fixed[fsck_problem::wrong_nlink].repaired, 2u);
  EXPECT_EQ(fixed[fsck_problem::stored_bytes_mismatch].repaired, 1u);

  const fsck_report again = check(false, true);
  EXPECT_TRUE(again.clean()) << to_text(again);
  EXPECT_EQ(total_found(again), 0u) << to_text(again);
  auto s = store::open(dir());
  EXPECT_EQ(s->get_chunk(a_chunk_)->refcount, 1u);
  EXPECT_FALSE(s->get_chunk(leaked));
  EXPECT_FALSE(s->is_queued_for_recompress(gone));
  EXPECT_EQ(s->get_inode(4)->nlink, 1u);
  EXPECT_EQ(s->get_inode(2)->nlink, 2u);
  EXPECT_EQ(s->get_inode(3)->nlink, 2u);  // the hard link was right all along
  // The files still read.
  EXPECT_EQ(*s->read_chunk(a_chunk_), text(1000, "alpha"));
}

// A chunks table lost with no backup copy (metadata salvage): records of
// chunks whose payloads are in packs come back from the pack record
// headers, with the references the extents make.
TEST_F(fsck_test, chunk_records_lost_with_a_table_come_back_from_the_pack_headers) {
  const std::string data = test::random_bytes(100000, 3);  // stored raw, in a pack
  chunk_hash h;
  {
    auto s = store::open(dir());
    // Blob stores keep payloads in RocksDB: no pack record header to read
    // (store_blob_backend runs these tests with blob stores).
    if (!s->packs()) GTEST_SKIP() << "a blob store";
    transaction txn;
    add_file(*s, txn, 5, {data}, 1);
    txn.put_dirent(k_root_ino, "e", {5, S_IFREG});
    txn.put_inode(make(6, S_IFREG | 0644, 1));
    txn.put_dirent(k_root_ino, "f", {6, S_IFREG});
    const prepared_chunk p = s->prepare_chunk(data, true);
    txn.ref_chunk(p);
    txn.put_extent(6, 0, {p.hash, 0, static_cast<std::uint32_t>(data.size())});
    s->commit(txn, true);
    h = p.hash;
  }
  const chunk_record before = get_chunk_record(h);
  {
    test::raw_db db(dir());
    db.erase(k_cf_chunks, std::string(h.view()));
    db.erase(k_cf_payloads, std::string(h.view()));  // the index entry too
  }
  const fsck_report found = check();
  EXPECT_EQ(found[fsck_problem::dangling_extent].found, 2u) << to_text(found);
  const fsck_report repaired = check(true);
  EXPECT_EQ(repaired[fsck_problem::dangling_extent].repaired, 2u) << to_text(repaired);
  EXPECT_EQ(repaired.chunk_records_rebuilt, 1u);
  EXPECT_EQ(get_chunk_record(h), before);  // refcount 2 again, the same payload
  const fsck_report after = check(false, true);
  EXPECT_TRUE(after.clean()) << to_text(after);
  EXPECT_EQ(*store::open(dir())->read_chunk(h), data);
}

TEST_F(fsck_test, a_leaked_chunk_with_a_zero_refcount_is_deleted) {
  chunk_record a = get_chunk_record(a_chunk_);
  {
    auto s = store::open(dir());
    transaction txn;
    txn.delete_extent(3, 0);  // behind the refcount's back
    s->commit(txn, true);
  }
  a.refcount = 0;
  put_chunk_record(a_chunk_, a);
  const fsck_report r = check(true);
  EXPECT_EQ(r[fsck_problem::leaked_chunk].found, 1u) << to_text(r);
  EXPECT_EQ(r[fsck_problem::leaked_chunk].repaired, 1u);
  auto s = store::open(dir());
  EXPECT_FALSE(s->get_chunk(a_chunk_));
}

TEST_F(fsck_test, damaged_file_data_is_reported_with_its_files_and_not_repaired) {
  const chunk_hash missing = sha256_of("never stored");
  {
    auto s = store::open(dir());
    transaction txn;
    txn.put_extent(4, 2 * k_chunk_size, {missing, 0, 10});  // dangling
    s->commit(txn, true);
  }
  {
    // A payload with the recorded size but other bytes: checksum mismatch.
    test::raw_db db(dir());
    std::string payload = db.get_payload(c_second_chunk_);
    payload[payload.size() / 2] ^= 0x55;
    db.put_payload(c_second_chunk_, payload);
  }
  for (const bool repair : {false, true}) {
    const fsck_report r = check(repair);
    EXPECT_FALSE(r.clean()) << to_text(r);
    ASSERT_EQ(r[fsck_problem::dangling_extent].found, 1u) << to_text(r);
    EXPECT_EQ(r[fsck_problem::dangling_extent].repaired, 0u);
    const std::string& d = r[fsck_problem::dangling_extent].examples.at(0);
    EXPECT_NE(d.find("/c (inode 4) at offset " + std::to_string(2 * k_chunk_size)),
              std::string::npos)
        << d;
    EXPECT_NE(d.find(missing.hex()), std::string::npos) << d;
    ASSERT_EQ(r[fsck_problem::bad_payload].found, 1u) << to_text(r);
    const std::string& b = r[fsck_problem::bad_payload].examples.at(0);
    EXPECT_NE(b.find(c_second_chunk_.hex()), std::string::npos) << b;
    EXPECT_NE(b.find("/c (inode 4) at offset " + std::to_string(k_chunk_size)), std::string::npos)
        << b;
    EXPECT_EQ(r.remaining_errors(), 2u);
    EXPECT_EQ(total_found(r), 2u) << to_text(r);  // the refcounts are still right
  }
}

TEST_F(fsck_test, overlapping_slot_crossing_and_overlong_extents_are_reported) {
  {
    auto s = store::open(dir());
    transaction txn;
    const prepared_chunk p = s->prepare_chunk(std::string(100, 'q'), true);
    for (int i = 0; i < 4; ++i) txn.ref_chunk(p);
    txn.put_extent(9, 0, {p.hash, 0, 100});
    txn.put_extent(9, 50, {p.hash, 0, 60});                 // overlaps [0, 100)
    txn.put_extent(9, k_chunk_size - 10, {p.hash, 0, 20});  // crosses the slot at 4 MiB
    txn.put_extent(9, 2 * k_chunk_size, {p.hash, 90, 20});  // bytes 90..110 of 100
    inode_record r = make(9, S_IFREG | 0644, 0);
    r.size = 2 * k_chunk_size + 20;
    txn.put_inode(r);
    txn.add_orphan(9);
    s->commit(txn, true);
  }
  const fsck_report r = check();
  ASSERT_EQ(r[fsck_problem::bad_extent].found, 3u) << to_text(r);
  const auto& ex = r[fsck_problem::bad_extent].examples;
  EXPECT_NE(ex.at(0).find("inode 9 at offset 50: overlaps"), std::string::npos) << ex.at(0);
  EXPECT_NE(ex.at(1).find("cross a 4 MiB slot"), std::string::npos) << ex.at(1);
  EXPECT_NE(ex.at(2).find("bytes 90..110 of a chunk of 100"), std::string::npos) << ex.at(2);
  EXPECT_FALSE(r.clean());
}

TEST_F(fsck_test, a_forged_payload_is_found_only_by_a_deep_check) {
  // A raw payload that passes its checksum but holds other content: only
  // decoding and hashing can tell.
  auto s = store::open(dir());
  const std::string plain = text(2000, "delta");
  transaction txn;
  prepared_chunk p;
  p.hash = sha256_of(plain);
  p.plain_size = static_cast<std::uint32_t>(plain.size());
  p.encoded.emplace();
  p.encoded->codec = codec::codec_id::raw;
  p.encoded->bytes = plain;
  txn.ref_chunk(p);
  txn.put_extent(3, 1000, {p.hash, 0, 2000});
  inode_record a = *s->get_inode(3);
  a.size = 3000;
  a.stored_bytes += plain.size();
  txn.put_inode(a);
  s->commit(txn, true);
  s.reset();
  {
    test::raw_db db(dir());
    const std::string forged = text(2000, "DELTA");
    db.put_payload(p.hash, forged);
    chunk_record r = decode_chunk(db.get(k_cf_chunks, std::string(p.hash.view())));
    r.checksum = stored_checksum(forged);
    db.put(k_cf_chunks, std::string(p.hash.view()), encode_chunk(r));
  }
  const fsck_report shallow = check();
  EXPECT_TRUE(shallow.clean()) << to_text(shallow);
  const fsck_report deep = check(true, true);
  EXPECT_FALSE(deep.clean());
  ASSERT_EQ(deep[fsck_problem::bad_content].found, 1u) << to_text(deep);
  EXPECT_EQ(deep[fsck_problem::bad_content].repaired, 0u);
  const std::string& e = deep[fsck_problem::bad_content].examples.at(0);
  EXPECT_NE(e.find("SHA-256"), std::string::npos) << e;
  EXPECT_NE(e.find("/a (inode 3) at offset 1000"), std::string::npos) << e;
}

TEST_F(fsck_test, links_and_undecodable_records_are_reported) {
  {
    auto s = store::open(dir());
    transaction txn;
    txn.put_dirent(k_root_ino, "ghost", {99, S_IFREG});  // no inode 99
    txn.put_dirent(3, "inside-a-file", {4, S_IFREG});    // parent is a file
    txn.put_dirent(k_root_ino, "typo", {4, S_IFDIR});    // wrong type
    txn.put_inode(make(50, S_IFREG | 0644, 1));          // no entry reaches it
    txn.add_orphan(60);                                  // no inode 60
    txn.put_inode(make(61, S_IFDIR | 0755, 0));          // removed while open: fine
    txn.add_orphan(61);
    txn.put_inode(make(62, S_IFREG | 0644, 0));  // unlinked while open: fine
    txn.add_orphan(62);
    s->commit(txn, true);
  }
  {
    test::raw_db db(dir());
    db.put(k_cf_inodes, inode_key(70), std::string("\x09garbage", 8));
  }
  const fsck_report r = check(true);
  EXPECT_EQ(r[fsck_problem::dangling_dirent].found, 1u) << to_text(r);
  EXPECT_EQ(r[fsck_problem::dirent_outside_dir].found, 1u);
  EXPECT_EQ(r[fsck_problem::dirent_type_mismatch].found, 1u);
  EXPECT_EQ(r[fsck_problem::unreachable_inode].found, 1u);
  EXPECT_EQ(r[fsck_problem::dangling_orphan].found, 1u);
  EXPECT_EQ(r[fsck_problem::corrupt_record].found, 1u);
  // File 4 now has three entries: its link count follows them.
  EXPECT_EQ(r[fsck_problem::wrong_nlink].repaired, 1u);
  EXPECT_FALSE(r.clean());
  EXPECT_EQ(store::open(dir())->get_inode(4)->nlink, 3u);
}

TEST_F(fsck_test, json_report_has_counts_and_problems) {
  {
    auto s = store::open(dir());
    transaction txn;
    txn.queue_recompress(sha256_of("gone"), 3);
    s->commit(txn, true);
  }
  const auto j = nlohmann::json::parse(to_json(check()));
  EXPECT_FALSE(j.at("clean").get<bool>());
  EXPECT_EQ(j.at("remaining_errors").get<int>(), 1);
  EXPECT_EQ(j.at("counts").at("chunks").get<int>(), 3);
  EXPECT_EQ(j.at("counts").at("queued").get<int>(), 1);
  const auto& q = j.at("problems").at("dangling_queue_entry");
  EXPECT_EQ(q.at("found").get<int>(), 1);
  EXPECT_EQ(q.at("repaired").get<int>(), 0);
  EXPECT_TRUE(q.at("repairable").get<bool>());
  EXPECT_FALSE(q.at("warning").get<bool>());
  EXPECT_EQ(q.at("examples").size(), 1u);
  EXPECT_EQ(j.at("problems").size(), 1u);
}

}  // namespace
}  // namespace densefs::store
