// The store as fs/ uses it: mkfs, checks, locking, transactions, chunk
// refcounts and payloads, integrity checks on read, persistence, stats.
#include "store/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <rocksdb/table_properties.h>

#include "store/check/repair_from.h"
#include "store/check/scrub.h"
#include "tests/random_bytes.h"
#include "tests/store/error_of.h"
#include "tests/store/raw_db.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

using test::random_bytes;

std::string text_bytes(std::size_t n) {
  std::string out;
  std::size_t line = 0;
  while (out.size() < n) out += "line " + std::to_string(line++) + " of a very compressible file\n";
  out.resize(n);
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

using test::error_of;

class store_test : public ::testing::Test {
 protected:
  void SetUp() override { store::create(dir(), codec::parse_policy("zstd:level=3")); }
  fs::path dir() const { return tmp_ / "store"; }
  std::unique_ptr<store> open(store_open_options o = {}) { return store::open(dir(), o); }

  test::temp_dir tmp_;
};

inode_record make_inode(std::uint64_t ino, std::uint32_t mode, std::uint64_t size = 0) {
  inode_record r;
  r.ino = ino;
  r.mode = mode;
  r.nlink = 1;
  r.size = size;
  r.mtime = {1700000000, 123456789};
  return r;
}

// ---- mkfs, check, lock

TEST_F(store_test, mkfs_makes_a_private_store_with_a_root_directory) {
  struct stat st {};
  ASSERT_EQ(::stat(dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  const std::string format = read_file(dir() / "FORMAT");
  // Compact records (format 3) for either payload backend.
  const std::uint32_t version = k_compact_format_version;
  EXPECT_TRUE(
      format.starts_with("densefs store\nformat_version=" + std::to_string(version) + "\nuuid="))
      << format;
  EXPECT_TRUE(format.ends_with("\n"));

  EXPECT_NO_THROW(store::check(dir()));
  auto s = open();
  EXPECT_EQ(s->settings().format_version, version);
  EXPECT_EQ(s->settings().uuid.size(), 36u);
  EXPECT_NE(format.find("uuid=" + s->settings().uuid + "\n"), std::string::npos);
  EXPECT_EQ(s->settings().uuid[14], '4');  // version 4 UUID
  EXPECT_EQ(s->settings().codec_spec, codec::format_policy(codec::parse_policy("zstd:level=3")));
  EXPECT_GT(s->settings().created.sec, 1600000000);

  const auto root = s->get_inode(k_root_ino);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->mode, static_cast<std::uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(root->nlink, 2u);
  EXPECT_EQ(root->uid, ::geteuid());
  EXPECT_EQ(root->gid, ::getegid());
  EXPECT_EQ(root->parent, k_root_ino);
  EXPECT_EQ(root->mtime, s->settings().created);
  EXPECT_TRUE(s->dir_is_empty(k_root_ino));
}

TEST_F(store_test, mkfs_records_the_codec_policy) {
  const codec::policy p = codec::parse_policy("default/text=zstd:level=9");
  store::create(tmp_ / "nine", p);
  auto s = store::open(tmp_ / "nine");
  EXPECT_EQ(s->settings().codec_spec, codec::format_policy(p));
  EXPECT_EQ(s->policy().for_type(codec::file_type::text).zstd_level, 9);
  EXPECT_EQ(s->policy().for_type(codec::file_type::text).preferred, codec::codec_id::zstd);
  EXPECT_TRUE(s->policy() == p);

  store::create(tmp_ / "default");
  EXPECT_TRUE(store::open(tmp_ / "default")->policy() == codec::default_policy());
}

TEST_F(store_test, mkfs_refuses_a_non_empty_directory_and_chmods_an_empty_one) {
  std::string message;
  EXPECT_EQ(error_of([&] { store::create(dir()); }, &message), EEXIST);
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find(dir().string()), std::string::npos);

  const fs::path empty = tmp_ / "empty";
  ASSERT_EQ(::mkdir(empty.c_str(), 0755), 0);
  store::create(empty, {});
  struct stat st {};
  ASSERT_EQ(::stat(empty.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  std::ofstream(tmp_ / "file") << "x";
  EXPECT_EQ(error_of([&] { store::create(tmp_ / "file", {}); }), ENOTDIR);
}

TEST_F(store_test, check_reports_a_missing_directory) {
  std::string message;
  EXPECT_EQ(error_of([&] { store::check(tmp_ / "nope"); }, &message), ENOENT);
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find((tmp_ / "nope").string()), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_EQ(error_of([&] { store::open(tmp_ / "nope"); }), ENOENT);
}

TEST_F(store_test, check_reports_a_directory_that_is_not_a_store) {
  fs::create_directory(tmp_ / "plain");
  std::string message;
  EXPECT_EQ(error_of([&] { store::check(tmp_ / "plain"); }, &message), EINVAL);
  EXPECT_NE(message.find("is not a densefs store"), std::string::npos) << message;
  EXPECT_NE(message.find("densefs mkfs"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);

  std::ofstream(tmp_ / "plain" / "FORMAT") << "something else\n";
  EXPECT_EQ(error_of([&] { store::check(tmp_ / "plain"); }), EINVAL);
  std::ofstream(tmp_ / "plain" / "FORMAT") << "densefs store\nformat_version=x\n";
  EXPECT_EQ(error_of([&] { store::check(tmp_ / "plain"); }), EINVAL);
}

TEST_F(store_test, check_and_open_refuse_a_newer_format) {
  const std::string newer = std::to_string(k_format_version + 1);
  std::ofstream(dir() / "FORMAT", std::ios::trunc)
      << "densefs store\nformat_version=" + newer + "\nuuid=x\n";
  std::string message;
  EXPECT_EQ(error_of([&] { store::check(dir()); }, &message), EPROTONOSUPPORT);
  EXPECT_NE(message.find("format version " + newer), std::string::npos) << message;
  EXPECT_NE(message.find("up to " + std::to_string(k_format_version)), std::string::npos)
      << message;
  EXPECT_EQ(error_of([&] { store::open(dir()); }), EPROTONOSUPPORT);
}

// Writes one small file (inode, dirent, extent, chunk) and returns the
// first byte of each value as stored: the record version, which names the
// encoding.
std::string record_versions_after_a_write(const fs::path& dir) {
  {
    auto s = store::open(dir);
    const prepared_chunk c = s->prepare_chunk("small file\n");
    transaction t;
    t.put_inode(make_inode(2, S_IFREG | 0644, 11));
    t.put_dirent(k_root_ino, "f", {2, S_IFREG});
    t.put_extent(2, 0, {c.hash, 0, 11});
    t.ref_chunk(c);
    s->commit(t);
    EXPECT_EQ(*s->read_chunk(s->extents(2, 0, 11).at(0).second.hash), "small file\n");
    EXPECT_EQ(s->get_dirent(k_root_ino, "f")->type, static_cast<std::uint32_t>(S_IFREG));
    EXPECT_EQ(s->get_inode(2)->size, 11u);
  }
  test::raw_db db(dir);
  std::string out;
  for (const auto& [cf, key] : {std::pair{k_cf_inodes, inode_key(2)},
                                {k_cf_dirents, dirent_key(k_root_ino, "f")},
                                {k_cf_extents, extent_key(2, 0)}}) {
    const std::string v = db.get(cf, key);
    out += test::to_hex(v.substr(0, 1));
  }
  const std::string e = db.get(k_cf_extents, extent_key(2, 0));
  const std::string chunk = db.get(k_cf_chunks, e.substr(1, chunk_hash::k_size));
  return out + test::to_hex(chunk.substr(0, 1));
}

TEST_F(store_test, a_new_store_writes_compact_records) {
  // inode 3, dirent 2, extent 2, chunk 2 (docs/format.md, store format 3).
  EXPECT_EQ(record_versions_after_a_write(dir()), "03020202");
}

TEST_F(store_test, metadata_tables_are_zstd_compressed) {
  record_versions_after_a_write(dir());  // closed: its memtables are tables now
  test::raw_db db(dir());
  for (const char* cf : {k_cf_inodes, k_cf_dirents, k_cf_extents, k_cf_chunks}) {
    rocksdb::TablePropertiesCollection tables;
    ASSERT_TRUE(db.db()->GetPropertiesOfAllTables(db.cf(cf), &tables).ok());
    ASSERT_FALSE(tables.empty()) << cf;
    for (const auto& [file, props] : tables) EXPECT_EQ(props->compression_name, "ZSTD") << file;
  }
}

// A format-2 store (a pack store made by an earlier build) keeps the
// encoding its builds read, also for what this build writes into it.
TEST_F(store_test, a_format_2_store_keeps_writing_fixed_records) {
  {
    test::raw_db db(dir());
    store_settings s = decode_settings(db.get(k_cf_meta, std::string(k_settings_key)));
    s.format_version = k_pack_format_version;
    db.put(k_cf_meta, std::string(k_settings_key), encode_settings(s));
  }
  std::string format = read_file(dir() / "FORMAT");
  format.replace(format.find("format_version=3"), 16, "format_version=2");
  std::ofstream(dir() / "FORMAT", std::ios::trunc) << format;
  EXPECT_EQ(record_versions_after_a_write(dir()), "02010101");
}

TEST_F(store_test, open_refuses_a_newer_format_recorded_in_the_database) {
  {
    test::raw_db db(dir());
    store_settings s = decode_settings(db.get(k_cf_meta, std::string(k_settings_key)));
    s.format_version = k_format_version + 1;
    db.put(k_cf_meta, std::string(k_settings_key), encode_settings(s));
  }
  EXPECT_NO_THROW(store::check(dir()));  // FORMAT still says 3
  std::string message;
  EXPECT_EQ(error_of([&] { open(); }, &message), EPROTONOSUPPORT);
  EXPECT_NE(message.find("format version " + std::to_string(k_format_version + 1)),
            std::string::npos)
      << message;
}

TEST_F(store_test, lock_is_exclusive) {
  const int fd = store::lock(dir());
  ASSERT_GE(fd, 0);
  std::string message;
  EXPECT_EQ(error_of([&] { store::lock(dir()); }, &message), EBUSY);
  EXPECT_NE(message.find("in use"), std::string::npos) << message;
  ::close(fd);
  const int again = store::lock(dir());
  EXPECT_GE(again, 0);
  ::close(again);
  struct stat st {};
  ASSERT_EQ(::stat((dir() / "LOCK.densefs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// The lock file names its holder, so that a mount can tell a daemon that is
// exiting from one that is mounted (fs/mount.cpp, lock_store).
TEST_F(store_test, lock_file_records_its_holder) {
  EXPECT_FALSE(store::read_lock_holder(dir()));  // never locked
  const int fd = store::lock(dir());
  ASSERT_GE(fd, 0);
  auto holder = store::read_lock_holder(dir());
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->pid, ::getpid());
  EXPECT_TRUE(holder->mountpoint.empty());  // a tool, not a mount

  store::record_lock_holder(fd, {4242, "/mnt/with space", false, {}});
  holder = store::read_lock_holder(dir());
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->pid, 4242);
  EXPECT_EQ(holder->mountpoint, "/mnt/with space");
  EXPECT_FALSE(holder->exiting);
  store::record_lock_holder(fd, {4242, "/mnt/with space", true, {}});
  EXPECT_TRUE(store::read_lock_holder(dir())->exiting);
  ::close(fd);

  // The next holder's record replaces it whole.
  const int again = store::lock(dir());
  holder = store::read_lock_holder(dir());
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->pid, ::getpid());
  EXPECT_TRUE(holder->mountpoint.empty());
  EXPECT_FALSE(holder->exiting);
  ::close(again);
}

// ---- transactions

// What fs/deferred_names.h relies on: changes put off go first, and the
// commit's own changes to the same keys win over them.
TEST_F(store_test, a_prepended_transaction_comes_first_and_later_puts_win) {
  auto s = open();
  const std::uint64_t ino = s->allocate_ino();
  transaction earlier;
  earlier.put_inode(make_inode(ino, S_IFREG | 0644));
  earlier.put_dirent(k_root_ino, "put-off", {ino, S_IFREG});
  earlier.delete_dirent(k_root_ino, "named-again");
  earlier.made_inode(ino, false);
  transaction t;
  t.put_inode(make_inode(ino, S_IFREG | 0600, 5));
  t.put_dirent(k_root_ino, "named-again", {ino, S_IFREG});
  t.prepend(std::move(earlier));
  s->commit(t);
  EXPECT_EQ(s->get_inode(ino)->mode, static_cast<std::uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(s->get_inode(ino)->size, 5u);
  EXPECT_EQ(s->get_dirent(k_root_ino, "put-off")->ino, ino);
  EXPECT_EQ(s->get_dirent(k_root_ino, "named-again")->ino, ino);
  // Chunk references keep their order: prepend refuses them.
  transaction with_chunk;
  with_chunk.ref_chunk(s->prepare_chunk("bytes"));
  transaction other;
  EXPECT_THROW(other.prepend(std::move(with_chunk)), std::logic_error);
}

TEST_F(store_test, transaction_changes_are_visible_after_commit_not_before) {
  auto s = open();
  const std::uint64_t ino = s->allocate_ino();
  transaction t;
  EXPECT_TRUE(t.empty());
  t.put_inode(make_inode(ino, S_IFREG | 0600, 10));
  t.put_dirent(k_root_ino, "b", {ino, S_IFREG});
  t.put_dirent(k_root_ino, "a", {ino, S_IFREG});
  t.put_dirent(k_root_ino, std::string("c\0\xff", 3), {ino, S_IFREG});
  t.put_xattr(ino, "user.one", "1");
  t.put_xattr(ino, "user.two", std::string("\0bin", 4));
  t.add_orphan(ino);
  EXPECT_FALSE(t.empty());

  EXPECT_FALSE(s->get_inode(ino));
  EXPECT_FALSE(s->get_dirent(k_root_ino, "a"));
  EXPECT_TRUE(s->dir_is_empty(k_root_ino));
  EXPECT_TRUE(s->list_xattrs(ino).empty());
  EXPECT_TRUE(s->orphans().empty());

  s->commit(t, true);
  EXPECT_EQ(s->get_inode(ino), make_inode(ino, S_IFREG | 0600, 10));
  EXPECT_EQ(s->get_dirent(k_root_ino, "a"), (dirent_record{ino, S_IFREG}));
  EXPECT_FALSE(s->dir_is_empty(k_root_ino));
  EXPECT_TRUE(s->dir_is_empty(ino));

  std::vector<std::string> names;
  s->list_dir(k_root_ino, std::nullopt, [&](std::string_view n, const dirent_record& d) {
    EXPECT_EQ(d.ino, ino);
    names.emplace_back(n);
    return true;
  });
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", std::string("c\0\xff", 3)}));
  names.clear();
  s->list_dir(k_root_ino, std::string_view("a"), [&](std::string_view n, const dirent_record&) {
    names.emplace_back(n);
    return true;
  });
  EXPECT_EQ(names, (std::vector<std::string>{"b", std::string("c\0\xff", 3)}));
  names.clear();
  s->list_dir(k_root_ino, std::nullopt, [&](std::string_view n, const dirent_record&) {
    names.emplace_back(n);
    return false;  // stop after the first
  });
  EXPECT_EQ(names, (std::vector<std::string>{"a"}));

  EXPECT_EQ(s->get_xattr(ino, "user.one"), "1");
  EXPECT_EQ(s->get_xattr(ino, "user.two"), std::string("\0bin", 4));
  EXPECT_FALSE(s->get_xattr(ino, "user.three"));
  EXPECT_EQ(s->list_xattrs(ino), (std::vector<std::string>{"user.one", "user.two"}));
  EXPECT_TRUE(s->list_xattrs(k_root_ino).empty());
  EXPECT_EQ(s->orphans(), std::vector<std::uint64_t>{ino});

  transaction d;
  d.delete_dirent(k_root_ino, "a");
  d.delete_xattr(ino, "user.one");
  d.remove_orphan(ino);
  d.delete_inode(ino);
  s->commit(d);
  EXPECT_FALSE(s->get_dirent(k_root_ino, "a"));
  EXPECT_TRUE(s->get_dirent(k_root_ino, "b"));
  EXPECT_FALSE(s->get_inode(ino));
  EXPECT_EQ(s->list_xattrs(ino), std::vector<std::string>{"user.two"});
  EXPECT_TRUE(s->orphans().empty());
}

// readdirplus fetches a batch of inodes in one MultiGet: one result per
// number, in the order asked, missing ones empty.
TEST_F(store_test, get_inodes_answers_in_order_with_gaps_for_missing_inodes) {
  auto s = open();
  std::vector<std::uint64_t> inos;
  transaction t;
  for (int i = 0; i < 5; ++i) {
    inos.push_back(s->allocate_ino());
    t.put_inode(make_inode(inos.back(), S_IFREG | 0644, 100 + i));
  }
  s->commit(t, false);
  const std::uint64_t missing = inos.back() + 1000;
  const std::vector<std::uint64_t> asked = {inos[3], missing, inos[0], inos[4], inos[3]};
  const auto got = s->get_inodes(asked);
  ASSERT_EQ(got.size(), asked.size());
  EXPECT_EQ(got[0], make_inode(inos[3], S_IFREG | 0644, 103));
  EXPECT_FALSE(got[1]);
  EXPECT_EQ(got[2], make_inode(inos[0], S_IFREG | 0644, 100));
  EXPECT_EQ(got[3], make_inode(inos[4], S_IFREG | 0644, 104));
  EXPECT_EQ(got[4], got[0]);
  EXPECT_TRUE(s->get_inodes({}).empty());
}

TEST_F(store_test, later_operations_in_one_transaction_win) {
  auto s = open();
  transaction t;
  t.put_dirent(k_root_ino, "x", {5, S_IFREG});
  t.delete_dirent(k_root_ino, "x");
  t.put_dirent(k_root_ino, "y", {6, S_IFREG});
  t.delete_dirent(k_root_ino, "y");
  t.put_dirent(k_root_ino, "y", {7, S_IFDIR});
  s->commit(t);
  EXPECT_FALSE(s->get_dirent(k_root_ino, "x"));
  EXPECT_EQ(s->get_dirent(k_root_ino, "y"), (dirent_record{7, S_IFDIR}));
}

TEST_F(store_test, directories_do_not_leak_into_each_other) {
  auto s = open();
  transaction t;
  t.put_dirent(1, "in-one", {10, S_IFREG});
  t.put_dirent(2, "in-two", {11, S_IFREG});
  t.put_dirent(256, "in-256", {12, S_IFREG});
  t.put_dirent(~0ull, "in-max", {13, S_IFREG});
  s->commit(t);
  const auto list = [&](std::uint64_t dir) {
    std::vector<std::string> names;
    s->list_dir(dir, std::nullopt, [&](std::string_view n, const dirent_record&) {
      names.emplace_back(n);
      return true;
    });
    return names;
  };
  EXPECT_EQ(list(1), std::vector<std::string>{"in-one"});
  EXPECT_EQ(list(2), std::vector<std::string>{"in-two"});
  EXPECT_EQ(list(256), std::vector<std::string>{"in-256"});
  EXPECT_EQ(list(~0ull), std::vector<std::string>{"in-max"});
  EXPECT_TRUE(list(3).empty());
  EXPECT_TRUE(s->dir_is_empty(255));
  EXPECT_FALSE(s->dir_is_empty(~0ull));
}

TEST_F(store_test, extents_query_includes_an_extent_that_starts_before_the_range) {
  auto s = open();
  chunk_hash h;
  const auto ext = [&](std::uint32_t len) { return extent_record{h, 0, len}; };
  transaction t;
  t.put_extent(4, 0, ext(1 << 20));  // neighbour before
  t.put_extent(5, 0, ext(100));
  t.put_extent(5, 100, ext(50));
  t.put_extent(5, 1000, ext(10));
  t.put_extent(6, 0, ext(1 << 20));  // neighbour after
  s->commit(t);

  const auto offsets = [&](std::uint64_t ino, std::uint64_t b, std::uint64_t e) {
    std::vector<std::uint64_t> out;
    for (const auto& [off, r] : s->extents(ino, b, e)) out.push_back(off);
    return out;
  };
  using v = std::vector<std::uint64_t>;
  EXPECT_EQ(offsets(5, 120, 130), v{100});
  EXPECT_EQ(offsets(5, 0, 1), v{0});
  EXPECT_EQ(offsets(5, 99, 101), (v{0, 100}));
  EXPECT_EQ(offsets(5, 150, 1000), v{});
  EXPECT_EQ(offsets(5, 150, 1001), v{1000});
  EXPECT_EQ(offsets(5, 50, 2000), (v{0, 100, 1000}));
  EXPECT_EQ(offsets(5, 1009, 1010), v{1000});
  EXPECT_EQ(offsets(5, 1010, 5000), v{});
  EXPECT_EQ(offsets(5, 0, ~0ull), (v{0, 100, 1000}));
  EXPECT_EQ(offsets(5, 10, 10), v{});
  EXPECT_EQ(offsets(6, 10, 20), v{0});
  EXPECT_EQ(offsets(7, 0, 100), v{});
  const auto e = s->extents(5, 120, 130);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].second.length, 50u);
}

// ---- chunks

TEST_F(store_test, identical_chunks_are_stored_once) {
  const std::string data = text_bytes(300000);
  chunk_hash hash;
  {
    auto s = open();
    const prepared_chunk a = s->prepare_chunk(data);
    const prepared_chunk b = s->prepare_chunk(data);
    ASSERT_TRUE(a.encoded);  // not in the store yet: both encoded
    EXPECT_EQ(a.hash, b.hash);
    EXPECT_EQ(a.hash, sha256_of(data));
    hash = a.hash;
    transaction t;
    t.ref_chunk(a);
    t.ref_chunk(b);
    s->commit(t);
    const auto rec = s->get_chunk(hash);
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->refcount, 2u);
    EXPECT_EQ(rec->plain_size, data.size());
    EXPECT_EQ(rec->codec, codec::codec_id::zstd);
    EXPECT_LT(rec->stored_size, data.size() / 4);

    // Now it exists: prepare skips encoding and a reference only counts.
    const prepared_chunk c = s->prepare_chunk(data);
    EXPECT_FALSE(c.encoded);
    EXPECT_TRUE(s->prepare_chunk(data, true).encoded);
    transaction t2;
    t2.ref_chunk(c);
    s->commit(t2);
    EXPECT_EQ(s->get_chunk(hash)->refcount, 3u);
    EXPECT_EQ(*s->read_chunk(hash), data);
  }
  test::raw_db db(dir());
  EXPECT_EQ(db.count(k_cf_chunks), 1u);
  EXPECT_EQ(db.count(k_cf_payloads), 1u);
}

// get_chunks reads several records at once, in any order and with
// repeats, and says which are stored; records_still_current tells a caller
// that keeps them whether a commit may have changed one since. A prepared
// chunk named but not encoded is what a commit takes as "stored already".
TEST_F(store_test, chunk_records_read_together_know_when_a_commit_changed_them) {
  auto s = open();
  const std::string stored = text_bytes(5000);
  const std::string absent = text_bytes(7000);
  prepared_chunk named = s->name_chunk(stored);
  EXPECT_EQ(named.hash, sha256_of(stored));
  EXPECT_FALSE(named.encoded);
  s->encode_into(named, stored, s->policy().for_type(codec::file_type::other));
  ASSERT_TRUE(named.encoded);
  transaction t;
  t.ref_chunk(named);
  s->commit(t);

  const chunk_hash hashes[] = {sha256_of(absent), named.hash, sha256_of(absent)};
  const chunk_records read = s->get_chunks(hashes);
  EXPECT_EQ(read.of.size(), 2u);
  ASSERT_TRUE(read.find(named.hash));
  ASSERT_TRUE(*read.find(named.hash));
  EXPECT_EQ(**read.find(named.hash), *s->get_chunk(named.hash));
  ASSERT_TRUE(read.find(sha256_of(absent)));
  EXPECT_FALSE(*read.find(sha256_of(absent)));
  EXPECT_EQ(read.find(sha256_of("not asked for")), nullptr);
  EXPECT_TRUE(s->get_chunks({}).of.empty());
  EXPECT_FALSE(s->reads_are_round_trips());  // RocksDB, in this process

  // A commit that changes no chunk record leaves them current; one that
  // changes a refcount does not.
  EXPECT_TRUE(s->records_still_current(read));
  transaction names_only;
  names_only.put_inode(make_inode(77, S_IFREG | 0644));
  s->commit(names_only);
  EXPECT_TRUE(s->records_still_current(read));
  transaction one_more;
  one_more.ref_chunk(s->name_chunk(stored));
  s->commit(one_more);
  EXPECT_FALSE(s->records_still_current(read));
  EXPECT_EQ((*s->get_chunks(hashes).find(named.hash))->refcount, 2u);
}

// A chunk marked damaged (a read found its payload bad) is stored afresh by
// the next commit that brings its content: the mark outlives a reopen, a
// reference without the bytes is refused (chunk_missing: the caller encodes
// and retries), and the fresh payload clears the mark (docs/fsck.md,
// "Healing"). A read-only store keeps its marks in memory.
TEST_F(store_test, a_damaged_chunk_is_stored_afresh_by_the_next_write_of_its_content) {
  const std::string data = text_bytes(300000);
  chunk_hash hash;
  {
    auto s = open();
    const prepared_chunk p = s->prepare_chunk(data);
    hash = p.hash;
    transaction t;
    t.ref_chunk(p);
    s->commit(t);
    s->mark_damaged(hash, "a test");
  }
  {
    store_open_options o;
    o.read_only = true;
    auto s = open(o);
    EXPECT_EQ(s->damaged_chunk_list(), std::vector<chunk_hash>{hash});
    s->mark_damaged(sha256_of("another"), "a test");  // not written
  }
  auto s = open();
  EXPECT_EQ(s->damaged_chunk_list(), std::vector<chunk_hash>{hash});
  const chunk_record before = *s->get_chunk(hash);
  {
    transaction t;
    t.ref_chunk(s->prepare_chunk(data));  // exists: not encoded
    EXPECT_THROW(s->commit(t), chunk_missing);
  }
  transaction t;
  t.ref_chunk(s->prepare_chunk(data, true));
  s->commit(t);
  EXPECT_TRUE(s->damaged_chunk_list().empty());
  const chunk_record after = *s->get_chunk(hash);
  EXPECT_EQ(after.refcount, 2u);
  EXPECT_EQ(after.checksum, before.checksum);  // the same encoding of the same bytes
  EXPECT_EQ(*s->read_chunk(hash), data);
  s.reset();
  EXPECT_TRUE(open()->damaged_chunk_list().empty());
}

TEST_F(store_test, releasing_the_last_reference_deletes_chunk_and_payload) {
  const std::string data = random_bytes(100000, 1);
  chunk_hash hash;
  {
    auto s = open();
    const prepared_chunk p = s->prepare_chunk(data);
    hash = p.hash;
    transaction t;
    t.ref_chunk(p);
    t.ref_chunk(p);
    s->commit(t);
    EXPECT_EQ(*s->read_chunk(hash), data);  // also fills the cache

    transaction u;
    u.unref_chunk(hash);
    s->commit(u);
    EXPECT_EQ(s->get_chunk(hash)->refcount, 1u);

    transaction last;
    last.unref_chunk(hash);
    s->commit(last);
    EXPECT_FALSE(s->get_chunk(hash));
    // Not served from the cache once deleted.
    std::string message;
    EXPECT_EQ(error_of([&] { s->read_chunk(hash); }, &message), EIO);
    EXPECT_NE(message.find(hash.hex()), std::string::npos) << message;
  }
  test::raw_db db(dir());
  EXPECT_EQ(db.count(k_cf_chunks), 0u);
  EXPECT_EQ(db.count(k_cf_payloads), 0u);
}

// The re-encoder reads a queued chunk after looking its record up; a rewrite
// of the file may delete the chunk in between. That is no error: nothing is
// logged (a daemon log line "error" is what users and the mount tests see),
// and the re-encoding says the chunk is gone.
TEST_F(store_test, a_chunk_deleted_before_its_re_encoding_is_skipped_quietly) {
  const std::string data = random_bytes(100000, 2);
  auto s = open();
  const prepared_chunk p = s->prepare_chunk(data);
  transaction t;
  t.ref_chunk(p);
  s->commit(t);
  const std::optional<chunk_record> rec = s->get_chunk(p.hash);
  ASSERT_TRUE(rec);
  EXPECT_EQ(*s->read_chunk_unless_gone(p.hash), data);
  s->drop_caches();  // the read below goes to the store

  transaction last;
  last.unref_chunk(p.hash);
  s->commit(last);
  testing::internal::CaptureStderr();
  EXPECT_EQ(s->read_chunk_unless_gone(p.hash), nullptr);
  codec::codec_options target;
  target.preferred = codec::codec_id::zstd;
  const auto r = s->reencode_chunk(p.hash, *rec, target, true);
  const std::string logged = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(r.gone);
  EXPECT_FALSE(r.smaller);
  EXPECT_EQ(logged, "");
  // read_chunk still calls it an error.
  EXPECT_EQ(error_of([&] { s->read_chunk(p.hash); }), EIO);
}

// A deleted chunk's re-encoding queue entry goes with it; a chunk that was
// never queued leaves no deletion in the queue's key range (a big rm would
// otherwise fill it with tombstones the re-encoder steps over on every look).
TEST_F(store_test, deleting_chunks_deletes_queue_entries_only_where_there_are_some) {
  chunk_hash queued;
  {
    auto s = open();
    std::vector<prepared_chunk> chunks;
    for (std::uint32_t i = 0; i < 20; ++i)
      chunks.push_back(s->prepare_chunk(random_bytes(5000, i)));
    queued = chunks[0].hash;
    transaction t;
    for (const prepared_chunk& p : chunks) t.ref_chunk(p);
    t.queue_recompress(queued, 2);
    s->commit(t);
    EXPECT_TRUE(s->is_queued_for_recompress(queued));
    transaction u;
    for (const prepared_chunk& p : chunks) u.unref_chunk(p.hash);
    s->commit(u);
    EXPECT_FALSE(s->is_queued_for_recompress(queued));
    EXPECT_TRUE(s->pending_recompress(10, std::nullopt).empty());
    // Queued and released in one transaction: the entry still goes.
    const prepared_chunk once = s->prepare_chunk(random_bytes(5000, 99));
    transaction v;
    v.ref_chunk(once);
    s->commit(v);
    transaction w;
    w.queue_recompress(once.hash, 2);
    w.unref_chunk(once.hash);
    s->commit(w);
    EXPECT_FALSE(s->is_queued_for_recompress(once.hash));
  }
  test::raw_db db(dir());
  // The meta column family's deletions, in its memtable (replayed from the
  // log) and in its tables: the two queue entries' and no others.
  std::uint64_t deletes = 0;
  ASSERT_TRUE(
      db.db()->GetIntProperty(db.cf(k_cf_meta), "rocksdb.num-deletes-active-mem-table", &deletes));
  rocksdb::TablePropertiesCollection tables;
  ASSERT_TRUE(db.db()->GetPropertiesOfAllTables(db.cf(k_cf_meta), &tables).ok());
  for (const auto& [name, props] : tables) deletes += props->num_deletions;
  EXPECT_EQ(deletes, 2u);
}

TEST_F(store_test, refcount_underflow_clamps_to_zero) {
  auto s = open();
  const prepared_chunk p = s->prepare_chunk("abc");
  transaction t;
  t.ref_chunk(p);
  s->commit(t);
  transaction u;
  u.unref_chunk(p.hash);
  u.unref_chunk(p.hash);
  u.unref_chunk(p.hash);
  s->commit(u);
  EXPECT_FALSE(s->get_chunk(p.hash));
  transaction v;  // unreferencing a chunk that is gone is logged, not fatal
  v.unref_chunk(p.hash);
  v.put_dirent(k_root_ino, "after", {9, S_IFREG});
  s->commit(v);
  EXPECT_TRUE(s->get_dirent(k_root_ino, "after"));
}

TEST_F(store_test, referencing_a_missing_chunk_without_payload_writes_nothing) {
  auto s = open();
  const prepared_chunk real = s->prepare_chunk(text_bytes(5000));
  prepared_chunk ghost;
  ghost.hash = sha256_of("never stored");
  ghost.plain_size = 12;

  transaction t;
  t.put_inode(make_inode(50, S_IFREG | 0644, 12));
  t.put_dirent(k_root_ino, "f", {50, S_IFREG});
  t.ref_chunk(real);
  t.ref_chunk(ghost);
  try {
    s->commit(t);
    FAIL() << "commit accepted a chunk without payload";
  } catch (const chunk_missing& e) {
    EXPECT_EQ(e.hash, ghost.hash);
    EXPECT_NE(std::string(e.what()).find(ghost.hash.hex()), std::string::npos);
  }
  EXPECT_FALSE(s->get_inode(50));
  EXPECT_FALSE(s->get_dirent(k_root_ino, "f"));
  EXPECT_FALSE(s->get_chunk(real.hash));
  EXPECT_FALSE(s->get_chunk(ghost.hash));

  // The caller supplies the payload and retries with the same transaction.
  t.ref_chunk(s->prepare_chunk("never stored"));
  t.unref_chunk(ghost.hash);  // keep the count at one reference
  s->commit(t);
  EXPECT_TRUE(s->get_inode(50));
  EXPECT_EQ(s->get_chunk(ghost.hash)->refcount, 1u);
  EXPECT_EQ(*s->read_chunk(ghost.hash), "never stored");
}

TEST_F(store_test, read_chunk_returns_exact_bytes_for_raw_and_zstd) {
  auto s = open();
  std::vector<std::string> datas = {random_bytes(k_chunk_size, 2),
                                    text_bytes(k_chunk_size),
                                    random_bytes(1 << 20, 3),
                                    text_bytes(100),
                                    "",
                                    "x",
                                    random_bytes(4095, 4),
                                    random_bytes(4097, 5)};
  transaction t;
  std::vector<prepared_chunk> prepared;
  for (const auto& d : datas) {
    prepared.push_back(s->prepare_chunk(d));
    t.ref_chunk(prepared.back());
  }
  s->commit(t);
  EXPECT_EQ(s->get_chunk(prepared[0].hash)->codec, codec::codec_id::raw);
  EXPECT_EQ(s->get_chunk(prepared[1].hash)->codec, codec::codec_id::zstd);
  EXPECT_EQ(s->get_chunk(prepared[2].hash)->codec, codec::codec_id::raw);
  for (std::size_t i = 0; i < datas.size(); ++i) {
    const auto got = s->read_chunk(prepared[i].hash);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->size(), datas[i].size()) << i;
    EXPECT_TRUE(*got == datas[i]) << "chunk " << i << " differs";
  }
  EXPECT_EQ(s->read_chunk(prepared[1].hash), s->read_chunk(prepared[1].hash));  // cached
  EXPECT_EQ(error_of([&] { s->prepare_chunk(std::string(k_chunk_size + 1, 'a')); }), EINVAL);
}

// Damages the stored payload of `hash` behind the store's back.
void damage_payload(const fs::path& dir, const chunk_hash& hash, bool truncate) {
  test::raw_db db(dir);
  std::string v = db.get_payload(hash);
  if (truncate) {
    v.pop_back();
  } else {
    v[v.size() / 2] = static_cast<char>(v[v.size() / 2] ^ 0x01);
  }
  db.put_payload(hash, v);
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Two files, /d/f (inode 3: chunks a and b) and /g (inode 4: chunk b), and
// the hashes of a and b.
std::pair<chunk_hash, chunk_hash> two_files(store& s, const std::string& a, const std::string& b) {
  const prepared_chunk pa = s.prepare_chunk(a, true);
  const prepared_chunk pb = s.prepare_chunk(b, true);
  transaction t;
  t.put_inode(make_inode(2, S_IFDIR | 0755));
  t.put_dirent(k_root_ino, "d", {2, S_IFDIR});
  t.put_inode(make_inode(3, S_IFREG | 0644, a.size() + b.size()));
  t.put_dirent(2, "f", {3, S_IFREG});
  t.put_inode(make_inode(4, S_IFREG | 0644, b.size()));
  t.put_dirent(k_root_ino, "g", {4, S_IFREG});
  t.put_extent(3, 0, {pa.hash, 0, static_cast<std::uint32_t>(a.size())});
  t.put_extent(3, a.size(), {pb.hash, 0, static_cast<std::uint32_t>(b.size())});
  t.put_extent(4, 0, {pb.hash, 0, static_cast<std::uint32_t>(b.size())});
  t.ref_chunk(pa);
  t.ref_chunk(pb);
  t.ref_chunk(pb);
  s.commit(t);
  return {pa.hash, pb.hash};
}

TEST_F(store_test, scrub_marks_a_damaged_chunk_and_names_every_file_using_it) {
  const std::string a = text_bytes(200000);
  const std::string b = random_bytes(300000, 8);
  chunk_hash ha, hb;
  std::tie(ha, hb) = two_files(*open(), a, b);
  {
    const scrub_report clean = scrub(*open());
    EXPECT_EQ(clean.chunks, 2u);
    EXPECT_EQ(clean.damaged, 0u);
    EXPECT_GT(clean.stored_bytes, b.size());
  }
  damage_payload(dir(), hb, false);
  auto s = open();
  std::uint64_t calls = 0;
  scrub_options o;
  o.progress = [&](std::uint64_t done, std::uint64_t total, std::uint64_t) {
    ++calls;
    EXPECT_LE(done, total);
  };
  const scrub_report r = scrub(*s, o);
  EXPECT_EQ(calls, 2u);
  EXPECT_EQ(r.chunks, 2u);
  EXPECT_EQ(r.damaged, 1u);
  EXPECT_EQ(r.damaged_files, 2u);
  EXPECT_EQ(r.files, (std::vector<std::string>{"/d/f (inode 3)", "/g (inode 4)"}));
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find(hb.hex()), std::string::npos) << r.problems[0];
  EXPECT_EQ(s->damaged_chunk_list(), std::vector<chunk_hash>{hb});
  EXPECT_NE(to_text(r).find("/g (inode 4)"), std::string::npos);

  o.stop = [] { return true; };
  EXPECT_TRUE(scrub(*s, o).stopped);
}

TEST_F(store_test, repair_from_heals_a_damaged_chunk_from_any_file_with_its_content) {
  const std::string a = text_bytes(200000);
  const std::string b = random_bytes(300000, 9);
  chunk_hash ha, hb;
  std::tie(ha, hb) = two_files(*open(), a, b);
  damage_payload(dir(), ha, false);
  damage_payload(dir(), hb, true);
  auto s = open();
  EXPECT_EQ(scrub(*s).damaged, 2u);
  // The source holds b under another name, among other files; not a.
  const fs::path source = tmp_ / "source";
  fs::create_directories(source / "deep" / "er");
  write_file(source / "unrelated", random_bytes(5000, 10));
  write_file(source / "deep" / "er" / "renamed-b", b);
  const repair_from_report r = repair_from(*s, source);
  EXPECT_EQ(r.damaged, 2u);
  EXPECT_EQ(r.healed, 1u);
  EXPECT_EQ(r.files_read, 2u);
  ASSERT_EQ(r.healed_from.size(), 1u);
  EXPECT_NE(r.healed_from[0].find("renamed-b"), std::string::npos) << r.healed_from[0];
  ASSERT_EQ(r.not_found.size(), 1u);
  EXPECT_NE(r.not_found[0].find(ha.hex()), std::string::npos);
  EXPECT_EQ(*s->read_chunk(hb), b);
  EXPECT_EQ(s->get_chunk(hb)->refcount, 2u);  // references untouched
  EXPECT_EQ(s->damaged_chunk_list(), std::vector<chunk_hash>{ha});
  s.reset();
  s = open();
  EXPECT_EQ(*s->read_chunk(hb), b);
  EXPECT_EQ(scrub(*s).damaged, 1u);
}

TEST_F(store_test, read_chunk_detects_a_damaged_payload) {
  const std::string big = text_bytes(1 << 20);      // zstd, in a blob file
  const std::string small = random_bytes(1000, 6);  // raw, inline in the SST
  chunk_hash big_hash, small_hash;
  {
    auto s = open();
    transaction t;
    const auto a = s->prepare_chunk(big);
    const auto b = s->prepare_chunk(small);
    big_hash = a.hash;
    small_hash = b.hash;
    t.ref_chunk(a);
    t.ref_chunk(b);
    s->commit(t);
  }
  damage_payload(dir(), big_hash, false);
  damage_payload(dir(), small_hash, true);
  auto s = open();
  std::string message;
  EXPECT_EQ(error_of([&] { s->read_chunk(big_hash); }, &message), EIO);
  EXPECT_NE(message.find(big_hash.hex()), std::string::npos) << message;
  EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
  EXPECT_EQ(error_of([&] { s->read_chunk(small_hash); }, &message), EIO);
  EXPECT_NE(message.find(small_hash.hex()), std::string::npos) << message;
  // Failures are not cached: a second read fails again.
  EXPECT_EQ(error_of([&] { s->read_chunk(big_hash); }), EIO);
}

// A well-formed Broccoli payload of other content with the same size and a
// matching checksum: every check before the decoder passes, the decoder
// succeeds, and only the chunk's name (SHA-256) can tell.
TEST_F(store_test, read_chunk_refuses_a_valid_broccoli_payload_of_other_content) {
  codec::codec_options broccoli;
  broccoli.preferred = codec::codec_id::broccoli;
  const std::string real = text_bytes(200000);
  std::string other = real;
  other[123456] = static_cast<char>(other[123456] ^ 1);
  chunk_hash hash;
  {
    auto s = open();
    transaction t;
    const auto p = s->prepare_chunk(real, broccoli);
    ASSERT_TRUE(p.encoded);
    ASSERT_EQ(p.encoded->codec, codec::codec_id::broccoli);
    hash = p.hash;
    t.ref_chunk(p);
    s->commit(t);
  }
  {
    test::raw_db db(dir(), true);
    const codec::encoded_chunk forged = codec::encode_chunk(other, broccoli);
    ASSERT_EQ(forged.codec, codec::codec_id::broccoli);
    const std::string key(hash.view());
    chunk_record rec = decode_chunk(db.get(k_cf_chunks, key));
    rec.stored_size = static_cast<std::uint32_t>(forged.bytes.size());
    rec.checksum = stored_checksum(forged.bytes);
    db.put_payload(hash, forged.bytes);
    db.put(k_cf_chunks, key, encode_chunk(rec));
  }
  auto s = open();
  std::string message;
  EXPECT_EQ(error_of([&] { s->read_chunk(hash); }, &message), EIO);
  EXPECT_NE(message.find("does not match the chunk's SHA-256"), std::string::npos) << message;
}

TEST_F(store_test, read_chunk_detects_a_damaged_chunk_record) {
  chunk_hash hash;
  {
    auto s = open();
    const auto p = s->prepare_chunk(text_bytes(50000));
    hash = p.hash;
    transaction t;
    t.ref_chunk(p);
    s->commit(t);
  }
  {
    test::raw_db db(dir());
    chunk_record r = decode_chunk(db.get(k_cf_chunks, std::string(hash.view())));
    r.plain_size += 1;  // decoder must notice the size is wrong
    db.put(k_cf_chunks, std::string(hash.view()), encode_chunk(r));
  }
  auto s = open();
  EXPECT_EQ(error_of([&] { s->read_chunk(hash); }), EIO);
}

TEST_F(store_test, concurrent_reads_of_one_chunk_agree) {
  auto s = open();
  const std::string data = text_bytes(k_chunk_size);
  const auto p = s->prepare_chunk(data);
  transaction t;
  t.ref_chunk(p);
  s->commit(t);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      if (*s->read_chunk(p.hash) == data) ++good;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(good, 8);
}

TEST_F(store_test, concurrent_commits_keep_refcounts_exact) {
  auto s = open();
  const auto p = s->prepare_chunk(text_bytes(100000));
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      for (int i = 0; i < 50; ++i) {
        transaction t;
        t.ref_chunk(p);  // every commit may be the one that creates the chunk
        t.put_dirent(k_root_ino, "t" + std::to_string(th) + "-" + std::to_string(i),
                     {1000u + i, S_IFREG});
        s->commit(t);
        const std::uint64_t ino = s->allocate_ino();
        EXPECT_GT(ino, k_root_ino);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(s->get_chunk(p.hash)->refcount, 200u);
  int entries = 0;
  s->list_dir(k_root_ino, std::nullopt, [&](std::string_view, const dirent_record&) {
    ++entries;
    return true;
  });
  EXPECT_EQ(entries, 200);
}

// ---- inode numbers, persistence, read-only

TEST_F(store_test, inode_numbers_never_repeat_across_reopen) {
  std::set<std::uint64_t> seen;
  std::uint64_t highest_before = 0;
  {
    auto s = open();
    for (int i = 0; i < 2000; ++i) {
      const std::uint64_t ino = s->allocate_ino();
      EXPECT_GT(ino, k_root_ino);
      EXPECT_TRUE(seen.insert(ino).second) << ino;
      highest_before = std::max(highest_before, ino);
    }
  }
  for (int round = 0; round < 3; ++round) {
    auto s = open();
    for (int i = 0; i < 10; ++i) {
      const std::uint64_t ino = s->allocate_ino();
      EXPECT_GT(ino, highest_before);
      EXPECT_TRUE(seen.insert(ino).second) << ino;
    }
  }
}

TEST_F(store_test, allocation_skips_numbers_already_used_by_inodes) {
  {
    test::raw_db db(dir());  // a counter that lags behind an existing inode
    db.put(k_cf_inodes, inode_key(5000), encode_inode(make_inode(5000, S_IFREG)));
  }
  auto s = open();
  EXPECT_GT(s->allocate_ino(), 5000u);
}

TEST_F(store_test, everything_persists_across_close_and_reopen) {
  const std::string data = text_bytes(200000);
  chunk_hash hash;
  {
    auto s = open();
    const auto p = s->prepare_chunk(data);
    hash = p.hash;
    transaction t;
    t.put_inode(make_inode(20, S_IFREG | 0644, data.size()));
    t.put_dirent(k_root_ino, "file", {20, S_IFREG});
    t.put_extent(20, 0, {hash, 0, static_cast<std::uint32_t>(data.size())});
    t.put_xattr(20, "user.k", "v");
    t.add_orphan(20);
    t.ref_chunk(p);
    s->commit(t);  // not synced: a clean close must still keep it
  }
  auto s = open();
  EXPECT_EQ(s->get_inode(20), make_inode(20, S_IFREG | 0644, data.size()));
  EXPECT_EQ(s->get_dirent(k_root_ino, "file"), (dirent_record{20, S_IFREG}));
  ASSERT_EQ(s->extents(20, 0, 1).size(), 1u);
  EXPECT_EQ(s->get_xattr(20, "user.k"), "v");
  EXPECT_EQ(s->orphans(), std::vector<std::uint64_t>{20});
  EXPECT_EQ(*s->read_chunk(hash), data);
  s->sync();
}

TEST_F(store_test, read_only_open_reads_but_refuses_changes) {
  {
    auto s = open();
    transaction t;
    t.put_dirent(k_root_ino, "seen", {30, S_IFREG});
    s->commit(t);
  }
  store_open_options o;
  o.read_only = true;
  auto s = open(o);
  EXPECT_TRUE(s->get_dirent(k_root_ino, "seen"));
  transaction t;
  t.put_dirent(k_root_ino, "nope", {31, S_IFREG});
  EXPECT_EQ(error_of([&] { s->commit(t); }), EROFS);
  EXPECT_EQ(error_of([&] { s->allocate_ino(); }), EROFS);
  // A read-only open works next to a read-write one (`densefs stats` on a
  // mounted store).
  auto rw = open();
  EXPECT_TRUE(rw->get_dirent(k_root_ino, "seen"));
}

TEST_F(store_test, statvfs_describes_the_store_file_system) {
  auto s = open();
  const struct statvfs v = s->statvfs();
  EXPECT_GT(v.f_blocks, 0u);
  EXPECT_GT(v.f_bsize, 0u);
  // What file data may use: the space reserve (at least 40 MiB) is not
  // available, as ext4's root-reserved blocks are not, so that filling
  // what df shows works (fallocate checks the same; xfstests generic/103).
  struct statvfs disk {};
  ASSERT_EQ(::statvfs(dir().c_str(), &disk), 0);
  const std::uint64_t disk_free = static_cast<std::uint64_t>(disk.f_bavail) * disk.f_frsize;
  const std::uint64_t shown = static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
  EXPECT_LE(shown + (40u << 20), std::max<std::uint64_t>(disk_free, 40u << 20) + (1u << 20));
  EXPECT_LE(v.f_bavail, v.f_bfree);
}

// ---- stats

TEST_F(store_test, stats_count_files_bytes_chunks_and_dedup) {
  const std::string text = text_bytes(300000);
  const std::string noise = random_bytes(100000, 7);
  auto s = open();
  const auto a = s->prepare_chunk(text);
  const auto b = s->prepare_chunk(noise);
  transaction t;
  t.put_inode(make_inode(10, S_IFREG | 0644, text.size()));
  t.put_extent(10, 0, {a.hash, 0, static_cast<std::uint32_t>(text.size())});
  t.ref_chunk(a);
  t.put_inode(make_inode(11, S_IFREG | 0644, text.size() + noise.size() + 5000));  // with a hole
  t.put_extent(11, 0, {a.hash, 0, static_cast<std::uint32_t>(text.size())});
  t.ref_chunk(a);
  t.put_extent(11, text.size() + 5000, {b.hash, 0, static_cast<std::uint32_t>(noise.size())});
  t.ref_chunk(b);
  t.put_inode(make_inode(12, S_IFDIR | 0755));
  t.put_inode(make_inode(13, S_IFLNK | 0777, 3));
  s->commit(t, true);

  const store_stats st = s->stats();
  EXPECT_EQ(st.files, 2u);
  EXPECT_EQ(st.directories, 2u);  // root and 12
  EXPECT_EQ(st.logical_bytes, 2 * text.size() + noise.size() + 5000);
  EXPECT_EQ(st.referenced_bytes, 2 * text.size() + noise.size());
  EXPECT_EQ(st.chunks, 2u);
  EXPECT_EQ(st.unique_plain_bytes, text.size() + noise.size());
  EXPECT_EQ(st.dedup_saved_bytes, text.size());
  const std::uint64_t zstd_stored = s->get_chunk(a.hash)->stored_size;
  EXPECT_EQ(st.stored_bytes, zstd_stored + noise.size());
  EXPECT_EQ(st.chunks_by_codec[0], 1u);
  EXPECT_EQ(st.chunks_by_codec[1], 1u);
  EXPECT_EQ(st.stored_by_codec[0], noise.size());
  EXPECT_EQ(st.stored_by_codec[1], zstd_stored);
  EXPECT_GT(st.disk_bytes, 0u);

  const auto j = nlohmann::json::parse(to_json(st));
  EXPECT_EQ(j["files"], 2);
  EXPECT_EQ(j["logical_bytes"], st.logical_bytes);
  EXPECT_EQ(j["stored_bytes"], st.stored_bytes);
  EXPECT_EQ(j["dedup_saved_bytes"], text.size());
  EXPECT_EQ(j["disk_bytes"], st.disk_bytes);
  EXPECT_DOUBLE_EQ(j["ratio"].get<double>(),
                   static_cast<double>(st.stored_bytes) / static_cast<double>(st.logical_bytes));
  EXPECT_EQ(j["codecs"]["raw"]["chunks"], 1);
  EXPECT_EQ(j["codecs"]["zstd"]["stored_bytes"], zstd_stored);
}

TEST(store_json, empty_store_stats_have_zero_ratio) {
  const auto j = nlohmann::json::parse(to_json(store_stats{}));
  EXPECT_EQ(j["ratio"], 0.0);
  EXPECT_EQ(j["codecs"]["raw"]["chunks"], 0);
  EXPECT_EQ(j["codecs"]["zstd"]["chunks"], 0);
}

}  // namespace
}  // namespace densefs::store

namespace densefs::store {
namespace {

// store::load_chunks: batched lookups into the cache, damaged and missing
// chunks left out (the read that needs them reports), duplicates once.
TEST_F(store_test, load_chunks_decodes_a_batch_into_the_cache_and_skips_bad_ones) {
  std::vector<std::string> contents;
  std::vector<chunk_hash> hashes;
  chunk_hash damaged;
  {
    auto s = open();
    transaction t;
    for (int i = 0; i < 20; ++i) {
      contents.push_back(i % 2 ? random_bytes(5000 + i * 1000, 40 + i)
                               : text_bytes(60000 + i * 1000) + std::to_string(i));
      const auto p = s->prepare_chunk(contents.back());
      hashes.push_back(p.hash);
      t.ref_chunk(p);
    }
    s->commit(t);
    damaged = hashes[4];
  }
  damage_payload(dir(), damaged, false);
  auto s = open();
  std::vector<chunk_hash> batch = hashes;
  batch.push_back(hashes[0]);                // twice in one batch
  batch.push_back(sha256_of("not stored"));  // missing: left out, no error
  EXPECT_EQ(s->load_chunks(batch), hashes.size() - 1);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (hashes[i] == damaged) {
      EXPECT_FALSE(s->cached_chunk(damaged));
      EXPECT_EQ(error_of([&] { s->read_chunk(damaged); }), EIO);  // the read still reports
      continue;
    }
    const auto cached = s->cached_chunk(hashes[i]);
    ASSERT_TRUE(cached) << i;
    EXPECT_EQ(*cached, contents[i]) << i;
  }
  // Already cached: nothing to load.
  EXPECT_EQ(s->load_chunks(hashes), 0u);
}

TEST_F(store_test, load_chunks_stops_when_asked_and_readers_load_the_rest) {
  std::vector<std::string> contents;
  std::vector<chunk_hash> hashes;
  auto s = open();
  transaction t;
  for (int i = 0; i < 6; ++i) {
    contents.push_back(text_bytes(30000) + std::to_string(i));
    const auto p = s->prepare_chunk(contents.back());
    hashes.push_back(p.hash);
    t.ref_chunk(p);
  }
  s->commit(t);
  int asked = 0;
  EXPECT_EQ(s->load_chunks(hashes, [&] { return ++asked <= 2; }), 2u);
  EXPECT_TRUE(s->cached_chunk(hashes[1]));
  EXPECT_FALSE(s->cached_chunk(hashes[2]));  // abandoned, not failed:
  for (std::size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(*s->read_chunk(hashes[i]), contents[i]);
}

TEST_F(store_test, concurrent_load_chunks_and_reads_decode_each_shared_chunk_once) {
  std::vector<std::string> contents;
  std::vector<chunk_hash> hashes;
  auto s = open();
  transaction t;
  for (int i = 0; i < 64; ++i) {
    contents.push_back(text_bytes(40000) + std::to_string(i));
    const auto p = s->prepare_chunk(contents.back());
    hashes.push_back(p.hash);
    t.ref_chunk(p);
  }
  s->commit(t);
  std::atomic<std::size_t> loaded{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k) {
    threads.emplace_back([&, k] {
      if (k % 2 == 0) {
        loaded += s->load_chunks(hashes);
      } else {
        for (std::size_t i = 0; i < hashes.size(); ++i) {
          const std::size_t j = (i * 7 + static_cast<std::size_t>(k)) % hashes.size();
          if (*s->read_chunk(hashes[j]) != contents[j]) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(loaded.load(), hashes.size());  // two batches never both decode a chunk
}

// docs/format.md, "Change notices": the text a commit sends a follower.
TEST(change_notice, round_trip_and_spec_text) {
  change_notice c;
  c.inodes = {0x2a, 1, 0x2a};
  c.entries = {{1, "a b"}, {0x2a, std::string("\0\xff", 2)}};
  const std::string text = encode_change_notice(c);
  EXPECT_EQ(text, "1 i1 i2a e1:612062 e2a:00ff");
  const std::optional<change_notice> back = decode_change_notice(text);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->everything);
  EXPECT_EQ(back->inodes, (std::vector<std::uint64_t>{1, 0x2a}));
  EXPECT_EQ(back->entries.size(), 2u);
  EXPECT_EQ(back->entries[1].second, std::string("\0\xff", 2));
  // Too long for one NOTIFY: "everything changed".
  change_notice many;
  for (int i = 0; i < 60; ++i)
    many.entries.emplace_back(1, std::string(250, 'n') + std::to_string(i));
  EXPECT_EQ(encode_change_notice(many), "1 *");
  EXPECT_TRUE(decode_change_notice("1 *")->everything);
  // A follower that mounted asks the writer, which answers (store::begin_session).
  change_notice ask;
  ask.sessions_started = {"0123456789abcdef"};
  ask.sessions_answered = {"fedcba9876543210"};
  EXPECT_EQ(encode_change_notice(ask), "1 s0123456789abcdef afedcba9876543210");
  const auto asked = decode_change_notice("1 s0123456789abcdef afedcba9876543210");
  ASSERT_TRUE(asked);
  EXPECT_EQ(asked->sessions_started, ask.sessions_started);
  EXPECT_EQ(asked->sessions_answered, ask.sessions_answered);
  EXPECT_TRUE(asked->inodes.empty());
}

TEST(change_notice, refuses_what_it_cannot_read) {
  for (const char* bad : {"", "2 i1", "1 x", "1 i", "1 ig", "1 i11111111111111111", "1 e1", "1 e1:",
                          "1 e1:6", "1 e1:zz", "1 e:61", "1  i1", "1 i1 ", "1 s", "1 s0123",
                          "1 s0123456789abcdef0", "1 s0123456789ABCDEF", "1 a0123456789abcdeg"})
    EXPECT_FALSE(decode_change_notice(bad)) << bad;
  EXPECT_FALSE(decode_change_notice("1 e1:" + std::string(512, 'a')));
  EXPECT_TRUE(decode_change_notice("1 e1:" + std::string(510, 'a')));
  EXPECT_TRUE(decode_change_notice("1"));
}

}  // namespace
}  // namespace densefs::store
