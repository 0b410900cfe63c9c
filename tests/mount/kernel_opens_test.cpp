// Opens the kernel makes without asking the daemon (FUSE's no_open;
// docs/read-path.md, "Opens").
//
// densefs lets the kernel open files alone on a read-only mount only: a warm
// read of a small file is then no request at all. The probe below shows why
// not on a mount where files are written: once a daemon has answered an
// OPEN with ENOSYS, the kernel sends no RELEASE for a file created after
// that either, and densefs needs a new file's last close (its new-file row
// ends there: a crash leaves it whole or absent). If a kernel changes that,
// the probe fails, and no_open can be taken on writable mounts too.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

// ---------------------------------------------------------------- densefs

constexpr int k_files = 20;

class kernel_opens : public mount_test {
 protected:
  std::string mount_options() const override { return options_; }

  std::uint64_t requests(const char* kind) {
    return stats().at("requests").value(kind, std::uint64_t{0});
  }
  static std::string content_of(int i) {
    return "file " + std::to_string(i) + " " +
           std::string(static_cast<std::size_t>(i * 211 % 5000), static_cast<char>('a' + i % 26));
  }
  void read_all() {
    for (int i = 0; i < k_files; ++i)
      EXPECT_EQ(read_file(path("f" + std::to_string(i))), content_of(i)) << i;
  }

  std::string options_;
};

TEST_F(kernel_opens, a_read_only_mount_reads_warm_files_with_no_request_and_stays_read_only) {
  if (mounts_shared())
    GTEST_SKIP() << "-o ro beside -o shared (scale_out_suite_test.sh's shared pass): a follower, "
                    "as in its first pass below";
  for (int i = 0; i < k_files; ++i) write_file(path("f" + std::to_string(i)), content_of(i));
  options_ = "ro";
  remount();
  // A read-only mount of a volume in PostgreSQL is a follower: its OPEN
  // checks the writer's changes (close-to-open), so every open stays a
  // request there (scale_out_suite_test.sh's first pass).
  const bool follower = stats().value("metadata_engine", std::string()) != "rocksdb";
  read_all();  // cold: READs, and one OPEN and one FLUSH answered ENOSYS
  const std::uint64_t reads = requests("read");
  EXPECT_GE(reads, static_cast<std::uint64_t>(k_files));
  if (follower) {
    EXPECT_GE(requests("open"), static_cast<std::uint64_t>(k_files));
  } else {
    EXPECT_LE(requests("open"), 1u);
    EXPECT_LE(requests("flush"), 1u);
    EXPECT_EQ(requests("release"), 0u);
  }
  read_all();  // warm: the kernel's pages, no request
  EXPECT_EQ(requests("read"), reads);
  if (follower) {
    EXPECT_GE(requests("open"), 2u * k_files);
  } else {
    EXPECT_LE(requests("open"), 1u);
    EXPECT_LE(requests("flush"), 1u);
    EXPECT_EQ(requests("release"), 0u);
  }

  // `mount -o remount,rw` changes the kernel's flag only (docs/mounting.md):
  // where no OPEN refuses a writer, the daemon refuses the write itself.
  ASSERT_EQ(::mount(nullptr, mnt_.c_str(), nullptr, MS_REMOUNT, nullptr), 0) << strerror(errno);
  const int fd = ::open(path("f1").c_str(), O_WRONLY);
  if (follower) {
    EXPECT_EQ(fd, -1);
    EXPECT_EQ(errno, EROFS);
  } else {
    ASSERT_GE(fd, 0) << strerror(errno);
    EXPECT_EQ(::pwrite(fd, "x", 1, 0), -1);
    EXPECT_EQ(errno, EROFS);
    EXPECT_EQ(::fsync(fd), 0);  // nothing staged
    ::close(fd);
  }
  EXPECT_EQ(::chmod(path("f1").c_str(), 0600), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::truncate(path("f1").c_str(), 0), -1);
  EXPECT_EQ(errno, EROFS);
  read_all();
}

// -o open_requests asks for it; -o writeback_cache too (after `remount,rw`
// the kernel would keep a write(2) in its cache with no OPEN to refuse it).
TEST_F(kernel_opens, open_requests_and_writeback_cache_keep_an_open_per_read) {
  if (mounts_shared()) GTEST_SKIP() << "-o ro beside -o shared: as above";
  for (int i = 0; i < k_files; ++i) write_file(path("f" + std::to_string(i)), content_of(i));
  std::vector<std::string> setups{"ro,open_requests"};
  // A read-only mount of a volume in PostgreSQL refuses writeback_cache.
  if (stats().value("metadata_engine", std::string()) == "rocksdb")
    setups.emplace_back("ro,writeback_cache");
  for (const std::string& setup : setups) {
    SCOPED_TRACE(setup);
    options_ = setup;
    remount();
    read_all();
    const std::uint64_t opens = requests("open");
    EXPECT_GE(opens, static_cast<std::uint64_t>(k_files));
    read_all();
    EXPECT_EQ(requests("open"), opens + k_files);
  }
}

