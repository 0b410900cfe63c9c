// Metadata through a real mount: extended attributes (with the errno
// semantics rsync -X relies on), modes, owners, timestamps, statfs.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "tests/mount/mount_fixture.h"

// Which libfuse the daemon was built with (FUSE_CAP_HANDLE_KILLPRIV_V2 is in
// 3.18's headers, not in Debian 12's 3.14).
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

namespace densefs::test {
namespace {

using attrs = mount_test;

// Names from listxattr (NUL-separated); a failure is recorded on error.
std::set<std::string> xattr_names(const stdfs::path& p, bool follow = true) {
  std::set<std::string> out;
  const ssize_t size =
      follow ? listxattr(p.c_str(), nullptr, 0) : llistxattr(p.c_str(), nullptr, 0);
  EXPECT_GE(size, 0) << "listxattr " << p << ": " << strerror(errno);
  if (size <= 0) return out;
  std::string buf(static_cast<std::size_t>(size), '\0');
  const ssize_t got = follow ? listxattr(p.c_str(), buf.data(), buf.size())
                             : llistxattr(p.c_str(), buf.data(), buf.size());
  EXPECT_EQ(got, size) << "listxattr " << p;
  if (got <= 0) return out;
  EXPECT_EQ(buf[static_cast<std::size_t>(got) - 1], '\0') << "list must end with NUL";
  std::size_t start = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(got); ++i) {
    if (buf[i] == '\0') {
      out.insert(buf.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// The value, or nullopt with errno set.
std::optional<std::string> get_xattr(const stdfs::path& p, const std::string& name,
                                     bool follow = true) {
  const ssize_t size = follow ? getxattr(p.c_str(), name.c_str(), nullptr, 0)
                              : lgetxattr(p.c_str(), name.c_str(), nullptr, 0);
  if (size < 0) return std::nullopt;
  std::string buf(static_cast<std::size_t>(size) + 16, '\0');
  const ssize_t got = follow ? getxattr(p.c_str(), name.c_str(), buf.data(), buf.size())
                             : lgetxattr(p.c_str(), name.c_str(), buf.data(), buf.size());
  if (got < 0) return std::nullopt;
  EXPECT_EQ(got, size) << "size query and read disagree for " << name;
  buf.resize(static_cast<std::size_t>(got));
  return buf;
}

int set_xattr(const stdfs::path& p, const std::string& name, std::string_view value, int flags = 0,
              bool follow = true) {
  errno = 0;
  const int r = follow ? setxattr(p.c_str(), name.c_str(), value.data(), value.size(), flags)
                       : lsetxattr(p.c_str(), name.c_str(), value.data(), value.size(), flags);
  return r == 0 ? 0 : errno;
}

int remove_xattr(const stdfs::path& p, const std::string& name) {
  errno = 0;
  return removexattr(p.c_str(), name.c_str()) == 0 ? 0 : errno;
}

int get_errno(const stdfs::path& p, const std::string& name, bool follow = true) {
  errno = 0;
  const auto v = get_xattr(p, name, follow);
  return v ? 0 : errno;
}

TEST_F(attrs, xattr_set_get_list_remove_and_errors) {
  write_file(path("f"), "xattr carrier");
  stdfs::path const f = path("f");
  std::string const binary = random_bytes(4000, 111) + std::string(3, '\0');

  EXPECT_EQ(set_xattr(f, "user.plain", "value"), 0);
  EXPECT_EQ(set_xattr(f, "user.empty", ""), 0);
  EXPECT_EQ(set_xattr(f, "user.binary", binary), 0);
  EXPECT_EQ(get_xattr(f, "user.plain"), "value");
  EXPECT_EQ(get_xattr(f, "user.empty"), "");
  EXPECT_EQ(get_xattr(f, "user.binary"), binary);
  EXPECT_EQ(xattr_names(f), (std::set<std::string>{"user.binary", "user.empty", "user.plain"}));

  // Missing names, create/replace flags.
  EXPECT_EQ(get_errno(f, "user.missing"), ENODATA);
  EXPECT_EQ(set_xattr(f, "user.plain", "other", XATTR_CREATE), EEXIST);
  EXPECT_EQ(get_xattr(f, "user.plain"), "value");
  EXPECT_EQ(set_xattr(f, "user.missing", "x", XATTR_REPLACE), ENODATA);
  EXPECT_EQ(get_errno(f, "user.missing"), ENODATA);
  EXPECT_EQ(set_xattr(f, "user.plain", "replaced", XATTR_REPLACE), 0);
  EXPECT_EQ(get_xattr(f, "user.plain"), "replaced");
  EXPECT_EQ(set_xattr(f, "user.created", "c", XATTR_CREATE), 0);
  EXPECT_EQ(remove_xattr(f, "user.missing"), ENODATA);

  // Size query and a too small buffer.
  EXPECT_EQ(getxattr(f.c_str(), "user.plain", nullptr, 0), 8);
  char small[4];
  errno = 0;
  EXPECT_EQ(getxattr(f.c_str(), "user.plain", small, sizeof small), -1);
  EXPECT_EQ(errno, ERANGE);
  const ssize_t list_size = listxattr(f.c_str(), nullptr, 0);
  EXPECT_EQ(list_size, static_cast<ssize_t>(std::string("user.binary user.empty user.plain "
                                                        "user.created ")
                                                .size()));
  errno = 0;
  EXPECT_EQ(listxattr(f.c_str(), small, sizeof small), -1);
  EXPECT_EQ(errno, ERANGE);

  EXPECT_EQ(remove_xattr(f, "user.created"), 0);
  EXPECT_EQ(remove_xattr(f, "user.plain"), 0);
  EXPECT_EQ(get_errno(f, "user.plain"), ENODATA);
  EXPECT_EQ(xattr_names(f), (std::set<std::string>{"user.binary", "user.empty"}));

  // Many attributes on one inode.
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(set_xattr(f, "user.many." + std::to_string(i), std::to_string(i * i)), 0);
  EXPECT_EQ(xattr_names(f).size(), 52u);
  EXPECT_EQ(get_xattr(f, "user.many.49"), "2401");

  // As root, trusted.* works as on ext4.
  if (geteuid() == 0) {
    EXPECT_EQ(set_xattr(f, "trusted.t", "root only"), 0);
    EXPECT_EQ(get_xattr(f, "trusted.t"), "root only");
  }

  remount();
  EXPECT_EQ(get_xattr(f, "user.binary"), binary) << "after remount";
  EXPECT_EQ(get_xattr(f, "user.empty"), "") << "after remount";
  EXPECT_EQ(get_errno(f, "user.plain"), ENODATA) << "after remount";
  EXPECT_EQ(xattr_names(f).size(), geteuid() == 0 ? 53u : 52u) << "after remount";
  EXPECT_EQ(read_file(f), "xattr carrier") << "xattrs do not touch content";
}

TEST_F(attrs, xattrs_on_directories_and_symlinks_behave_like_ext4) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  EXPECT_EQ(set_xattr(path("d"), "user.dir", "on a dir"), 0);
  EXPECT_EQ(get_xattr(path("d"), "user.dir"), "on a dir");
  EXPECT_EQ(xattr_names(path("d")), std::set<std::string>{"user.dir"});

  // Symlinks: compare with the same calls on a plain ext4 directory.
  write_file(path("target"), "t");
  write_file(scratch_ / "target", "t");
  ASSERT_EQ(symlink("target", path("link").c_str()), 0);
  ASSERT_EQ(symlink("target", (scratch_ / "link").c_str()), 0);
  std::vector<std::string> names{"user.on_link"};
  if (geteuid() == 0) names.push_back("trusted.on_link");
  for (const auto& name : names) {
    const int ext4 = set_xattr(scratch_ / "link", name, "v", 0, false);
    const int ours = set_xattr(path("link"), name, "v", 0, false);
    EXPECT_EQ(ours, ext4) << "lsetxattr " << name << " on a symlink: ext4 gives " << strerror(ext4)
                          << ", densefs " << strerror(ours);
    EXPECT_EQ(get_errno(path("link"), name, false), get_errno(scratch_ / "link", name, false))
        << "lgetxattr " << name << " on a symlink";
  }
  EXPECT_EQ(get_errno(path("link"), "user.missing", false), ENODATA);
  // Through the link, the target gets the attribute.
  EXPECT_EQ(set_xattr(path("link"), "user.via_link", "x"), 0);
  EXPECT_EQ(get_xattr(path("target"), "user.via_link"), "x");

  remount();
  EXPECT_EQ(get_xattr(path("d"), "user.dir"), "on a dir") << "after remount";
  EXPECT_EQ(get_xattr(path("target"), "user.via_link"), "x") << "after remount";
  if (geteuid() == 0) {
    EXPECT_EQ(get_errno(path("link"), "trusted.on_link", false),
              get_errno(scratch_ / "link", "trusted.on_link", false))
        << "after remount";
  }
}

// `densefs stats MNT --json` counts the FUSE requests the mount received,
// by kind: what tests/bench/request_counts.sh measures per file.
TEST_F(attrs, stats_count_fuse_requests_by_kind) {
  const auto before = stats();
  ASSERT_TRUE(before.contains("requests") && before["requests"].is_object()) << before.dump();
  const auto count = [](const nlohmann::json& j, const char* kind) {
    return j.at("requests").value(kind, std::uint64_t{0});
  };
  for (int i = 0; i < 7; ++i) write_file(path("f" + std::to_string(i)), "some bytes");
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  const auto after = stats();
  EXPECT_EQ(count(after, "create") - count(before, "create"), 7u) << after.dump();
  EXPECT_EQ(count(after, "mkdir") - count(before, "mkdir"), 1u) << after.dump();
  EXPECT_GE(count(after, "write") - count(before, "write"), 7u) << after.dump();
  EXPECT_EQ(count(after, "unlink"), 0u) << after.dump();
  // A file read again, its pages kept: close(2) of a read-only descriptor
  // sends no FLUSH, but where the volume keeps the locks (FLUSH lets go of
  // the closer's; docs/scale-out.md, "Locks across clients").
  EXPECT_EQ(read_file(path("f0")), "some bytes");
  const auto once = stats();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(read_file(path("f0")), "some bytes");
  const auto thrice = stats();
  const bool volume_locks = thrice.at("file_locks").at("kept") == "volume";
  EXPECT_EQ(volume_locks, thrice.value("metadata_engine", "") == "postgresql") << thrice.dump();
  EXPECT_EQ(count(thrice, "flush") - count(once, "flush"), volume_locks ? 3u : 0u) << thrice.dump();
  EXPECT_EQ(count(thrice, "open") - count(once, "open"), 3u) << thrice.dump();
  // And the daemon's time on each kind seen: positive, for exactly the kinds
  // counted.
  ASSERT_TRUE(thrice.contains("request_seconds")) << thrice.dump();
  EXPECT_EQ(thrice["request_seconds"].size(), thrice["requests"].size()) << thrice.dump();
  EXPECT_GT(thrice["request_seconds"].value("create", 0.0), 0.0) << thrice.dump();
  // No idle spinner unless asked for.
  EXPECT_EQ(thrice.value("idle_spin_seconds", -1.0), 0.0) << thrice.dump();
  // The text form says it too.
  const auto r = run_command({densefs_binary(), "stats", mnt_.string()});
  EXPECT_NE(r.out.find("requests since mount: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("inodes in memory: "), std::string::npos) << r.out;
}

// With KILLPRIV_V2 the kernel asks for security.capability before a file's
// first write only, not before every write: tar writes 10 KiB records, and
// each was a GETXATTR round trip (docs/read-path.md, "Requests per file").
// The bits a write must clear are still cleared: tests/mount/permission_test.cpp.
TEST_F(attrs, a_file_written_in_many_writes_is_asked_for_its_capability_once) {
#ifndef FUSE_CAP_HANDLE_KILLPRIV_V2
  GTEST_SKIP() << "libfuse without FUSE_CAP_HANDLE_KILLPRIV_V2 (3.14): the kernel asks before "
                  "every write";
#endif
  const auto count = [](const nlohmann::json& j, const char* kind) {
    return j.at("requests").value(kind, std::uint64_t{0});
  };
  const int fd = ::open(path("records").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  const std::string record(1024, 'r');
  // `densefs stats` asks the mount for its own xattrs: what one call costs.
  const auto first = stats();
  const auto before = stats();
  const std::uint64_t of_stats = count(before, "getxattr") - count(first, "getxattr");
  constexpr int k_writes = 10;
  for (int i = 0; i < k_writes; ++i)
    ASSERT_EQ(::pwrite(fd, record.data(), record.size(), static_cast<off_t>(i * record.size())),
              static_cast<ssize_t>(record.size()))
        << strerror(errno);
  const auto after = stats();
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(count(after, "write") - count(before, "write"), std::uint64_t{k_writes})
      << after.dump();
  EXPECT_LE(count(after, "getxattr") - count(before, "getxattr") - of_stats, 1u) << after.dump();
  EXPECT_EQ(read_file(path("records")).size(), k_writes * record.size());
}

TEST_F(attrs, virtual_info_xattr_is_readable_but_never_listed) {
  std::string const content = compressible_bytes(5 * k_mib, 121);
  write_file(path("f"), content);
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  EXPECT_EQ(set_xattr(path("f"), "user.real", "r"), 0);

  const auto raw = get_xattr(path("f"), "user.densefs.info");
  ASSERT_TRUE(raw) << "getxattr user.densefs.info: " << strerror(errno);
  const auto j = nlohmann::json::parse(*raw, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "user.densefs.info is not JSON: " << *raw;
  EXPECT_EQ(j.value("size", std::uint64_t{0}), content.size()) << *raw;
  EXPECT_TRUE(j.contains("chunks")) << *raw;

  EXPECT_TRUE(get_xattr(path("d"), "user.densefs.info")) << "on a directory: " << strerror(errno);
  EXPECT_TRUE(get_xattr(mnt_, "user.densefs.info")) << "on the root: " << strerror(errno);
  const auto stats_raw = get_xattr(path("d"), "user.densefs.stats");
  ASSERT_TRUE(stats_raw) << "user.densefs.stats: " << strerror(errno);
  EXPECT_FALSE(nlohmann::json::parse(*stats_raw, nullptr, false).is_discarded()) << *stats_raw;

  // rsync -X copies what listxattr shows: the virtual names must not be there.
  EXPECT_EQ(xattr_names(path("f")), std::set<std::string>{"user.real"});
  EXPECT_EQ(xattr_names(path("d")), std::set<std::string>{});
  EXPECT_EQ(xattr_names(mnt_), std::set<std::string>{});
}

struct timespec now_realtime() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

TEST_F(attrs, modes_and_owners) {
  write_file(path("f"), "mode carrier", 0600);
  ASSERT_EQ(::mkdir(path("d").c_str(), 0700), 0);
  ASSERT_EQ(symlink("f", path("l").c_str()), 0);
  auto mode_of = [&](const char* rel) {
    struct stat st {};
    EXPECT_EQ(lstat(path(rel).c_str(), &st), 0) << rel;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode_of("f"), 0600u);
  ASSERT_EQ(chmod(path("f").c_str(), 0640), 0) << strerror(errno);
  EXPECT_EQ(mode_of("f"), 0640u);
  ASSERT_EQ(chmod(path("d").c_str(), 01777), 0) << strerror(errno);
  EXPECT_EQ(mode_of("d"), 01777u);

  const bool root = geteuid() == 0;
  if (root) {
    ASSERT_EQ(chown(path("f").c_str(), 1234, 5678), 0) << strerror(errno);
    ASSERT_EQ(lchown(path("l").c_str(), 4321, 8765), 0) << strerror(errno);
    ASSERT_EQ(chown(path("d").c_str(), 42, -1), 0) << strerror(errno);
    // Set-id bits after the chown (chown clears them on files).
    ASSERT_EQ(chmod(path("f").c_str(), 06755), 0) << strerror(errno);
    EXPECT_EQ(mode_of("f"), 06755u);
  }
  auto check = [&](const char* when) {
    struct stat f {
    }, l{}, d{};
    ASSERT_EQ(lstat(path("f").c_str(), &f), 0);
    ASSERT_EQ(lstat(path("l").c_str(), &l), 0);
    ASSERT_EQ(lstat(path("d").c_str(), &d), 0);
    EXPECT_EQ(d.st_mode & 07777, 01777u) << when;
    if (root) {
      EXPECT_EQ(f.st_mode & 07777, 06755u) << when;
      EXPECT_EQ(f.st_uid, 1234u) << when;
      EXPECT_EQ(f.st_gid, 5678u) << when;
      EXPECT_EQ(l.st_uid, 4321u) << when;
      EXPECT_EQ(l.st_gid, 8765u) << when;
      EXPECT_EQ(d.st_uid, 42u) << when;
      EXPECT_EQ(d.st_gid, 0u) << when;
    } else {
      EXPECT_EQ(f.st_mode & 07777, 0640u) << when;
    }
  };
  check("after the changes");
  remount();
  check("after remount");
}

TEST_F(attrs, nanosecond_times_survive_remount_and_writes_update_mtime) {
  write_file(path("f"), "times");
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  const timespec set[2] = {{1234567890, 123456789}, {1500000000, 987654321}};
  ASSERT_EQ(utimensat(AT_FDCWD, path("f").c_str(), set, 0), 0) << strerror(errno);
  ASSERT_EQ(utimensat(AT_FDCWD, path("d").c_str(), set, 0), 0) << strerror(errno);
  // UTIME_OMIT leaves one alone.
  ASSERT_EQ(symlink("f", path("l").c_str()), 0);
  const timespec link_times[2] = {{0, UTIME_OMIT}, {1600000000, 1}};
  ASSERT_EQ(utimensat(AT_FDCWD, path("l").c_str(), link_times, AT_SYMLINK_NOFOLLOW), 0)
      << strerror(errno);

  auto check = [&](const char* when) {
    struct stat st {};
    ASSERT_EQ(stat(path("f").c_str(), &st), 0);
    EXPECT_EQ(st.st_atim.tv_sec, 1234567890) << when;
    EXPECT_EQ(st.st_atim.tv_nsec, 123456789) << when;
    EXPECT_EQ(st.st_mtim.tv_sec, 1500000000) << when;
    EXPECT_EQ(st.st_mtim.tv_nsec, 987654321) << when;
    ASSERT_EQ(stat(path("d").c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, 1500000000) << when;
    EXPECT_EQ(st.st_mtim.tv_nsec, 987654321) << when;
    ASSERT_EQ(lstat(path("l").c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, 1600000000) << when;
    EXPECT_EQ(st.st_mtim.tv_nsec, 1) << when;
  };
  check("after utimensat");
  remount();
  check("after remount");

  // A write moves mtime (and ctime) to now; so does creating an entry in a
  // directory.
  const timespec before = now_realtime();
  const int fd = open(path("f").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, " and more", 9), 9);
  ASSERT_EQ(close(fd), 0);
  write_file(path("d/new"), "new");
  struct stat st {};
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  // File system timestamps come from a coarse clock: allow one tick back.
  EXPECT_GE(st.st_mtim.tv_sec, before.tv_sec - 1) << "mtime after a write";
  EXPECT_GE(st.st_ctim.tv_sec, before.tv_sec - 1) << "ctime after a write";
  ASSERT_EQ(stat(path("d").c_str(), &st), 0);
  EXPECT_GE(st.st_mtim.tv_sec, before.tv_sec - 1) << "directory mtime after a create";
  const time_t written = [&] {
    struct stat s {};
    stat(path("f").c_str(), &s);
    return s.st_mtim.tv_sec;
  }();
  remount();
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, written) << "mtime of the write after remount";
  EXPECT_EQ(read_file(path("f")), "times and more");

  // chmod moves ctime.
  const timespec before_chmod = now_realtime();
  ASSERT_EQ(utimensat(AT_FDCWD, path("f").c_str(), set, 0), 0);
  ASSERT_EQ(chmod(path("f").c_str(), 0600), 0);
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_GE(st.st_ctim.tv_sec, before_chmod.tv_sec - 1) << "ctime after chmod";
  EXPECT_EQ(st.st_mtim.tv_sec, 1500000000) << "chmod does not touch mtime";

  // fallocate moves mtime and ctime in every mode, also where the size
  // stays, as on ext4 and XFS; and the times last.
  for (const int mode : {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE}) {
    ASSERT_EQ(utimensat(AT_FDCWD, path("f").c_str(), set, 0), 0);
    const timespec before_fallocate = now_realtime();
    const int f = open(path("f").c_str(), O_RDWR);
    ASSERT_GE(f, 0);
    ASSERT_EQ(::fallocate(f, mode, 0, 1), 0) << "mode " << mode << ": " << strerror(errno);
    ASSERT_EQ(close(f), 0);
    remount();
    ASSERT_EQ(stat(path("f").c_str(), &st), 0);
    EXPECT_GE(st.st_mtim.tv_sec, before_fallocate.tv_sec - 1) << "mtime after fallocate " << mode;
    EXPECT_GE(st.st_ctim.tv_sec, before_fallocate.tv_sec - 1) << "ctime after fallocate " << mode;
    EXPECT_EQ(st.st_size, 14) << "fallocate " << mode << " within the file";
  }
}

TEST_F(attrs, statfs_reports_the_store_file_system) {
  struct statvfs m {};
  ASSERT_EQ(statvfs(mnt_.c_str(), &m), 0) << strerror(errno);
  EXPECT_GT(m.f_bsize, 0u);
  EXPECT_GT(m.f_frsize, 0u);
  EXPECT_GT(m.f_blocks, 0u);
  EXPECT_LE(m.f_bfree, m.f_blocks);
  EXPECT_LE(m.f_bavail, m.f_bfree);
  EXPECT_EQ(m.f_namemax, 255u);

  // A volume whose packs are in object storage (scale_out_suite_test.sh):
  // df shows the volume's stored bytes as used, a petabyte free and no
  // fixed number of inodes (docs/scale-out.md, "df").
  if (const char* s3 = std::getenv("DENSEFS_TEST_S3_ENDPOINT"); s3 && *s3 && mounts_on_postgres()) {
    EXPECT_EQ(static_cast<double>(m.f_bavail) * m.f_frsize, 0x1p50);
    EXPECT_EQ(m.f_files, 0u);
    const std::uint64_t used_before = (m.f_blocks - m.f_bfree) * m.f_frsize;
    const std::string data = random_bytes(3 << 20, 417);  // incompressible: stored as is
    const int fd = ::open((mnt_ / "stored.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fsync(fd), 0) << strerror(errno);  // committed: its pack uploaded
    ::close(fd);
    // The mount lists the volume's packs once, off the request path:
    // statfs shows them once that is done (well within this bound).
    std::uint64_t used_after = 0;
    for (int tries = 0; tries < 100 && used_after < used_before + data.size(); ++tries) {
      if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ASSERT_EQ(statvfs(mnt_.c_str(), &m), 0) << strerror(errno);
      used_after = (m.f_blocks - m.f_bfree) * m.f_frsize;
    }
    EXPECT_GE(used_after, used_before + data.size())
        << "df's used bytes before " << used_before << ", after " << used_after;
    return;
  }

  // df on the mount shows the physical space of the store's file system.
  struct statvfs s {};
  ASSERT_EQ(statvfs(store_.c_str(), &s), 0);
  const double mount_total = static_cast<double>(m.f_blocks) * static_cast<double>(m.f_frsize);
  const double store_total = static_cast<double>(s.f_blocks) * static_cast<double>(s.f_frsize);
  EXPECT_NEAR(mount_total / store_total, 1.0, 0.01)
      << "mount total " << mount_total << " bytes, store file system " << store_total;
  const double mount_avail = static_cast<double>(m.f_bavail) * static_cast<double>(m.f_frsize);
  const double store_avail = static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize);
  EXPECT_NEAR(mount_avail / store_avail, 1.0, 0.05)
      << "mount available " << mount_avail << " bytes, store file system " << store_avail;
}

// -o idle_spin=1 (fs/idle_spinner.h): a spinner thread that runs while
// requests come and sleeps between bursts. Whether it gets a core while
// requests come depends on the machine's load (it runs at idle priority),
// so the test checks what holds under any load: the thread is there, and a
// quiet mount costs it no CPU.
class idle_spin : public mount_test {
 protected:
  std::string mount_options() const override { return "idle_spin=1"; }
  // CPU time of the daemon's spinner threads, in clock ticks; -1: none.
  long spinner_ticks() const {
    long ticks = -1;
    const std::filesystem::path tasks = "/proc/" + std::to_string(daemon_pid_) + "/task";
    for (const auto& task : std::filesystem::directory_iterator(tasks)) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      if (name != "densefs-spin") continue;
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      // Fields after the command's closing parenthesis: utime and stime
      // are the 12th and 13th.
      std::istringstream rest(line.substr(line.rfind(')') + 2));
      std::string field;
      long utime = 0, stime = 0;
      for (int i = 1; i <= 13 && rest >> field; ++i) {
        if (i == 12) utime = std::stol(field);
        if (i == 13) stime = std::stol(field);
      }
      ticks = std::max(ticks, 0L) + utime + stime;
    }
    return ticks;
  }
};

TEST_F(idle_spin, a_spinner_runs_and_sleeps_between_bursts) {
  for (int i = 0; i < 200; ++i) {
    write_file(path("f" + std::to_string(i)), "x");
    EXPECT_EQ(read_file(path("f" + std::to_string(i))), "x");
  }
  ASSERT_GE(spinner_ticks(), 0) << "no densefs-spin thread in the daemon";
  EXPECT_GE(stats().value("idle_spin_seconds", -1.0), 0.0);
  // Quiet: half a second costs the spinner no CPU (a tick is 10 ms; the
  // stats request above is followed by at most a millisecond of spinning).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const long before = spinner_ticks();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(spinner_ticks() - before, 2) << "the spinner did not go to sleep";
}

}  // namespace
}  // namespace densefs::test
