// The mount's life: a whole tree across umount/remount, concurrent writers,
// a crash after fsync, and the CLI refusing bad mounts.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

using lifecycle = mount_test;

// One line per entry under `root`: path, type, mode, owner, size, mtime in
// ns, nlink, link target or content checksum, xattrs. Comparing two of these
// compares the trees.
void describe(const stdfs::path& root, const stdfs::path& rel,
              std::map<std::string, std::string>& out) {
  stdfs::path const p = rel.empty() ? root : root / rel;
  struct stat st {};
  if (lstat(p.c_str(), &st) != 0) {
    ADD_FAILURE() << "lstat " << p << ": " << strerror(errno);
    return;
  }
  std::ostringstream line;
  line << std::oct << st.st_mode << std::dec << " " << st.st_uid << ":" << st.st_gid << " nlink "
       << st.st_nlink << " mtime " << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec;
  if (S_ISREG(st.st_mode)) {
    line << " size " << st.st_size << " xxh3 " << std::hex << xxh3(read_file(p)) << std::dec;
  } else if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    const ssize_t n = readlink(p.c_str(), buf, sizeof buf);
    line << " -> " << std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  if (!S_ISLNK(st.st_mode)) {
    char names[4096];
    const ssize_t n = listxattr(p.c_str(), names, sizeof names);
    for (ssize_t i = 0; i < n;) {
      std::string const name(names + i);
      char value[256];
      const ssize_t v = getxattr(p.c_str(), name.c_str(), value, sizeof value);
      line << " xattr " << name << "="
           << std::string(value, v > 0 ? static_cast<std::size_t>(v) : 0);
      i += static_cast<ssize_t>(name.size()) + 1;
    }
  }
  out[rel.string()] = line.str();
  if (S_ISDIR(st.st_mode)) {
    DIR* d = opendir(p.c_str());
    if (d == nullptr) {
      ADD_FAILURE() << "opendir " << p << ": " << strerror(errno);
      return;
    }
    std::vector<std::string> children;
    while (dirent* e = readdir(d)) {
      std::string const n = e->d_name;
      if (n != "." && n != "..") children.push_back(n);
    }
    closedir(d);
    for (const auto& c : children) describe(root, rel / c, out);
  }
}

std::map<std::string, std::string> describe_tree(const stdfs::path& root) {
  std::map<std::string, std::string> out;
  describe(root, {}, out);
  return out;
}

TEST_F(lifecycle, whole_tree_persists_across_umount_and_remount) {
  std::map<std::string, std::string> contents;
  std::uint64_t seed = 200;
  for (int d = 0; d < 6; ++d) {
    stdfs::path const dir = mnt_ / ("dir" + std::to_string(d));
    ASSERT_EQ(::mkdir(dir.c_str(), 0700 + d), 0);
    for (int f = 0; f < 12; ++f) {
      std::size_t const size = (f * 7919 * (d + 1)) % (5 * k_mib / 2) + (f == 3 ? 4 * k_mib : 0);
      std::string const data =
          (f % 2 != 0) ? random_bytes(size, seed++) : compressible_bytes(size, seed++);
      stdfs::path const p = dir / ("file" + std::to_string(f));
      write_file(p, data, 0600 + f);
      contents[p.string()] = data;
    }
    ASSERT_EQ(::mkdir((dir / "nested").c_str(), 0755), 0);
    write_file(dir / "nested" / "leaf", "leaf " + std::to_string(d));
    ASSERT_EQ(symlink("../dir0/file1", (dir / "link").c_str()), 0);
    ASSERT_EQ(link((dir / "file2").c_str(), (dir / "nested" / "hard").c_str()), 0);
    ASSERT_EQ(setxattr((dir / "file5").c_str(), "user.tag", "t", 1, 0), 0) << strerror(errno);
    const timespec t[2] = {{1000000000 + d, 5}, {1100000000 + d, 999999999}};
    ASSERT_EQ(utimensat(AT_FDCWD, (dir / "file0").c_str(), t, 0), 0);
  }
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  // Directory mtimes change as entries are added: set them last.
  const timespec dt[2] = {{1200000000, 1}, {1200000000, 2}};
  for (int d = 0; d < 6; ++d)
    ASSERT_EQ(utimensat(AT_FDCWD, path("dir" + std::to_string(d)).c_str(), dt, 0), 0);

  const auto before = describe_tree(mnt_);
  EXPECT_EQ(before.size(), 1u + 6 * (1 + 12 + 1 + 1 + 1 + 1) + 1);
  for (const auto& [p, data] : contents) EXPECT_TRUE(same_bytes(data, read_file(p))) << p;

  remount();
  const auto after = describe_tree(mnt_);
  EXPECT_EQ(after, before);
  for (const auto& [p, data] : contents) EXPECT_TRUE(same_bytes(data, read_file(p))) << p;
  // And a second cycle, now that nothing is cached anywhere.
  remount();
  EXPECT_EQ(describe_tree(mnt_), before);
}