TEST_F(kernel_opens, a_writable_mount_opens_every_file_with_a_request) {
  for (int i = 0; i < k_files; ++i) write_file(path("f" + std::to_string(i)), content_of(i));
  read_all();
  const std::uint64_t opens = requests("open");
  read_all();
  EXPECT_EQ(requests("open"), opens + k_files);
}

// ------------------------------------------------------------------ probe

// A file system of one directory of empty files, served by this process:
// it answers OPEN and FLUSH with ENOSYS, as densefs does where the kernel
// opens files alone, and counts what the kernel sends.
struct probe_fs {
  std::mutex mutex;
  std::map<std::string, fuse_ino_t> files;  // in the root directory
  fuse_ino_t next_ino = 2;
  std::atomic<int> opens{0};
  std::atomic<int> releases{0};

  static probe_fs& of(fuse_req_t req) { return *static_cast<probe_fs*>(fuse_req_userdata(req)); }

  static struct stat attr_of(fuse_ino_t ino) {
    struct stat st {};
    st.st_ino = ino;
    st.st_mode = ino == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0644;
    st.st_nlink = ino == FUSE_ROOT_ID ? 2 : 1;
    return st;
  }
  static fuse_entry_param entry_of(fuse_ino_t ino) {
    fuse_entry_param e{};
    e.ino = ino;
    e.attr = attr_of(ino);
    e.attr_timeout = e.entry_timeout = 86400;
    return e;
  }

  static void lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    probe_fs& fs = of(req);
    std::lock_guard lock(fs.mutex);
    const auto it = fs.files.find(name);
    if (parent != FUSE_ROOT_ID || it == fs.files.end()) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    const fuse_entry_param e = entry_of(it->second);
    fuse_reply_entry(req, &e);
  }
  static void getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    const struct stat st = attr_of(ino);
    fuse_reply_attr(req, &st, 86400);
  }
  static void create(fuse_req_t req, fuse_ino_t, const char* name, mode_t, fuse_file_info* fi) {
    probe_fs& fs = of(req);
    fuse_ino_t ino;
    {
      std::lock_guard lock(fs.mutex);
      ino = fs.next_ino++;
      fs.files[name] = ino;
    }
    const fuse_entry_param e = entry_of(ino);
    fi->fh = 0;
    fuse_reply_create(req, &e, fi);
  }
  static void open(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
    ++of(req).opens;
    fuse_reply_err(req, ENOSYS);
  }
  static void flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, ENOSYS); }
  static void release(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
    ++of(req).releases;
    fuse_reply_err(req, 0);
  }
};

TEST(kernel_opens_probe, the_kernel_sends_no_release_for_a_file_created_after_it_opens_alone) {
  if (::access("/dev/fuse", F_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  char dir_template[] = "/var/tmp/densefs-no-open-probe-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr) << strerror(errno);
  const std::string mnt = dir_template;

  probe_fs fs;
  fuse_lowlevel_ops ops{};
  ops.lookup = probe_fs::lookup;
  ops.getattr = probe_fs::getattr;
  ops.create = probe_fs::create;
  ops.open = probe_fs::open;
  ops.flush = probe_fs::flush;
  ops.release = probe_fs::release;
  char program[] = "densefs-no-open-probe";
  char* argv[] = {program, nullptr};
  fuse_args args = FUSE_ARGS_INIT(1, argv);
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
  ASSERT_NE(se, nullptr);
  ASSERT_EQ(fuse_session_mount(se, mnt.c_str()), 0);
  std::thread loop([se] { fuse_session_loop(se); });

  const auto create_and_close = [&](const char* name) {
    const int fd = ::open((mnt + "/" + name).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    EXPECT_GE(fd, 0) << name << ": " << strerror(errno);
    if (fd >= 0) ::close(fd);
  };
  const auto open_and_close = [&](const char* name) {
    const int fd = ::open((mnt + "/" + name).c_str(), O_RDONLY);
    EXPECT_GE(fd, 0) << name << ": " << strerror(errno);
    if (fd >= 0) ::close(fd);
  };

  // Before any OPEN: a created file's handle is released (RELEASE comes
  // in the background, after close(2) returned).
  create_and_close("before");
  EXPECT_TRUE(eventually([&] { return fs.releases.load() == 1; })) << fs.releases.load();
  // The first OPEN, answered ENOSYS: the kernel opens files alone now.
  open_and_close("before");
  open_and_close("before");
  EXPECT_EQ(fs.opens.load(), 1);
  // A file created now has a handle from CREATE, and its close sends no
  // RELEASE: the daemon never learns when its writer closed it.
  create_and_close("after");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(fs.releases.load(), 1)
      << "this kernel sends RELEASE for files created after a no_open OPEN: densefs could let "
         "it open files alone on writable mounts too (fs/mount.cpp, filesystem::init)";

  fuse_session_unmount(se);
  loop.join();
  fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  ::rmdir(mnt.c_str());
}

}  // namespace
}  // namespace densefs::test
