// The ACL rules of fs/posix_acl.h against the kernel's (fs/posix_acl.c):
// the bytes a setxattr hands densefs are untrusted, so every malformed form
// must come back as "invalid", and the mode arithmetic must match what ext4
// shows (tests/mount/acl_test.sh checks the same on a real mount).
#include "fs/posix_acl.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

namespace densefs::fs::posix_acl {
namespace {

constexpr std::uint32_t k_none = k_undefined_id;

std::string bytes(const acl& a) {
  return serialize(a);
}

// u::rw-, u:1000:r--, g::r-x, g:2000:rwx, m::r--, o::---
const acl k_named = {
    {k_user_obj, 6, k_none}, {k_user, 4, 1000},   {k_group_obj, 5, k_none},
    {k_group, 7, 2000},      {k_mask, 4, k_none}, {k_other, 0, k_none},
};

TEST(posix_acl, round_trips_the_kernel_format) {
  const std::string b = bytes(k_named);
  ASSERT_EQ(b.size(), k_header_bytes + 6 * k_entry_bytes);
  // Little-endian version 2, then the first entry: tag 1, perm 6, id -1.
  EXPECT_EQ(b.substr(0, 4), std::string("\x02\x00\x00\x00", 4));
  EXPECT_EQ(b.substr(4, 8), std::string("\x01\x00\x06\x00\xff\xff\xff\xff", 8));
  const auto parsed = parse(b);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, k_named);
}

TEST(posix_acl, ids_of_unnamed_entries_are_ignored) {
  acl a = from_mode(0640);
  std::string b = bytes(a);
  b[8] = 7;  // the owner entry's id: not -1, and not meaningful
  const auto parsed = parse(b);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, a);
}

TEST(posix_acl, rejects_malformed_bytes) {
  const std::string good = bytes(k_named);
  EXPECT_FALSE(parse(""));
  EXPECT_FALSE(parse(good.substr(0, 3)));                    // short header
  EXPECT_FALSE(parse(good.substr(0, 4)));                    // no entries
  EXPECT_FALSE(parse(good.substr(0, good.size() - 1)));      // a partial entry
  EXPECT_FALSE(parse(good + std::string(3, '\0')));          // trailing bytes
  EXPECT_FALSE(parse(bytes(acl{{k_user_obj, 6, k_none}})));  // too few
  std::string v1 = good;
  v1[0] = 1;
  EXPECT_FALSE(parse(v1));  // version 1
  std::string v2_high = good;
  v2_high[3] = 1;
  EXPECT_FALSE(parse(v2_high));  // version 0x01000002
}

TEST(posix_acl, rejects_what_posix_acl_valid_rejects) {
  const auto invalid = [](acl a) { return !parse(bytes(a)); };
  acl a = k_named;
  a[0].perm = 010;  // beyond rwx
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a[0].tag = 0x40;  // unknown tag
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a[1].id = k_none;  // a named user that is no one
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a.erase(a.begin() + 4);  // named entries without a mask
  EXPECT_TRUE(invalid(a));
  a = k_named;
  std::swap(a[0], a[2]);  // owning group before the owner
  EXPECT_TRUE(invalid(a));
  a = k_named;
  std::swap(a[1], a[3]);  // named group among the users
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a.pop_back();  // no other entry
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a.push_back({k_other, 0, k_none});  // two
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a.insert(a.begin(), {k_user_obj, 7, k_none});  // two owners
  EXPECT_TRUE(invalid(a));
  a = k_named;
  a.insert(a.begin() + 5, {k_mask, 7, k_none});  // two masks
  EXPECT_TRUE(invalid(a));
  // Valid: a mask without named entries; no mask without them.
  EXPECT_TRUE(parse(bytes({{k_user_obj, 7, k_none},
                           {k_group_obj, 5, k_none},
                           {k_mask, 7, k_none},
                           {k_other, 0, k_none}})));
  EXPECT_TRUE(parse(bytes(from_mode(0751))));
}

TEST(posix_acl, bounds_the_entry_count) {
  acl a = {{k_user_obj, 7, k_none}};
  for (std::uint32_t id = 0; a.size() < k_max_entries - 2; ++id) a.push_back({k_user, 4, id});
  a.push_back({k_group_obj, 5, k_none});
  a.push_back({k_mask, 7, k_none});
  a.push_back({k_other, 0, k_none});
  ASSERT_EQ(a.size(), k_max_entries + 1);
  EXPECT_FALSE(parse(bytes(a)));
  a.erase(a.begin() + 1);
  EXPECT_TRUE(parse(bytes(a)));
  // What the kernel reads back for its permission checks is one page.
  EXPECT_LE(bytes(a).size(), 4096u);
}