TEST_F(lifecycle, concurrent_writers_on_own_files_and_disjoint_ranges_of_one_file) {
  constexpr int k_own = 8;
  constexpr int k_shared = 4;
  // Odd sizes so ranges cross chunk boundaries at different points.
  constexpr std::size_t k_own_size = 6 * k_mib + 4321;
  constexpr std::size_t k_range = 3 * k_mib + 333;

  std::vector<std::string> own(k_own);
  for (int i = 0; i < k_own; ++i)
    own[i] = i % 2 ? random_bytes(k_own_size, 300 + i) : compressible_bytes(k_own_size, 300 + i);
  std::string shared;
  for (int i = 0; i < k_shared; ++i) shared += random_bytes(k_range, 400 + i);

  const int create = open(path("shared").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(create, 0);
  close(create);

  std::vector<std::thread> threads;
  std::vector<std::string> errors(k_own + k_shared);
  for (int i = 0; i < k_own; ++i) {
    threads.emplace_back([&, i] {
      int const fd = open(path("own" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT, 0644);
      if (fd < 0) {
        errors[i] = strerror(errno);
        return;
      }
      // Writes of varying sizes, 4 KiB to ~1 MiB.
      std::size_t off = 0;
      std::size_t step = 4096;
      while (off < own[i].size()) {
        std::size_t const n = std::min(step, own[i].size() - off);
        if (pwrite(fd, own[i].data() + off, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
          errors[i] = "short pwrite at " + std::to_string(off);
        off += n;
        step = step * 3 % (k_mib + 7) + 4096;
      }
      if (close(fd) != 0) errors[i] = std::string("close: ") + strerror(errno);
    });
  }
  for (int i = 0; i < k_shared; ++i) {
    threads.emplace_back([&, i] {
      int const fd = open(path("shared").c_str(), O_WRONLY);
      if (fd < 0) {
        errors[k_own + i] = strerror(errno);
        return;
      }
      // Each thread writes its range back to front in 128 KiB pieces so the
      // threads interleave inside shared chunks.
      std::size_t const base = static_cast<std::size_t>(i) * k_range;
      std::size_t end = k_range;
      while (end > 0) {
        std::size_t const n = std::min<std::size_t>(128 * k_kib, end);
        std::size_t const off = base + end - n;
        if (pwrite(fd, shared.data() + off, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
          errors[k_own + i] = "short pwrite at " + std::to_string(off);
        end -= n;
      }
      if (close(fd) != 0) errors[k_own + i] = std::string("close: ") + strerror(errno);
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << "writer " << i;

  auto check = [&](const char* when) {
    for (int i = 0; i < k_own; ++i)
      EXPECT_TRUE(same_bytes(own[i], read_file(path("own" + std::to_string(i)))))
          << "own" << i << " " << when;
    EXPECT_TRUE(same_bytes(shared, read_file(path("shared")))) << "shared " << when;
  };
  check("after the writers closed");
  remount();
  check("after remount");
}

TEST_F(lifecycle, fsynced_data_survives_kill_9_of_the_daemon) {
  std::string const synced = random_bytes(10 * k_mib + 99, 501);
  std::string const text = compressible_bytes(3 * k_mib, 502);
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);

  int fd = open(path("d/synced").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, synced, 0));
  ASSERT_EQ(fsync(fd), 0) << strerror(errno);
  ASSERT_EQ(close(fd), 0);

  // fdatasync on a still-open file; the fd stays open across the crash.
  const int open_fd = open(path("d/open").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(open_fd, 0);
  ASSERT_TRUE(pwrite_all(open_fd, text, 0));
  ASSERT_EQ(fdatasync(open_fd), 0) << strerror(errno);
  const int dfd = open(path("d").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  ASSERT_EQ(fsync(dfd), 0) << "fsyncdir: " << strerror(errno);
  close(dfd);

  // Unsynced data written after: may or may not survive, but must not
  // damage what was synced.
  std::string const unsynced = random_bytes(2 * k_mib, 503);
  ASSERT_TRUE(pwrite_all(open_fd, unsynced, text.size()));
  write_file(path("d/unsynced"), unsynced);

  // The fd stays open across the crash; closing it afterwards reaches no one.
  kill_daemon([&] { close(open_fd); });
  mount();

  EXPECT_TRUE(same_bytes(synced, read_file(path("d/synced")))) << "fsync'd file after kill -9";
  std::string const got = read_file(path("d/open"));
  ASSERT_GE(got.size(), text.size()) << "fdatasync'd prefix lost after kill -9";
  EXPECT_TRUE(same_bytes(text, std::string_view(got).substr(0, text.size())))
      << "fdatasync'd prefix after kill -9";
  // The store still works for new data and a clean unmount.
  write_file(path("after"), "after the crash");
  remount();
  EXPECT_EQ(read_file(path("after")), "after the crash");
  EXPECT_TRUE(same_bytes(synced, read_file(path("d/synced"))));
}

// Runs `densefs mount STORE MNT` (daemon mode: it must fail before forking)
// and checks the one-line error.
void expect_mount_refused(const stdfs::path& store, const stdfs::path& mnt, const char* what,
                          const std::string& must_contain = {}) {
  const auto r = run_command({densefs_binary(), "mount", store.string(), mnt.string()},
                             std::chrono::seconds(30));
  EXPECT_FALSE(r.timed_out) << what << ": densefs mount did not return";
  EXPECT_NE(r.exit_code, 0) << what << ": densefs mount succeeded";
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  EXPECT_FALSE(err.empty()) << what << ": no error message";
  EXPECT_EQ(err.find('\n'), std::string::npos) << what << ": not one line:\n" << r.err;
  if (!must_contain.empty()) {
    EXPECT_NE(err.find(must_contain), std::string::npos) << what << ": " << err;
  }
  EXPECT_FALSE(mounted_fs_type(mnt)) << what << ": left " << mnt << " mounted";
  if (mounted_fs_type(mnt)) run_command({"fusermount3", "-u", mnt.string()});
}

TEST_F(lifecycle, cli_refuses_bad_mounts_with_one_line_and_keeps_the_mount_working) {
  write_file(path("keep"), "still here");
  stdfs::path const other_mnt = work_ / "other-mnt";
  ASSERT_EQ(::mkdir(other_mnt.c_str(), 0755), 0);

  expect_mount_refused(work_ / "no-such-store", other_mnt, "missing store directory");
  stdfs::path const not_store = work_ / "not-a-store";
  ASSERT_EQ(::mkdir(not_store.c_str(), 0755), 0);
  write_file(not_store / "hello.txt", "just a file");
  expect_mount_refused(not_store, other_mnt, "a directory that is not a store");
  // A missing mount point, with a good store (a second store, so the lock
  // is not what stops it).
  stdfs::path const second = work_ / "second-store";
  const auto mkfs = run_command({densefs_binary(), "mkfs", second.string()});
  ASSERT_EQ(mkfs.exit_code, 0) << mkfs.err;
  expect_mount_refused(second, work_ / "no-such-mnt", "a missing mount point");
  // mkfs refuses a store that exists.
  const auto again = run_command({densefs_binary(), "mkfs", store_.string()});
  EXPECT_NE(again.exit_code, 0) << "mkfs over an existing (mounted) store succeeded";

  // The existing mount kept working throughout.
  EXPECT_EQ(read_file(path("keep")), "still here");
  write_file(path("new"), "written after the refusals");
  EXPECT_EQ(read_file(path("new")), "written after the refusals");
  remount();
  EXPECT_EQ(read_file(path("keep")), "still here");
  EXPECT_EQ(read_file(path("new")), "written after the refusals");
}

// -o transport: FUSE over io_uring when the kernel offers it (fuse's
// enable_uring parameter, which tools/setup.sh turns on) and the build's
// libfuse has it (3.18, which setup.sh builds); /dev/fuse when asked for.
// The fixture's own mount is transport=auto.
TEST_F(lifecycle, transport_follows_the_kernel_and_both_transports_serve) {
  std::ifstream parameter("/sys/module/fuse/parameters/enable_uring");
  std::string value;
  const bool kernel_offers = static_cast<bool>(parameter >> value) && value == "Y";
  const std::size_t uring_lines = log_lines_containing("FUSE requests over io_uring");
  if (!kernel_offers) {
    EXPECT_EQ(uring_lines, 0u) << daemon_log();
  }

  stdfs::path const second = work_ / "second-store";
  stdfs::path const second_mnt = work_ / "second-mnt";
  ASSERT_EQ(::mkdir(second_mnt.c_str(), 0755), 0);
  ASSERT_EQ(run_command({densefs_binary(), "mkfs", second.string()}).exit_code, 0);
  bool uring_accepted = false;
  for (const char* transport : {"transport=device", "transport=uring"}) {
    const auto r = run_command(
        {densefs_binary(), "mount", second.string(), second_mnt.string(), "-o", transport},
        std::chrono::seconds(30));
    ASSERT_FALSE(r.timed_out) << transport;
    if (r.exit_code != 0) {
      // Only uring may be refused, only where it cannot be had, in one line
      // that says why; auto then took /dev/fuse, so no ring was logged.
      EXPECT_EQ(std::string(transport), "transport=uring") << r.err;
      EXPECT_TRUE(r.err.find(kernel_offers ? "libfuse" : "enable_uring") != std::string::npos)
          << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_EQ(uring_lines, 0u) << "auto took io_uring where uring is refused";
      EXPECT_FALSE(mounted_fs_type(second_mnt));
      continue;
    }
    EXPECT_TRUE(kernel_offers || std::string(transport) == "transport=device");
    if (std::string(transport) == "transport=uring") uring_accepted = true;
    const std::string bytes = random_bytes(3 << 20, 7);
    write_file(second_mnt / "f", bytes);
    EXPECT_TRUE(same_bytes(bytes, read_file(second_mnt / "f"))) << transport;
    ASSERT_EQ(run_command({densefs_binary(), "umount", second_mnt.string()}).exit_code, 0)
        << transport;
  }
  // auto took the ring exactly where uring is accepted.
  EXPECT_EQ(uring_lines > 0, uring_accepted) << daemon_log();
}

// `mount -o remount,ro` reaches densefs as `densefs STORE MNT -o remount,ro`
// (mount.fuse3 and fstab run it that way): the mount turns read-only and
// back, and the data stays.
TEST_F(lifecycle, remount_switches_between_read_only_and_read_write) {
  write_file(path("before"), "kept");
  auto remount_as = [&](const char* mode) {
    const auto r = run_command(
        {densefs_binary(), store_.string(), mnt_.string(), "-o", std::string("remount,") + mode});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  };
  remount_as("ro");
  const int fd = ::open(path("new").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, EROFS);
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(read_file(path("before")), "kept");
  remount_as("rw");
  write_file(path("new"), "written");
  EXPECT_EQ(read_file(path("new")), "written");
}

}  // namespace
}  // namespace densefs::test
