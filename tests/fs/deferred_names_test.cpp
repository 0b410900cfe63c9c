// Names put off until the next commit (fs/deferred_names.h), without a
// mount: what it answers for a name before the commit, and what that
// commit stores in a real store (entries, records, new-file rows).
#include "fs/deferred_names.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>

#include "tests/temp_dir.h"

namespace densefs::fs {
namespace {

std::shared_ptr<node> file_node(std::uint64_t ino, mode_t mode) {
  store::inode_record r;
  r.ino = ino;
  r.mode = S_IFREG | mode;
  r.nlink = 1;
  return std::make_shared<node>(r);
}

TEST(deferred_names, answers_for_the_names_it_holds_and_nothing_else) {
  deferred_names d;
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(d.find(1, "a"));
  d.put_entry(1, "a", {7, S_IFREG});
  ASSERT_TRUE(d.find(1, "a"));
  ASSERT_TRUE(*d.find(1, "a"));
  EXPECT_EQ((*d.find(1, "a"))->ino, 7u);
  EXPECT_FALSE(d.find(2, "a"));  // another directory
  EXPECT_FALSE(d.find(1, "ab"));
  EXPECT_TRUE(d.touches(1));
  EXPECT_FALSE(d.touches(2));
  EXPECT_FALSE(d.touches(256));  // 1 with another byte set: not a prefix
  d.remove_entry(1, "a");
  ASSERT_TRUE(d.find(1, "a"));  // put off: its removal
  EXPECT_FALSE(*d.find(1, "a"));
  EXPECT_FALSE(d.empty());
  EXPECT_FALSE(d.holds(7));
}

// A directory whose mkdir is put off: made (the store does not have it
// yet) until the commit; one only changed is held, not made.
TEST(deferred_names, knows_which_inodes_the_next_commit_makes) {
  deferred_names d;
  const auto dir = file_node(9, 0755);
  dir->record.mode = S_IFDIR | 0755;
  const auto parent = file_node(1, 0755);
  parent->record.mode = S_IFDIR | 0755;
  d.store_record(dir, true);
  d.store_record(parent);
  EXPECT_TRUE(d.made(9));
  EXPECT_FALSE(d.made(1));
  EXPECT_TRUE(d.holds(1));
  d.store_record(dir);  // changed again (a utimes): still made
  EXPECT_TRUE(d.made(9));
  EXPECT_EQ(d.committed().size(), 2u);
  EXPECT_FALSE(d.made(9));
  EXPECT_FALSE(d.holds(9));
}

TEST(deferred_names, the_commit_stores_entries_records_and_rows_of_files_still_new) {
  test::temp_dir tmp;
  store::store::create(tmp / "s");
  auto s = store::store::open(tmp / "s");
  const auto created = file_node(s->allocate_ino(), 0600);
  created->new_file = true;
  const auto ended = file_node(s->allocate_ino(), 0644);  // closed with nothing staged
  deferred_names d;
  // Created as "tmp", then renamed to "final" before any commit.
  d.put_entry(store::k_root_ino, "tmp", {created->ino, S_IFREG});
  d.store_record(created, true);
  d.name_new_file(created->ino, store::k_root_ino, "tmp");
  d.remove_entry(store::k_root_ino, "tmp");
  d.put_entry(store::k_root_ino, "final", {created->ino, S_IFREG});
  d.name_new_file(created->ino, store::k_root_ino, "final");
  d.put_entry(store::k_root_ino, "ended", {ended->ino, S_IFREG});
  d.store_record(ended, true);
  d.name_new_file(ended->ino, store::k_root_ino, "ended");
  created->record.mode = S_IFREG | 0640;  // a chmod after it was put off
  EXPECT_TRUE(d.holds(created->ino));

  store::transaction txn;
  d.add_to(txn, [](const node& n) { return n.record; });
  s->commit(txn);
  EXPECT_FALSE(s->get_dirent(store::k_root_ino, "tmp"));
  EXPECT_EQ(s->get_dirent(store::k_root_ino, "final")->ino, created->ino);
  EXPECT_EQ(s->get_inode(created->ino)->mode, static_cast<std::uint32_t>(S_IFREG | 0640));
  EXPECT_EQ(s->get_dirent(store::k_root_ino, "ended")->ino, ended->ino);
  const auto rows = s->new_files();
  ASSERT_EQ(rows.size(), 1u);  // not the file that stopped being new
  EXPECT_EQ(rows[0].ino, created->ino);
  EXPECT_EQ(rows[0].name, "final");

  // Kept until the commit is known to have landed; then forgotten.
  EXPECT_FALSE(d.empty());
  EXPECT_EQ(d.committed().size(), 2u);
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(d.holds(created->ino));
  EXPECT_FALSE(d.find(store::k_root_ino, "final"));
}

}  // namespace
}  // namespace densefs::fs
