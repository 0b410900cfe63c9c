// Stores written by earlier builds must keep opening and reading correctly.
// tests/store/golden/store-v1.tar.gz is a format-1 store made by
// DISABLED_make_golden_store_v1 below (run it with
// --gtest_also_run_disabled_tests --gtest_filter='*make_golden*' and
// DENSEFS_GOLDEN_OUT=DIR, then
// `tar -czf store-v1.tar.gz -C DIR --exclude='LOG*' store`).
// Never regenerate it to make this test pass: a failure here means stores
// on users' disks would stop mounting.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

#include "store/store.h"
#include "tests/store/raw_db.h"
#include "tests/temp_dir.h"
#include "tests/test_env.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

// The content the golden store holds; the generator and the reader share it.
std::string golden_text() {
  std::string out;
  for (int i = 0; out.size() < (1u << 20); ++i) out += "golden line " + std::to_string(i) + "\n";
  out.resize(1u << 20);
  return out;
}
const std::string k_hello = "hello, densefs\n";

TEST(store_golden, DISABLED_make_golden_store_v1) {
  const char* out = std::getenv("DENSEFS_GOLDEN_OUT");
  ASSERT_NE(out, nullptr) << "set DENSEFS_GOLDEN_OUT";
  const fs::path dir = fs::path(out) / "store";
  store::create(dir, codec::parse_policy("zstd:level=3"));
  auto s = store::open(dir);
  const std::string text = golden_text();
  const prepared_chunk hello = s->prepare_chunk(k_hello);
  const prepared_chunk big = s->prepare_chunk(text);
  transaction t;
  inode_record f;
  f.ino = s->allocate_ino();  // 2
  f.mode = S_IFREG | 0644;
  f.nlink = 1;
  f.size = k_hello.size();
  f.mtime = {1700000000, 123456789};
  t.put_inode(f);
  t.put_dirent(k_root_ino, "hello.txt", {f.ino, S_IFREG});
  t.put_extent(f.ino, 0, {hello.hash, 0, static_cast<std::uint32_t>(k_hello.size())});
  t.ref_chunk(hello);

  inode_record b = f;
  b.ino = s->allocate_ino();  // 3: the big chunk twice, with a hole between
  b.size = 3 * text.size();
  t.put_inode(b);
  t.put_dirent(k_root_ino, "big.bin", {b.ino, S_IFREG});
  t.put_extent(b.ino, 0, {big.hash, 0, static_cast<std::uint32_t>(text.size())});
  t.put_extent(b.ino, 2 * text.size(), {big.hash, 0, static_cast<std::uint32_t>(text.size())});
  t.ref_chunk(big);
  t.ref_chunk(big);

  inode_record l;
  l.ino = s->allocate_ino();  // 4
  l.mode = S_IFLNK | 0777;
  l.nlink = 1;
  l.symlink_target = "hello.txt";
  l.size = l.symlink_target.size();
  t.put_inode(l);
  t.put_dirent(k_root_ino, "link", {l.ino, S_IFLNK});

  inode_record d;
  d.ino = s->allocate_ino();  // 5
  d.mode = S_IFDIR | 0750;
  d.nlink = 2;
  d.parent = k_root_ino;
  t.put_inode(d);
  t.put_dirent(k_root_ino, "sub", {d.ino, S_IFDIR});
  t.put_xattr(d.ino, "user.note", "kept");
  t.add_orphan(42);
  s->commit(t, true);
  s.reset();
  // Flushed, so the archive holds SST and blob files, not just a WAL.
  test::raw_db(dir, true).flush_all();
}

TEST(store_golden, format_1_store_still_opens_and_reads) {
  test::temp_dir tmp;
  const fs::path archive =
      fs::path(test::source_dir()) / "tests" / "store" / "golden" / "store-v1.tar.gz";
  ASSERT_TRUE(fs::exists(archive)) << archive;
  const std::string cmd = "tar -xzf '" + archive.string() + "' -C '" + tmp.path().string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const fs::path dir = tmp / "store";

  ASSERT_NO_THROW(store::check(dir));
  auto s = store::open(dir);
  EXPECT_EQ(s->settings().format_version, 1u);

  auto hello = s->get_dirent(k_root_ino, "hello.txt");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->ino, 2u);
  auto hi = s->get_inode(2);
  ASSERT_TRUE(hi);
  EXPECT_EQ(hi->size, k_hello.size());
  EXPECT_EQ(hi->mtime, (timestamp{1700000000, 123456789}));
  auto he = s->extents(2, 0, hi->size);
  ASSERT_EQ(he.size(), 1u);
  EXPECT_EQ(*s->read_chunk(he[0].second.hash), k_hello);

  const std::string text = golden_text();
  auto big = s->extents(3, 0, 3 * text.size());
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[1].first, 2 * text.size());
  const auto rec = s->get_chunk(big[0].second.hash);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->refcount, 2u);
  EXPECT_EQ(rec->codec, codec::codec_id::zstd);
  EXPECT_TRUE(*s->read_chunk(big[0].second.hash) == text);

  EXPECT_EQ(s->get_inode(4)->symlink_target, "hello.txt");
  EXPECT_EQ(s->get_inode(5)->mode, static_cast<std::uint32_t>(S_IFDIR | 0750));
  EXPECT_EQ(s->get_xattr(5, "user.note"), "kept");
  EXPECT_EQ(s->orphans(), std::vector<std::uint64_t>{42});
  EXPECT_GT(s->allocate_ino(), 5u);

  // The store accepts new writes on top of the old data.
  transaction t;
  t.put_dirent(k_root_ino, "new", {6, S_IFREG});
  s->commit(t);
  EXPECT_TRUE(s->get_dirent(k_root_ino, "new"));

  // ... in the encoding of its format, so the builds that made it still
  // read what this one wrote (dirent record version 1, docs/format.md).
  s.reset();
  test::raw_db db(dir, true);
  EXPECT_EQ(db.get(k_cf_dirents, dirent_key(k_root_ino, "new")),
            encode_dirent({6, S_IFREG}, record_encoding::fixed));
  EXPECT_EQ(db.get(k_cf_dirents, dirent_key(k_root_ino, "new"))[0], 1);
}

}  // namespace
}  // namespace densefs::store
