// Lepton file payloads in the store (codec/lepton_file.h, docs/format.md
// "Lepton file payloads"): the chunks of one JPEG swapped in one commit to a
// lepton_file payload on the first chunk and lepton_member payloads on the
// others read back byte-exact cold, in any order and through the batched
// loader; members hold references on their first chunk; a swap is all or
// nothing; forged members and damaged files give EIO, never wrong bytes;
// fsck (--deep too) understands them. Chunks of 64 KiB keep the Lepton work
// small; the read path does not depend on the chunk size.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "codec/lepton_file.h"
#include "store/check/fsck.h"
#include "store/store.h"
#include "tests/make_jpeg.h"
#include "tests/store/raw_db.h"
#include "tests/temp_dir.h"
#include "tests/test_env.h"

namespace densefs::store {
namespace {

constexpr std::uint32_t k_piece = 64 << 10;

class lepton_file_store : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef DENSEFS_HAVE_LIBJPEG
    DENSEFS_SKIP_UNLESS_REQUIRED("built without libjpeg (libjpeg-dev): no JPEGs to make");
#else
    jpeg_ = test::make_jpeg(1200, 900, 92, 1);
    other_ = test::make_jpeg(1000, 800, 90, 7);
    store::create(dir(), codec::parse_policy("zstd:level=3"));
    auto s = store::open(dir());
    transaction txn;
    hashes_ = add_file(*s, txn, 2, "photo.jpg", jpeg_);
    other_hashes_ = add_file(*s, txn, 3, "other.jpg", other_);
    inode_record root = *s->get_inode(k_root_ino);
    txn.put_inode(root);
    s->commit(txn, true);
    ASSERT_GE(hashes_.size(), 5u);
#endif
  }

  std::filesystem::path dir() const {
    return tmp_.path() / "store";
  }

  static std::vector<std::string> pieces(const std::string& file, std::size_t piece = k_piece) {
    std::vector<std::string> out;
    for (std::size_t at = 0; at < file.size(); at += piece) out.push_back(file.substr(at, piece));
    return out;
  }

  // A regular file `name` in the root made of `data` cut into 64 KiB chunks.
  static std::vector<chunk_hash> add_file(store& s, transaction& txn, std::uint64_t ino,
                                          const std::string& name, const std::string& data,
                                          std::size_t piece = k_piece) {
    inode_record r;
    r.ino = ino;
    r.mode = S_IFREG | 0644;
    r.nlink = 1;
    r.parent = k_root_ino;
    std::vector<chunk_hash> hashes;
    std::uint64_t off = 0;
    for (const std::string& plain : pieces(data, piece)) {
      const prepared_chunk p = s.prepare_chunk(plain, true);
      txn.ref_chunk(p);
      txn.put_extent(ino, off, {p.hash, 0, static_cast<std::uint32_t>(plain.size())});
      r.stored_bytes += p.encoded->bytes.size();
      off += plain.size();
      hashes.push_back(p.hash);
    }
    r.size = off;
    txn.put_inode(r);
    txn.put_dirent(k_root_ino, name, {ino, S_IFREG});
    return hashes;
  }

  // The swap densefs recompress makes for one JPEG: a Lepton file on the
  // first chunk, members on the others (`member` may forge one).
  static std::vector<transaction::payload_swap> lepton_swap(
      store& s, const std::string& jpeg, const std::vector<chunk_hash>& hashes,
      const std::function<void(std::size_t i, codec::lepton_member&)>& member = {}) {
    std::vector<std::string> names;
    for (const chunk_hash& h : hashes) names.emplace_back(h.view());
    const codec::lepton_file_encoding e = codec::encode_lepton_file(jpeg, k_piece, names, 0.03);
    EXPECT_TRUE(e.payload) << e.refusal;
    std::vector<transaction::payload_swap> swaps;
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      codec::encoded_chunk enc;
      if (i == 0) {
        enc.codec = codec::codec_id::lepton_file;
        enc.bytes = e.payload.value_or("");
      } else {
        codec::lepton_member m{names[0], static_cast<std::uint32_t>(i),
                               static_cast<std::uint32_t>(pieces(jpeg)[i].size())};
        if (member) member(i, m);
        enc.codec = codec::codec_id::lepton_member;
        enc.bytes = codec::encode_lepton_member(m);
      }
      swaps.push_back({hashes[i], s.get_chunk(hashes[i])->checksum, std::move(enc)});
    }
    return swaps;
  }

  void swap_in(const std::function<void(std::size_t, codec::lepton_member&)>& member = {}) {
    auto s = store::open(dir());
    transaction txn;
    txn.replace_payloads(lepton_swap(*s, jpeg_, hashes_, member));
    s->commit(txn, true);
  }

  static int read_errno(store& s, const chunk_hash& h) {
    try {
      s.read_chunk(h);
    } catch (const store_error& e) {
      return e.error_number();
    }
    return 0;
  }

  fsck_report check(bool deep) {
    auto s = store::open(dir());
    fsck_options o;
    o.deep = deep;
    return fsck(*s, o);
  }

  test::temp_dir tmp_;
  std::string jpeg_, other_;
  std::vector<chunk_hash> hashes_, other_hashes_;
};

