// Metadata dumps (store/dump/): the stream refuses every damaged byte and
// every cut, and a volume dumped and loaded (or migrated) has every record
// of the file system back, byte for byte, and none of the running state.
// The same on real mounts, PostgreSQL and S3: tests/mount/dump_load_test.sh.
#include "store/dump/dump.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "store/check/fsck.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/store.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

using records = std::map<std::pair<int, std::string>, std::string>;

std::string text(std::size_t n, std::string_view word) {
  std::string out;
  while (out.size() < n) out += std::string(word) + " " + std::to_string(out.size()) + "\n";
  out.resize(n);
  return out;
}

// Every record of a closed store, read with RocksDB's read-only open.
records all_records(const fs::path& dir) {
  const auto e = rocksdb_engine::open(dir, {.read_only = true});
  records out;
  const table tables[] = {table::meta,   table::inodes,   table::dirents, table::extents,
                          table::chunks, table::payloads, table::xattrs};
  e->scan_consistent(tables, "test", [&](table t, std::string_view k, std::string_view v) {
    out[{static_cast<int>(t), std::string(k)}] = std::string(v);
  });
  return out;
}

std::string dump_of(const fs::path& dir) {
  std::ostringstream out;
  dump_volume(dir, out, "test dump");
  return out.str();
}

// Reads a whole dump; the records it holds.
std::uint64_t read_all(const std::string& bytes) {
  std::istringstream in(bytes);
  dump_reader reader(in, "test dump");
  std::uint64_t n = 0;
  while (reader.next()) ++n;
  return n;
}

class dump_test : public ::testing::Test {
 protected:
  // A root with a file "a" of two chunks (one in a pack, one inline), a hard
  // link d/b to it, an xattr, an orphan, and running state beside them (a
  // session row, a lease, a commit outcome) that a dump leaves out.
  void SetUp() override {
    store::create(source(), codec::parse_policy("zstd:level=3"), payload_backend::pack);
    auto s = store::open(source());
    transaction txn;
    inode_record root = *s->get_inode(k_root_ino);
    root.nlink = 3;
    txn.put_inode(root);
    inode_record d = make(2, S_IFDIR | 0755, 2);
    d.parent = k_root_ino;
    txn.put_inode(d);
    txn.put_dirent(k_root_ino, "d", {2, S_IFDIR});
    inode_record a = make(3, S_IFREG | 0644, 2);
    std::uint64_t off = 0;
    for (const std::string& plain : {text(200'000, "random-ish"), text(100, "small")}) {
      const prepared_chunk p = s->prepare_chunk(plain, true);
      txn.ref_chunk(p);
      txn.put_extent(3, off, {p.hash, 0, static_cast<std::uint32_t>(plain.size())});
      a.stored_bytes += p.encoded->bytes.size();
      off += plain.size();
    }
    a.size = off;
    txn.put_inode(a);
    txn.put_dirent(k_root_ino, "a", {3, S_IFREG});
    txn.put_dirent(2, "b", {3, S_IFREG});
    txn.put_xattr(3, "user.tag", "kept");
    txn.put_inode(make(4, S_IFREG | 0600, 0));
    txn.add_orphan(4);
    s->commit(txn, true);
    s.reset();
    auto e = rocksdb_engine::open(source(), {});
    auto b = e->new_batch();
    b->put(table::meta, "session/0123456789abcdef", "running");
    b->put(table::meta, "lease/gc", "running");
    b->put(table::meta, "commit_outcome/0123456789abcdef/0", "running");
    e->write(*b, true);
  }

  static inode_record make(std::uint64_t ino, std::uint32_t mode, std::uint32_t nlink) {
    inode_record r;
    r.ino = ino;
    r.mode = mode;
    r.nlink = nlink;
    return r;
  }

  fs::path source() const { return tmp_.path() / "source"; }
  fs::path target() const { return tmp_.path() / "target"; }

  // The source's records without its running state, and the target's
  // without its settings (a new UUID): what must be equal.
  void expect_same_records(const fs::path& copy) {
    records want = all_records(source());
    records got = all_records(copy);
    for (const std::string key :
         {"session/0123456789abcdef", "lease/gc", "commit_outcome/0123456789abcdef/0"}) {
      EXPECT_EQ(want.erase({0, key}), 1u) << key;
      EXPECT_EQ(got.count({0, key}), 0u) << key;
    }
    const store_settings before = decode_settings(want.at({0, "settings"}));
    const store_settings after = decode_settings(got.at({0, "settings"}));
    EXPECT_NE(after.uuid, before.uuid);
    EXPECT_EQ(after.codec_spec, before.codec_spec);
    EXPECT_EQ(after.format_version, before.format_version);
    want.erase({0, "settings"});
    got.erase({0, "settings"});
    EXPECT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want);
  }

  test::temp_dir tmp_;
};

TEST_F(dump_test, a_load_gives_back_every_record_against_the_same_packs) {
  const std::string bytes = dump_of(source());
  fs::create_directories(target());
  fs::copy(source() / "packs", target() / "packs");
  std::istringstream in(bytes);
  dump_reader reader(in, "test dump");
  const load_result r = load_volume(reader, {target(), {}, {}}, false);
  EXPECT_EQ(r.packs, 1u);
  expect_same_records(target());
  // The new volume opens, reads the file and is clean.
  auto s = store::open(target());
  EXPECT_EQ(s->get_dirent(k_root_ino, "a")->ino, 3u);
  fsck_options o;
  o.deep = true;
  const fsck_report report = fsck(*s, o);
  EXPECT_TRUE(report.clean()) << to_text(report);
}

TEST_F(dump_test, a_migrate_copies_the_records_and_only_the_packs_they_name) {
  // A pack no record names stays behind.
  std::ofstream(source() / "packs" / "00000099.pack") << "dead";
  const load_result r = migrate_volume(source(), {target(), {}, {}});
  EXPECT_EQ(r.packs, 1u);
  EXPECT_GT(r.pack_bytes, 0u);
  EXPECT_FALSE(fs::exists(target() / "packs" / "00000099.pack"));
  expect_same_records(target());
  auto s = store::open(target());
  EXPECT_TRUE(fsck(*s, {}).clean());
}

TEST_F(dump_test, a_migrate_of_a_store_in_use_is_refused) {
  const int fd = store::lock(source());
  try {
    migrate_volume(source(), {target(), {}, {}});
    ADD_FAILURE() << "migrated a store whose lock is held";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EBUSY) << e.what();
  }
  ::close(fd);
  EXPECT_FALSE(fs::exists(target() / "FORMAT"));
}

