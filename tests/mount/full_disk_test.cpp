// A store whose disk fills up: the writer gets ENOSPC, what was stored before
// stays intact, and unlink and rename still work (they are what a user does
// to get out of it). The store lives on a small tmpfs of its own.
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

class full_disk : public mount_test {
 protected:
  void SetUp() override {
    mount_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs under the store";
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

}  // namespace
}  // namespace densefs::test