TEST_F(lepton_file_store, every_chunk_reads_back_exact_cold_in_any_order) {
  swap_in();
  const std::vector<std::string> plain = pieces(jpeg_);
  {
    auto s = store::open(dir());
    EXPECT_EQ(s->get_chunk(hashes_[0])->codec, codec::codec_id::lepton_file);
    // The extent reference and one per member.
    EXPECT_EQ(s->get_chunk(hashes_[0])->refcount, hashes_.size());
    for (std::size_t i = 1; i < hashes_.size(); ++i) {
      EXPECT_EQ(s->get_chunk(hashes_[i])->codec, codec::codec_id::lepton_member);
      EXPECT_EQ(s->get_chunk(hashes_[i])->refcount, 1u);
    }
    // A member read cold decodes the file once and publishes every chunk.
    const std::size_t last = hashes_.size() - 1;
    EXPECT_TRUE(*s->read_chunk(hashes_[last]) == plain[last]);
    for (std::size_t i = 0; i < hashes_.size(); ++i) {
      const auto cached = s->cached_chunk(hashes_[i]);
      ASSERT_TRUE(cached) << "chunk " << i << " was not published";
      EXPECT_TRUE(*cached == plain[i]) << i;
    }
  }
  {
    auto s = store::open(dir());  // cold: the first chunk alone
    EXPECT_TRUE(*s->read_chunk(hashes_[0]) == plain[0]);
  }
  {
    auto s = store::open(dir());  // cold: the batched loader, as read-ahead uses it
    std::vector<chunk_hash> all = hashes_;
    std::reverse(all.begin(), all.end());
    EXPECT_EQ(s->load_chunks(all), hashes_.size());
    for (std::size_t i = 0; i < hashes_.size(); ++i)
      EXPECT_TRUE(*s->read_chunk(hashes_[i]) == plain[i]) << i;
  }
  const fsck_report r = check(true);
  EXPECT_TRUE(r.clean()) << to_text(r);
}