TEST_F(dump_test, a_migrate_needs_a_place_without_packs) {
  fs::create_directories(target() / "packs");
  std::ofstream(target() / "packs" / "00000001.pack") << "someone else's";
  try {
    migrate_volume(source(), {target(), {}, {}});
    ADD_FAILURE() << "migrated into a directory holding packs";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EEXIST) << e.what();
  }
  std::ifstream in(target() / "packs" / "00000001.pack");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "someone else's");
  EXPECT_FALSE(fs::exists(target() / "FORMAT"));
}

TEST_F(dump_test, a_payload_record_naming_bytes_past_any_file_is_refused) {
  std::ostringstream out;
  dump_writer writer(out, "test", {.store_format_version = 3});
  std::string ref(17, '\0');
  ref[0] = 2;  // a pack reference: pack 1, offset 2^64 - 16, 200 bytes
  ref[1] = 1;
  for (int i = 0; i < 8; ++i) ref[static_cast<std::size_t>(5 + i)] = static_cast<char>(0xff);
  ref[5] = static_cast<char>(0xf0);
  ref[13] = static_cast<char>(200);
  writer.add(table::payloads, std::string(32, 'h'), ref);
  writer.finish();
  std::istringstream in(out.str());
  dump_reader reader(in, "test dump");
  EXPECT_THROW(load_volume(reader, {target(), {}, {}}, false), store_error);
  EXPECT_TRUE(!fs::exists(target()) || fs::is_empty(target()));
}

