// A store whose disk fills up: the writer gets ENOSPC, what was stored before
// stays intact, and unlink and rename still work (they are what a user does
// to get out of it). The store lives on a small tmpfs of its own.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

class full_disk : public mount_test {
 protected:
  void SetUp() override {
    mount_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (geteuid() != 0)
      DENSEFS_SKIP_UNLESS_REQUIRED("needs root to mount a small tmpfs under the store");
    unmount();
    small_ = work_ / "small";
    ASSERT_EQ(::mkdir(small_.c_str(), 0700), 0) << strerror(errno);
    ASSERT_EQ(::mount("tmpfs", small_.c_str(), "tmpfs", 0, "size=96m"), 0) << strerror(errno);
    store_ = small_ / "store";
    const auto mkfs = run_command({densefs_binary(), "mkfs", store_.string()});
    ASSERT_EQ(mkfs.exit_code, 0) << mkfs.err;
    ASSERT_NO_FATAL_FAILURE(mount());
  }
  void TearDown() override {
    if (mounted()) unmount();
    if (!small_.empty()) ::umount2(small_.c_str(), MNT_DETACH);
    mount_test::TearDown();
  }
  stdfs::path small_;
};

TEST_F(full_disk, writer_gets_enospc_and_stored_files_survive) {
  const std::string keep = random_bytes(4 << 20, 7);
  write_file(path("keep"), keep);

  // Incompressible data until the store refuses it. The error may come from
  // a later write() or from close(): both are where POSIX allows it.
  const int fd = ::open(path("fill").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  int error = 0;
  for (int i = 0; i < 200 && error == 0; ++i) {
    const std::string block = random_bytes(1 << 20, 100 + i);
    if (::write(fd, block.data(), block.size()) < 0) error = errno;
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  EXPECT_EQ(error, ENOSPC) << "200 MiB into a 96 MiB disk must fail with ENOSPC";

  EXPECT_TRUE(same_bytes(keep, read_file(path("keep"))));
  EXPECT_EQ(::unlink(path("fill").c_str()), 0) << "unlink on a full store: " << strerror(errno);
  EXPECT_EQ(::rename(path("keep").c_str(), path("kept").c_str()), 0)
      << "rename on a full store: " << strerror(errno);

  remount();
  EXPECT_TRUE(same_bytes(keep, read_file(path("kept"))));
  EXPECT_FALSE(stdfs::exists(path("fill")));
}

// Write-behind: a small file's close() returns before its data is committed,
// so a full disk found by the commit is reported by the file's next fsync
// (or close), and the data stays staged: after space is freed, it is
// stored. Nothing stored before is damaged.
TEST_F(full_disk, an_error_after_close_comes_back_from_the_next_fsync) {
  const std::string keep = random_bytes(3 << 20, 21);
  write_file(path("keep"), keep);
  sync_mount();
  // Fill the store with fsync'd files until it refuses one.
  int error = 0;
  int filled = 0;
  for (; filled < 200 && error == 0; ++filled) {
    const int fd =
        ::open(path("fill" + std::to_string(filled)).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    const std::string block = random_bytes(2 << 20, 2000 + static_cast<std::uint64_t>(filled));
    if (::write(fd, block.data(), block.size()) < 0) error = errno;
    if (::fsync(fd) != 0 && error == 0) error = errno;
    ::close(fd);
  }
  ASSERT_EQ(error, ENOSPC) << "400 MiB into a 96 MiB disk must fail with ENOSPC";
  // A file bigger than the 2 MiB that no longer fit: write() and close()
  // succeed (staged), its commit fails.
  const std::string late = random_bytes(3 << 20, 22);
  int fd = ::open(path("late").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::write(fd, late.data(), late.size()), static_cast<ssize_t>(late.size()));
  EXPECT_EQ(::close(fd), 0) << "close returns before the commit: " << strerror(errno);
  fd = ::open(path("late").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_EQ(::fsync(fd), -1) << "the failed commit must come back from fsync";
  EXPECT_EQ(errno, ENOSPC) << strerror(errno);
  ::close(fd);
  // Still readable: the data stayed staged.
  EXPECT_TRUE(same_bytes(late, read_file(path("late"))));
  for (int f = 0; f < filled; ++f) ::unlink(path("fill" + std::to_string(f)).c_str());
  const auto gc = run_command({densefs_binary(), "gc", store_.string()}, std::chrono::seconds(300));
  EXPECT_EQ(gc.exit_code, 0) << gc.out << gc.err;
  fd = ::open(path("late").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_EQ(::fsync(fd), 0) << "fsync after space was freed: " << strerror(errno);
  ::close(fd);
  remount();
  EXPECT_TRUE(same_bytes(keep, read_file(path("keep"))));
  EXPECT_TRUE(same_bytes(late, read_file(path("late"))));
}

// Getting out of a full disk: deleting files through the mount and a gc
// (deleted payloads stay in blob files until then, docs/gc.md) must make
// writing work again, with everything stored before still exact.
TEST_F(full_disk, space_freed_by_deleting_makes_writes_work_again) {
  const std::string keep = random_bytes(3 << 20, 11);
  write_file(path("keep"), keep);
  int error = 0;
  for (int f = 0; f < 200 && error == 0; ++f) {
    // Many files, so that deleting some frees space that others still pin.
    const std::string name = "fill" + std::to_string(f);
    const int fd = ::open(path(name).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    const std::string block = random_bytes(2 << 20, 1000 + f);
    if (::write(fd, block.data(), block.size()) < 0) error = errno;
    if (::fsync(fd) != 0 && error == 0) error = errno;
    if (::close(fd) != 0 && error == 0) error = errno;
  }
  ASSERT_EQ(error, ENOSPC) << "400 MiB into a 96 MiB disk must fail with ENOSPC";
  for (const auto& e : stdfs::directory_iterator(mnt_)) {
    if (e.path().filename().string().rfind("fill", 0) == 0) {
      EXPECT_EQ(::unlink(e.path().c_str()), 0) << e.path() << ": " << strerror(errno);
    }
  }
  const auto gc = run_command({densefs_binary(), "gc", store_.string()}, std::chrono::seconds(300));
  EXPECT_EQ(gc.exit_code, 0) << gc.out << gc.err;

  // The same amount again fits now, and reads back exact.
  std::vector<std::string> again;
  for (int f = 0; f < 4; ++f) {
    again.push_back(random_bytes(4 << 20, 5000 + f));
    const int fd = ::open(path("again" + std::to_string(f)).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    EXPECT_TRUE(pwrite_all(fd, again.back(), 0));
    EXPECT_EQ(::fsync(fd), 0) << "fsync after space was freed: " << strerror(errno);
    EXPECT_EQ(::close(fd), 0) << "close after space was freed: " << strerror(errno);
  }
  remount();
  EXPECT_TRUE(same_bytes(keep, read_file(path("keep"))));
  for (int f = 0; f < 4; ++f)
    EXPECT_TRUE(same_bytes(again[f], read_file(path("again" + std::to_string(f)))));
  unmount();
  const auto fsck = run_command({densefs_binary(), "fsck", store_.string()});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out << fsck.err;
  mount();
}

// posix_fallocate promises the space: beyond what the store's disk can hold
// (less the store's reserve) it is ENOSPC at once, as on ext4, although
// densefs compresses the data later; nothing changes in the file then.
// Bytes the file already holds in the range cost nothing more.
TEST_F(full_disk, fallocate_beyond_the_free_space_is_enospc) {
  const std::string data = random_bytes(8 << 20, 21);
  write_file(path("data"), data);
  const auto sync = run_command({"sync", path("data").string()});
  ASSERT_EQ(sync.exit_code, 0) << sync.err;

  // What file data may still take: the free space less the reserve of 2%
  // of the disk, at least 40 MiB (store/store_commit.cpp, check_space_for).
  struct statvfs sv {};
  ASSERT_EQ(::statvfs(small_.c_str(), &sv), 0) << strerror(errno);
  const std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize;
  const std::uint64_t reserve = 40 << 20;
  ASSERT_GT(free, reserve + (12 << 20)) << "the small disk is already full";
  const std::uint64_t room = free - reserve;
  const off_t margin = 3 << 20;  // for RocksDB's own writes meanwhile

  // A new file of more than the room: refused, and left empty.
  const int fresh = ::open(path("fresh").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fresh, 0) << strerror(errno);
  const off_t too_much = static_cast<off_t>(room) + margin;
  EXPECT_EQ(::posix_fallocate(fresh, 0, too_much), ENOSPC);
  EXPECT_EQ(::fallocate(fresh, FALLOC_FL_KEEP_SIZE, 0, too_much), -1);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_EQ(::posix_fallocate(fresh, 0, 1ll << 40), ENOSPC) << "a terabyte on a 96 MiB disk";
  struct stat st {};
  ASSERT_EQ(::fstat(fresh, &st), 0);
  EXPECT_EQ(st.st_size, 0) << "a refused fallocate changed the size";
  // Within the room it works and the size grows.
  EXPECT_EQ(::posix_fallocate(fresh, 0, 4 << 20), 0);
  ASSERT_EQ(::fstat(fresh, &st), 0);
  EXPECT_EQ(st.st_size, 4 << 20);
  ::close(fresh);

  // The same length over the existing file needs only what lies beyond
  // its 8 MiB of data, which fits.
  const int fd = ::open(path("data").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << strerror(errno);
  const off_t over_data = static_cast<off_t>(data.size() + room) - margin;
  EXPECT_EQ(::posix_fallocate(fd, 0, over_data), 0)
      << "only the bytes not yet held count; room " << room;
  // But not much more than the room past its end.
  EXPECT_EQ(::posix_fallocate(fd, 0, over_data + 2 * margin + static_cast<off_t>(room)), ENOSPC);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, over_data);
  ::close(fd);

  remount();
  const std::string back = read_file(path("data"));
  EXPECT_EQ(back.size(), static_cast<std::size_t>(over_data));
  EXPECT_TRUE(same_bytes(data, std::string_view(back).substr(0, data.size())));
  EXPECT_EQ(back.find_first_not_of('\0', data.size()), std::string::npos);
}

}  // namespace
}  // namespace densefs::test