std::string format_file(const std::filesystem::path& store_dir) {
  std::ifstream in(store_dir / "FORMAT");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A store becomes format 4 with its first Lepton file (older builds then
// refuse it up front); a swap that is refused changes nothing.
TEST_F(lepton_file_store, the_first_lepton_file_raises_the_store_format_to_4) {
  ASSERT_NE(format_file(dir()).find("format_version=3\n"), std::string::npos);
  {
    auto s = store::open(dir());
    std::vector<transaction::payload_swap> swaps = lepton_swap(*s, jpeg_, hashes_);
    swaps[1].expected_checksum ^= 1;
    transaction txn;
    txn.replace_payloads(std::move(swaps));
    s->commit(txn);
  }
  EXPECT_EQ(store::open(dir())->settings().format_version, k_compact_format_version);
  EXPECT_NE(format_file(dir()).find("format_version=3\n"), std::string::npos);
  swap_in();
  EXPECT_EQ(store::open(dir())->settings().format_version, k_lepton_file_format_version);
  EXPECT_NE(format_file(dir()).find("format_version=4\n"), std::string::npos);
  // FORMAT left behind (a crash before its rewrite) is brought up to date.
  std::string old = format_file(dir());
  old.replace(old.find("format_version=4"), 16, "format_version=3");
  std::ofstream(dir() / "FORMAT", std::ios::trunc) << old;
  store::open(dir());
  EXPECT_NE(format_file(dir()).find("format_version=4\n"), std::string::npos);
}

TEST_F(lepton_file_store, members_keep_their_first_chunk_until_they_go) {
  swap_in();
  auto s = store::open(dir());
  // The file's own reference on the first chunk goes (a partial
  // overwrite of its first 64 KiB): the members still need its payload.
  {
    transaction txn;
    txn.unref_chunk(hashes_[0]);
    s->commit(txn);
  }
  ASSERT_TRUE(s->get_chunk(hashes_[0]));
  EXPECT_EQ(s->get_chunk(hashes_[0])->refcount, hashes_.size() - 1);
  s->drop_caches();
  EXPECT_TRUE(*s->read_chunk(hashes_[2]) == pieces(jpeg_)[2]);
  // The members go one by one; the last one takes the first chunk along.
  for (std::size_t i = 1; i < hashes_.size(); ++i) {
    ASSERT_TRUE(s->get_chunk(hashes_[0])) << i;
    transaction txn;
    txn.unref_chunk(hashes_[i]);
    s->commit(txn);
    EXPECT_FALSE(s->get_chunk(hashes_[i]));
  }
  EXPECT_FALSE(s->get_chunk(hashes_[0]));
  // The other photo is untouched.
  EXPECT_TRUE(*s->read_chunk(other_hashes_[1]) == pieces(other_)[1]);
}

TEST_F(lepton_file_store, a_file_and_its_members_deleted_in_one_commit_leave_nothing) {
  swap_in();
  auto s = store::open(dir());
  const std::uint64_t before = s->stats().chunks;
  transaction txn;
  for (const chunk_hash& h : hashes_) txn.unref_chunk(h);
  s->commit(txn);
  for (const chunk_hash& h : hashes_) EXPECT_FALSE(s->get_chunk(h));
  EXPECT_EQ(s->stats().chunks, before - hashes_.size());
}

TEST_F(lepton_file_store, a_swap_is_all_or_nothing) {
  auto s = store::open(dir());
  std::vector<transaction::payload_swap> swaps = lepton_swap(*s, jpeg_, hashes_);
  swaps[3].expected_checksum ^= 1;  // one chunk changed since it was read
  transaction txn;
  txn.replace_payloads(std::move(swaps));
  s->commit(txn);
  for (const chunk_hash& h : hashes_)
    EXPECT_FALSE(codec::is_lepton_file_codec(s->get_chunk(h)->codec));
  EXPECT_EQ(s->get_chunk(hashes_[0])->refcount, 1u);

  // Members whose first chunk would not be a Lepton file are refused too.
  std::vector<transaction::payload_swap> members_only = lepton_swap(*s, jpeg_, hashes_);
  members_only.erase(members_only.begin());
  transaction txn2;
  txn2.replace_payloads(std::move(members_only));
  s->commit(txn2);
  for (const chunk_hash& h : hashes_)
    EXPECT_FALSE(codec::is_lepton_file_codec(s->get_chunk(h)->codec));

  // A member whose size disagrees with its chunk's record is refused.
  transaction txn3;
  txn3.replace_payloads(lepton_swap(*s, jpeg_, hashes_, [](std::size_t i, codec::lepton_member& m) {
    if (i == 2) m.plain_size -= 1;
  }));
  s->commit(txn3);
  for (const chunk_hash& h : hashes_)
    EXPECT_FALSE(codec::is_lepton_file_codec(s->get_chunk(h)->codec));

  // A Lepton file is never swapped again, even by an identical swap.
  s.reset();
  swap_in();
  s = store::open(dir());
  transaction txn4;
  std::vector<transaction::payload_swap> again = lepton_swap(*s, jpeg_, hashes_);
  const std::uint64_t member_checksum = s->get_chunk(hashes_[1])->checksum;
  txn4.replace_payloads(std::move(again));
  s->commit(txn4);
  EXPECT_EQ(s->get_chunk(hashes_[0])->refcount, hashes_.size());
  EXPECT_EQ(s->get_chunk(hashes_[1])->checksum, member_checksum);
}

TEST_F(lepton_file_store, forged_members_give_eio_never_wrong_bytes) {
  // Chunk 2 claims to be chunk 3 of the file; chunk 4 claims an index past
  // the end; chunk 1 names the other photo's Lepton file.
  {
    auto s = store::open(dir());
    transaction txn;
    txn.replace_payloads(lepton_swap(*s, other_, other_hashes_));
    s->commit(txn);
  }
  const std::string other_first(other_hashes_[0].view());
  swap_in([&](std::size_t i, codec::lepton_member& m) {
    if (i == 2) m.index = 3;
    if (i == 4) m.index = 1000;
    if (i == 1) m.first_chunk = other_first;
  });
  auto s = store::open(dir());
  ASSERT_EQ(s->get_chunk(hashes_[2])->codec, codec::codec_id::lepton_member);
  ASSERT_EQ(s->get_chunk(hashes_[1])->codec, codec::codec_id::lepton_member);
  const std::vector<std::string> plain = pieces(jpeg_);
  for (const std::size_t i : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
    s->drop_caches();
    EXPECT_EQ(read_errno(*s, hashes_[i]), EIO) << i;
  }
  // The honest members and the file itself still read exact.
  s->drop_caches();
  EXPECT_TRUE(*s->read_chunk(hashes_[3]) == plain[3]);
  EXPECT_TRUE(*s->read_chunk(hashes_[0]) == plain[0]);
  // (Once an honest read has published the file's chunks, a forged member
  // is served its true content from the cache: each chunk is cached under
  // its own name after its SHA-256 was checked. Only a cold read, or fsck,
  // sees the forgery.)
  s.reset();
  const fsck_report r = check(true);
  EXPECT_FALSE(r.clean());
  EXPECT_GE(r[fsck_problem::bad_content].found, 1u) << to_text(r);
}

// Forged behind the store's back (the swap refuses these): a member whose
// size disagrees with its record, and one naming itself as its first chunk,
// under recomputed payload checksums.
TEST_F(lepton_file_store, members_forged_behind_the_store_give_eio) {
  swap_in();
  const bool blob = store::open(dir())->payloads_backend() == payload_backend::blob;
  {
    test::raw_db db(dir(), blob);
    const auto forge = [&](const chunk_hash& h,
                           const std::function<void(codec::lepton_member&)>& f) {
      codec::lepton_member m = codec::parse_lepton_member(db.get_payload(h));
      f(m);
      const std::string payload = codec::encode_lepton_member(m);
      const std::string key(h.view());
      chunk_record rec = decode_chunk(db.get(k_cf_chunks, key));
      rec.checksum = stored_checksum(payload);
      rec.stored_size = static_cast<std::uint32_t>(payload.size());
      db.put_payload(h, payload);
      db.put(k_cf_chunks, key, encode_chunk(rec));
    };
    forge(hashes_[1], [](codec::lepton_member& m) { m.plain_size -= 1; });
    forge(hashes_[2], [&](codec::lepton_member& m) { m.first_chunk = hashes_[2].view(); });
  }
  auto s = store::open(dir());
  EXPECT_EQ(read_errno(*s, hashes_[1]), EIO);
  s->drop_caches();
  EXPECT_EQ(read_errno(*s, hashes_[2]), EIO);
  s->drop_caches();
  EXPECT_TRUE(*s->read_chunk(hashes_[3]) == pieces(jpeg_)[3]);
}

// A member that fsck would not count gives no reference back when it goes:
// one whose payload no longer matches its record, and one (re-checksummed)
// that names a chunk which is not a Lepton file. Neither may take a
// reference from a chunk that other files still use.
TEST_F(lepton_file_store, a_damaged_member_takes_no_reference_when_it_goes) {
  swap_in();
  const bool blob = store::open(dir())->payloads_backend() == payload_backend::blob;
  {
    test::raw_db db(dir(), blob);
    // Member 1: its payload names the other photo's first chunk, its record
    // is left as it was (a damaged payload).
    codec::lepton_member m1 = codec::parse_lepton_member(db.get_payload(hashes_[1]));
    m1.first_chunk = other_hashes_[0].view();
    db.put_payload(hashes_[1], codec::encode_lepton_member(m1));
    // Member 2: the same, with a record that matches (a forged store).
    codec::lepton_member m2 = codec::parse_lepton_member(db.get_payload(hashes_[2]));
    m2.first_chunk = other_hashes_[1].view();
    const std::string payload = codec::encode_lepton_member(m2);
    const std::string key(hashes_[2].view());
    chunk_record rec = decode_chunk(db.get(k_cf_chunks, key));
    rec.checksum = stored_checksum(payload);
    db.put_payload(hashes_[2], payload);
    db.put(k_cf_chunks, key, encode_chunk(rec));
  }
  auto s = store::open(dir());
  const std::uint64_t other0 = s->get_chunk(other_hashes_[0])->refcount;
  const std::uint64_t other1 = s->get_chunk(other_hashes_[1])->refcount;
  const std::uint64_t first = s->get_chunk(hashes_[0])->refcount;
  for (const std::size_t i : {1, 2}) {
    transaction txn;
    txn.unref_chunk(hashes_[i]);
    s->commit(txn);
    EXPECT_FALSE(s->get_chunk(hashes_[i])) << i;
  }
  EXPECT_EQ(s->get_chunk(other_hashes_[0])->refcount, other0);
  EXPECT_EQ(s->get_chunk(other_hashes_[1])->refcount, other1);
  // The real first chunk keeps the two references too (fsck reports them).
  EXPECT_EQ(s->get_chunk(hashes_[0])->refcount, first);
  s->drop_caches();
  EXPECT_TRUE(*s->read_chunk(other_hashes_[0]) == pieces(other_)[0]);
  EXPECT_TRUE(*s->read_chunk(other_hashes_[1]) == pieces(other_)[1]);
  EXPECT_TRUE(*s->read_chunk(hashes_[3]) == pieces(jpeg_)[3]);
}

TEST_F(lepton_file_store, a_damaged_lepton_file_gives_eio_for_every_chunk) {
  auto s = store::open(dir());
  std::vector<transaction::payload_swap> swaps = lepton_swap(*s, jpeg_, hashes_);
  std::string& bytes = swaps[0].encoded.bytes;
  bytes[bytes.size() / 2] ^= 0x10;  // inside the Lepton data, checksummed as stored
  transaction txn;
  txn.replace_payloads(std::move(swaps));
  s->commit(txn);
  for (const chunk_hash& h : hashes_) {
    s->drop_caches();
    EXPECT_EQ(read_errno(*s, h), EIO);
  }
}

TEST_F(lepton_file_store, fsck_counts_member_references) {
  swap_in();
  EXPECT_TRUE(check(false).clean()) << to_text(check(false));
  // A member's reference dropped behind the store's back (its refcount set
  // outright) shows as a wrong refcount on the first chunk.
  {
    auto s = store::open(dir());
    s->set_chunk_refcount(hashes_[0], 1);
  }
  const fsck_report r = check(false);
  EXPECT_EQ(r[fsck_problem::wrong_refcount].found, 1u) << to_text(r);
}

// What densefs recompress and the background re-encoder do with a JPEG of
// several 4 MiB chunks: reencode_lepton_file builds the swaps from the
// file's extents; committed, they store less and read back exact.
TEST_F(lepton_file_store, reencode_lepton_file_swaps_a_jpeg_of_several_4_mib_chunks) {
#ifdef DENSEFS_HAVE_LIBJPEG
  const std::string big = test::make_jpeg(4000, 3000, 94, 5);
  ASSERT_GT(big.size(), k_chunk_size);
  auto s = store::open(dir());
  {
    transaction txn;
    add_file(*s, txn, 4, "big.jpg", big, k_chunk_size);
    s->commit(txn);
  }
  const inode_record r = *s->get_inode(4);
  const extent_list extents = s->extents(4, 0, r.size);
  ASSERT_TRUE(s->could_be_lepton_file(extents, r.size));
  EXPECT_FALSE(s->could_be_lepton_file(extents, r.size + 1));  // a hole at the end
  EXPECT_FALSE(s->could_be_lepton_file({extents.front()}, r.size));

  store::lepton_file_reencoding e = s->reencode_lepton_file(extents, r.size, 0.03);
  ASSERT_EQ(e.swaps.size(), extents.size()) << e.refusal;
  EXPECT_LT(e.stored_after, e.stored_before * 9 / 10);
  transaction txn;
  txn.replace_payloads(std::move(e.swaps));
  s->commit(txn);
  EXPECT_EQ(s->get_chunk(extents[0].second.hash)->codec, codec::codec_id::lepton_file);
  // Done once: the file is now part of a Lepton file.
  EXPECT_TRUE(s->reencode_lepton_file(extents, r.size, 0.03).swaps.empty());
  s.reset();
  s = store::open(dir());
  std::string back;
  for (const auto& [off, e2] : extents) back += *s->read_chunk(e2.hash);
  EXPECT_TRUE(back == big);
#endif
}

// A member no file uses any more (its extent dropped behind the store's
// back): fsck reports it leaked, one --repair deletes it and sets its first
// chunk's count, and the store is then clean.
TEST_F(lepton_file_store, one_repair_fixes_a_leaked_member_and_its_first_chunk) {
  swap_in();
  {
    auto s = store::open(dir());
    transaction txn;
    txn.delete_extent(2, std::uint64_t{3} * k_piece);
    s->commit(txn);
  }
  fsck_report r = check(false);
  EXPECT_EQ(r[fsck_problem::leaked_chunk].found, 1u) << to_text(r);
  EXPECT_EQ(r[fsck_problem::wrong_refcount].found, 1u) << to_text(r);
  {
    auto s = store::open(dir());
    fsck_options o;
    o.repair = true;
    fsck(*s, o);
  }
  r = check(true);
  EXPECT_EQ(r[fsck_problem::leaked_chunk].found, 0u) << to_text(r);
  EXPECT_EQ(r[fsck_problem::wrong_refcount].found, 0u) << to_text(r);
  auto s = store::open(dir());
  EXPECT_FALSE(s->get_chunk(hashes_[3]));
  EXPECT_EQ(s->get_chunk(hashes_[0])->refcount, hashes_.size() - 1);
  EXPECT_TRUE(*s->read_chunk(hashes_[4]) == pieces(jpeg_)[4]);
}

}  // namespace
}  // namespace densefs::store