TEST_F(dump_test, a_load_without_the_packs_is_refused_and_leaves_nothing) {
  const std::string bytes = dump_of(source());
  std::istringstream in(bytes);
  dump_reader reader(in, "test dump");
  try {
    load_volume(reader, {target(), {}, {}}, false);
    ADD_FAILURE() << "loaded records naming packs that are not there";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("packs/00000001.pack is missing"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_empty(target()));
}

TEST_F(dump_test, a_load_needs_an_empty_place) {
  const std::string bytes = dump_of(source());
  fs::create_directories(target());
  std::ofstream(target() / "something") << "x";
  std::istringstream in(bytes);
  dump_reader reader(in, "test dump");
  try {
    load_volume(reader, {target(), {}, {}}, false);
    ADD_FAILURE() << "loaded into a directory with a file in it";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EEXIST) << e.what();
  }
  EXPECT_TRUE(fs::exists(target() / "something"));
  EXPECT_FALSE(fs::exists(target() / "FORMAT"));
}

TEST_F(dump_test, every_damaged_byte_is_refused) {
  const std::string bytes = dump_of(source());
  ASSERT_GT(read_all(bytes), 10u);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    try {
      read_all(damaged);
      ADD_FAILURE() << "a flip of byte " << i << " was read as a whole dump";
      return;
    } catch (const store_error& e) {
      const std::string what = e.what();
      ASSERT_EQ(what.find('\n'), std::string::npos) << what;
      ASSERT_TRUE(what.find("damaged") != std::string::npos ||
                  what.find("not a densefs metadata dump") != std::string::npos)
          << "byte " << i << ": " << what;
    }
  }
}

TEST_F(dump_test, every_cut_is_refused_and_so_are_bytes_after_the_end) {
  const std::string bytes = dump_of(source());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    try {
      read_all(bytes.substr(0, n));
      ADD_FAILURE() << "the first " << n << " bytes were read as a whole dump";
      return;
    } catch (const store_error& e) {
      ASSERT_EQ(e.error_number(), EINVAL) << e.what();
    }
  }
  EXPECT_THROW(read_all(bytes + "x"), store_error);
  EXPECT_GT(read_all(bytes), 0u);
}

TEST(dump_stream, records_come_back_in_order_across_frames) {
  std::ostringstream out;
  dump_writer writer(out, "test", {.store_format_version = 3});
  // Over 1 MiB of records: several frames of one table.
  const std::string value(5000, 'v');
  for (int i = 0; i < 500; ++i) writer.add(table::inodes, "k" + std::to_string(100000 + i), value);
  writer.add(table::xattrs, "x", "");
  const dump_totals totals = writer.finish();
  EXPECT_GT(totals.frames, 2u);
  EXPECT_EQ(totals.records[static_cast<int>(table::inodes)], 500u);
  std::istringstream in(out.str());
  dump_reader reader(in, "test");
  int n = 0;
  while (const auto r = reader.next()) {
    if (n < 500) {
      EXPECT_EQ(r->t, table::inodes);
      EXPECT_EQ(r->key, "k" + std::to_string(100000 + n));
      EXPECT_EQ(r->value, value);
    } else {
      EXPECT_EQ(r->t, table::xattrs);
      EXPECT_EQ(r->value, "");
    }
    ++n;
  }
  EXPECT_EQ(n, 501);
  EXPECT_EQ(reader.totals().frames, totals.frames);
  EXPECT_EQ(reader.bytes_read(), out.str().size());
}

TEST(dump_stream, the_writer_takes_records_only_in_order) {
  std::ostringstream out;
  dump_writer writer(out, "test", {.store_format_version = 3});
  writer.add(table::dirents, "b", "");
  EXPECT_THROW(writer.add(table::dirents, "a", ""), std::logic_error);
  EXPECT_THROW(writer.add(table::dirents, "b", ""), std::logic_error);
  EXPECT_THROW(writer.add(table::inodes, "c", ""), std::logic_error);
  EXPECT_THROW(writer.add(table::xattrs, "", ""), std::logic_error);
}

TEST(dump_stream, a_file_that_is_no_dump_is_named_so) {
  std::istringstream in("densefs store\nformat_version=3\n");
  try {
    dump_reader reader(in, "f");
    ADD_FAILURE();
  } catch (const store_error& e) {
    EXPECT_EQ(std::string(e.what()), "f is not a densefs metadata dump (made by `densefs dump`)");
  }
}

}  // namespace
}  // namespace densefs::store
