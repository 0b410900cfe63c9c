// Directory listings through the kernel's caches (docs/mounting.md, "Kernel
// caches"): readdir offsets are name cookies, so a listing read while the
// directory changes lists every entry that stays exactly once and telldir
// positions stay valid; what the kernel caches (listings, st_blocks) is
// dropped when densefs changes it behind the kernel's back. Each test runs
// on the default mount (day-long caches) and with all timeouts 0.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

class readdir_cache : public mount_test, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string mount_options() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(mounts, readdir_cache,
                         ::testing::Values(std::string(),
                                           std::string("entry_timeout=0,attr_timeout=0,"
                                                       "negative_timeout=0")),
                         [](const auto& info) {
                           return info.param.empty() ? std::string("default")
                                                     : std::string("timeouts0");
                         });

void touch(const stdfs::path& p) {
  const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << p << ": " << strerror(errno);
  ::close(fd);
}

// Names read from `d` until the end or `limit` names (. and .. left out).
std::vector<std::string> read_names(DIR* d, std::size_t limit = SIZE_MAX) {
  std::vector<std::string> out;
  errno = 0;
  while (out.size() < limit) {
    const dirent* e = ::readdir(d);
    if (e == nullptr) break;
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  EXPECT_EQ(errno, 0) << strerror(errno);
  return out;
}

std::map<std::string, ino_t> dir_inos(const stdfs::path& p) {
  std::map<std::string, ino_t> out;
  DIR* d = ::opendir(p.c_str());
  EXPECT_NE(d, nullptr) << p << ": " << strerror(errno);
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) out[e->d_name] = e->d_ino;
  ::closedir(d);
  return out;
}

ino_t ino_of(const stdfs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p << ": " << strerror(errno);
  return st.st_ino;
}

// Half-way through a listing, entries not yet read are removed and new ones
// are added: every entry that stays is listed exactly once (POSIX leaves
// the removed and added ones open). Offsets that were positions in a list
// would skip or repeat entries here.
TEST_P(readdir_cache, entries_that_stay_are_listed_once_while_the_directory_changes) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  std::set<std::string> keep;
  for (int i = 0; i < 1500; ++i) {
    const std::string name = "keep-" + std::to_string(i);
    touch(path("d/" + name));
    keep.insert(name);
  }
  for (int i = 0; i < 500; ++i) touch(path("d/gone-" + std::to_string(i)));
  // Cache the listing in the kernel first: the change must drop it.
  EXPECT_EQ(dir_inos(path("d")).size(), 2000u + 2);

  DIR* d = ::opendir(path("d").c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::string> seen = read_names(d, 300);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(::unlink(path("d/gone-" + std::to_string(i)).c_str()), 0);
  for (int i = 0; i < 500; ++i) touch(path("d/new-" + std::to_string(i)));
  for (auto& n : read_names(d)) seen.push_back(std::move(n));
  ::closedir(d);

  std::map<std::string, int> count;
  for (const auto& n : seen) ++count[n];
  for (const auto& [name, times] : count) EXPECT_EQ(times, 1) << name << " listed " << times << "x";
  for (const auto& name : keep) EXPECT_EQ(count.count(name), 1u) << name << " missing";

  // A fresh listing is exact.
  const auto now = dir_inos(path("d"));
  EXPECT_EQ(now.size(), 2000u + 2);
  EXPECT_EQ(now.count("gone-7"), 0u);
  EXPECT_EQ(now.count("new-7"), 1u);
}

// telldir/seekdir: a position taken before a change still leads to the same
// entries (those that stay) after it.
TEST_P(readdir_cache, telldir_position_survives_changes) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  for (int i = 0; i < 400; ++i) touch(path("d/f-" + std::to_string(i)));
  DIR* d = ::opendir(path("d").c_str());
  ASSERT_NE(d, nullptr);
  read_names(d, 150);
  const long pos = ::telldir(d);
  const std::vector<std::string> next = read_names(d, 20);
  ASSERT_EQ(next.size(), 20u);
  // Remove every other name that was before the position and add others.
  for (int i = 0; i < 400; i += 2) {
    const std::string name = "f-" + std::to_string(i);
    if (std::find(next.begin(), next.end(), name) == next.end()) {
      ASSERT_EQ(::unlink(path("d/" + name).c_str()), 0);
    }
  }
  for (int i = 0; i < 100; ++i) touch(path("d/g-" + std::to_string(i)));
  ::seekdir(d, pos);
  // The same 20 names follow, possibly with new ones among them.
  std::vector<std::string> again;
  for (const auto& n : read_names(d))
    if (n.rfind("f-", 0) == 0) again.push_back(n);
  ::closedir(d);
  ASSERT_GE(again.size(), next.size());
  again.resize(next.size());
  EXPECT_EQ(again, next);
}

// The kernel caches a directory's listing, ".." included; moving the
// directory to another parent changes its "..", which densefs tells it.
TEST_P(readdir_cache, dotdot_of_a_moved_directory) {
  ASSERT_EQ(::mkdir(path("a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("b").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("a/sub").c_str(), 0755), 0);
  touch(path("a/sub/f"));
  EXPECT_EQ(dir_inos(path("a/sub"))[".."], ino_of(path("a")));
  ASSERT_EQ(::rename(path("a/sub").c_str(), path("b/sub").c_str()), 0);
  const auto moved = dir_inos(path("b/sub"));
  EXPECT_EQ(moved.at(".."), ino_of(path("b")));
  EXPECT_EQ(moved.count("f"), 1u);
  EXPECT_TRUE(dir_inos(path("a")).count("sub") == 0);
}

// st_blocks is the stored size, known only once the chunks commit, after
// write() returned. The kernel caches the attributes it got before that;
// densefs must drop them when the commit lands, even with the file still
// open (no flush).
TEST_P(readdir_cache, st_blocks_catches_up_with_a_background_commit) {
  // Two full 4 MiB slots: the second is handed to the encoder by the last
  // write, so the stat below most likely comes before its commit.
  const std::string data = random_bytes(8 * k_mib, 7);
  const int fd = ::open(path("f").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, data, 0));
  struct stat st {};
  ASSERT_EQ(::stat(path("f").c_str(), &st), 0);  // may well be before the commits
  // The two full slots are encoded without a flush; random bytes are stored
  // raw, so they account for 8 MiB at least.
  EXPECT_TRUE(eventually(
      [&] {
        ::stat(path("f").c_str(), &st);
        return static_cast<std::uint64_t>(st.st_blocks) * 512 >= 8 * k_mib;
      },
      std::chrono::milliseconds(20000)))
      << "st_blocks " << st.st_blocks;
  ::close(fd);
}

}  // namespace
}  // namespace densefs::test