TEST(posix_acl, mode_from_acl) {
  mode_t mode = S_IFREG | S_ISGID | 0777;
  EXPECT_FALSE(equivalent_mode(k_named, mode));
  EXPECT_EQ(mode, S_IFREG | S_ISGID | 0640);  // group bits are the mask
  mode = S_IFDIR | 0;
  EXPECT_TRUE(equivalent_mode(from_mode(0751), mode));
  EXPECT_EQ(mode, S_IFDIR | 0751);
  // A mask alone keeps the ACL: it hides the owning group's own bits.
  mode = S_IFREG;
  EXPECT_FALSE(equivalent_mode({{k_user_obj, 6, k_none},
                                {k_group_obj, 6, k_none},
                                {k_mask, 7, k_none},
                                {k_other, 0, k_none}},
                               mode));
  EXPECT_EQ(mode, S_IFREG | 0670);
}

TEST(posix_acl, chmod_rewrites_owner_mask_and_other) {
  acl a = k_named;
  apply_chmod(a, S_IFREG | 0705);
  EXPECT_EQ(a[0].perm, 7);  // owner
  EXPECT_EQ(a[1].perm, 4);  // named user untouched
  EXPECT_EQ(a[2].perm, 5);  // owning group untouched: the mask takes the bits
  EXPECT_EQ(a[3].perm, 7);  // named group untouched
  EXPECT_EQ(a[4].perm, 0);  // mask
  EXPECT_EQ(a[5].perm, 5);  // other
  acl plain = from_mode(0600);
  apply_chmod(plain, 0754);
  EXPECT_EQ(plain, from_mode(0754));  // no mask: the owning group takes them
}

TEST(posix_acl, inherit_narrows_mode_and_acl) {
  // A default ACL of u::rwx, u:1000:r--, g::r-x, g:2000:rwx, m::rwx, o::r--.
  acl d = k_named;
  d[0].perm = 7;
  d[4].perm = 7;
  d[5].perm = 4;
  mode_t mode = S_IFREG | 0666;  // what open(O_CREAT, 0666) asks for
  const auto a = inherit(d, mode);
  ASSERT_TRUE(a);
  EXPECT_EQ(mode, S_IFREG | 0664);
  EXPECT_EQ((*a)[0].perm, 6);  // owner: rwx & rw-
  EXPECT_EQ((*a)[2].perm, 5);  // owning group keeps its entry
  EXPECT_EQ((*a)[4].perm, 6);  // mask: rwx & rw-
  EXPECT_EQ((*a)[5].perm, 4);  // other: r-- & rw-
  EXPECT_EQ((*a)[1], d[1]);    // named entries as they were
  EXPECT_EQ((*a)[3], d[3]);

  // Only owner, group, other: nothing to store, the mode says it all.
  mode = S_IFDIR | S_ISGID | 0777;
  EXPECT_FALSE(inherit(from_mode(0750), mode));
  EXPECT_EQ(mode, S_IFDIR | S_ISGID | 0750);
}

TEST(posix_acl, proc_status_credentials) {
  const std::string status =
      "Name:\tcat\nUmask:\t0022\nUid:\t1000\t1000\t1000\t1000\n"
      "Gid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \n"
      "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
      "CapEff:\t0000000000000000\n";
  const auto c = parse_proc_status(status, 1000);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->cap_fsetid);
  EXPECT_TRUE(c->in_group_or_capable(1000));
  EXPECT_TRUE(c->in_group_or_capable(24));
  EXPECT_FALSE(c->in_group_or_capable(27));

  const auto root = parse_proc_status("Groups:\t\nCapEff:\t000001ffffffffff\n", 0);
  ASSERT_TRUE(root);
  EXPECT_TRUE(root->cap_fsetid);
  EXPECT_TRUE(root->in_group_or_capable(27));
  // CAP_FSETID alone (bit 4).
  const auto fsetid = parse_proc_status("Groups:\nCapEff:\t0000000000000010\n", 5);
  ASSERT_TRUE(fsetid && fsetid->cap_fsetid);

  EXPECT_FALSE(parse_proc_status("CapEff:\t0\n", 0));              // no Groups line
  EXPECT_FALSE(parse_proc_status("Groups:\t1 2\n", 0));            // no CapEff line
  EXPECT_FALSE(parse_proc_status("Groups:\tx\nCapEff:\t0\n", 0));  // malformed
  EXPECT_FALSE(parse_proc_status("Groups:\t1\nCapEff:\tzz\n", 0));
}

}  // namespace
}  // namespace densefs::fs::posix_acl
