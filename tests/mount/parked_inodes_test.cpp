// Inodes the kernel remembers without a node in the daemon (fs/inode_table.h,
// docs/design.md "Inodes in memory"): with the resident limit at 16 nodes,
// nearly every idle inode is parked between requests, and everything a user
// does with the files must work as with every node in memory: reads,
// attributes, renames, hard links, unlinks, writers beside walkers, the
// kernel forgetting them, a remount.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

constexpr int k_dirs = 3;
constexpr int k_files_per_dir = 100;

class parked_inodes : public mount_test {
 protected:
  void SetUp() override {
    // The daemon reads it at mount (and at the remount below).
    ::setenv("DENSEFS_RESIDENT_INODES", "16", 1);
    mount_test::SetUp();
  }
  void TearDown() override {
    mount_test::TearDown();
    ::unsetenv("DENSEFS_RESIDENT_INODES");
  }

  static std::string name_of(int d, int f) {
    return "d" + std::to_string(d) + "/f" + std::to_string(f);
  }
  static std::string content_of(int d, int f) {
    return "file " + std::to_string(d) + "/" + std::to_string(f) + " " +
           std::string(static_cast<std::size_t>(f * 37 % 3000), static_cast<char>('a' + d));
  }
  std::uint64_t parked() { return stats().at("inodes").value("parked", std::uint64_t{0}); }

  // Every file of the tree as made, less `gone`, plus `extra`.
  void expect_tree(const std::map<std::string, std::string>& expected) {
    for (const auto& [name, content] : expected) EXPECT_EQ(read_file(path(name)), content) << name;
  }
};

TEST_F(parked_inodes, a_tree_of_parked_inodes_reads_changes_and_remounts_as_written) {
  std::map<std::string, std::string> expected;
  for (int d = 0; d < k_dirs; ++d) {
    ASSERT_EQ(::mkdir(path("d" + std::to_string(d)).c_str(), 0755), 0) << strerror(errno);
    for (int f = 0; f < k_files_per_dir; ++f) {
      write_file(path(name_of(d, f)), content_of(d, f));
      expected[name_of(d, f)] = content_of(d, f);
    }
  }
  // The kernel remembers all 303 inodes; the daemon keeps a few nodes, but
  // beside other writers (scale_out_suite_test.sh's shared pass), where
  // every node stays: the rest of the test holds either way.
  // The first `densefs stats` lands what is staged (files still staged
  // or new are not parked); the second reads what the first one's request
  // parked once it was done.
  stats();
  const auto after_writes = stats();
  if (mounts_shared()) {
    EXPECT_EQ(after_writes.at("inodes").value("parked", std::uint64_t{1}), 0u)
        << after_writes.dump();
  } else {
    EXPECT_GT(after_writes.at("inodes").value("parked", std::uint64_t{0}), 200u)
        << after_writes.dump();
    EXPECT_LT(after_writes.at("inodes").value("in_memory", std::uint64_t{0}), 100u)
        << after_writes.dump();
  }

  // Reads and attributes of parked inodes.
  expect_tree(expected);
  for (int f = 0; f < k_files_per_dir; f += 7) {
    struct stat st {};
    ASSERT_EQ(::stat(path(name_of(1, f)).c_str(), &st), 0) << strerror(errno);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), content_of(1, f).size());
    EXPECT_EQ(st.st_nlink, 1u);
  }

  // Changes to parked inodes: a chmod, a rename across directories, a
  // hard link, an unlink of the first name, an overwrite.
  ASSERT_EQ(::chmod(path(name_of(0, 3)).c_str(), 0600), 0) << strerror(errno);
  ASSERT_EQ(::rename(path(name_of(0, 4)).c_str(), path("d2/moved").c_str()), 0) << strerror(errno);
  expected["d2/moved"] = expected[name_of(0, 4)];
  expected.erase(name_of(0, 4));
  ASSERT_EQ(::link(path(name_of(1, 5)).c_str(), path("d0/linked").c_str()), 0) << strerror(errno);
  ASSERT_EQ(::unlink(path(name_of(1, 5)).c_str()), 0) << strerror(errno);
  expected["d0/linked"] = expected[name_of(1, 5)];
  expected.erase(name_of(1, 5));
  write_file(path(name_of(2, 6)), "overwritten");
  expected[name_of(2, 6)] = "overwritten";
  struct stat st {};
  ASSERT_EQ(::stat(path(name_of(0, 3)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat(path("d0/linked").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);

  // Walkers beside a writer that renames and rewrites, while nodes come and
  // go (under TSan in CI: the park against requests).
  std::atomic<bool> stop{false};
  std::atomic<int> walk_errors{0};
  std::vector<std::thread> walkers;
  for (int w = 0; w < 2; ++w) {
    walkers.emplace_back([&, w] {
      while (!stop.load()) {
        for (int f = w; f < k_files_per_dir; f += 2) {
          struct stat s {};
          if (::stat(path(name_of(1, f)).c_str(), &s) != 0 && f != 5) ++walk_errors;
          std::ifstream in(path(name_of(0, f == 3 || f == 4 ? 10 : f)));
          if (!in) ++walk_errors;
        }
      }
    });
  }
  for (int round = 0; round < 20; ++round) {
    const std::string a = path("d2/f50").string();
    const std::string b = path("d2/renamed").string();
    ASSERT_EQ(::rename(a.c_str(), b.c_str()), 0) << strerror(errno);
    ASSERT_EQ(::rename(b.c_str(), a.c_str()), 0) << strerror(errno);
    write_file(path("d2/rewritten"), "round " + std::to_string(round));
  }
  stop = true;
  for (auto& t : walkers) t.join();
  EXPECT_EQ(walk_errors.load(), 0);
  expected["d2/rewritten"] = "round 19";
  expect_tree(expected);

  // The kernel forgets what it no longer caches: parked counts go with it.
  const std::uint64_t before_forget = parked();
  if (std::ofstream drop("/proc/sys/vm/drop_caches"); drop && (drop << "2\n")) {
    drop.close();
    std::uint64_t now_parked = before_forget;
    for (int i = 0; i < 50 && now_parked * 2 > before_forget; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now_parked = parked();
    }
    EXPECT_LE(now_parked * 2, before_forget)
        << "parked before the kernel forgot: " << before_forget;
    expect_tree(expected);  // looked up again: loaded from the store
  }

  remount();
  expect_tree(expected);
  ASSERT_EQ(::stat(path(name_of(0, 3)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

}  // namespace
}  // namespace densefs::test
