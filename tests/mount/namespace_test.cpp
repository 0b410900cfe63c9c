// Names through a real mount: rename in all its forms, hard and symbolic
// links, special files, unlink while open, directories big, deep and with
// odd names.
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

using names = mount_test;

int rename2(const stdfs::path& from, const stdfs::path& to, unsigned flags) {
  return static_cast<int>(
      syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags));
}

// errno of a call that is expected to fail; 0 if it succeeded.
template <class F>
int errno_of(F&& f) {
  errno = 0;
  return f() == 0 ? 0 : errno;
}

struct stat stat_of(const stdfs::path& p) {
  struct stat st {};
  EXPECT_EQ(lstat(p.c_str(), &st), 0) << p << ": " << strerror(errno);
  return st;
}

bool lexists(const stdfs::path& p) {
  struct stat st {};
  return lstat(p.c_str(), &st) == 0;
}

std::set<std::string> list_dir(const stdfs::path& p) {
  std::set<std::string> out;
  DIR* d = opendir(p.c_str());
  EXPECT_NE(d, nullptr) << p << ": " << strerror(errno);
  if (d == nullptr) return out;
  errno = 0;
  while (dirent* e = readdir(d)) {
    std::string const n = e->d_name;
    if (n != "." && n != "..") out.insert(n);
  }
  EXPECT_EQ(errno, 0) << "readdir " << p << ": " << strerror(errno);
  closedir(d);
  return out;
}

TEST_F(names, rename_plain_and_across_directories) {
  write_file(path("a"), "content of a");
  ASSERT_EQ(rename2(path("a"), path("b"), 0), 0) << strerror(errno);
  EXPECT_FALSE(lexists(path("a")));
  EXPECT_EQ(read_file(path("b")), "content of a");

  ASSERT_EQ(::mkdir(path("d1").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("d2").c_str(), 0755), 0);
  ASSERT_EQ(rename2(path("b"), path("d1/b"), 0), 0) << strerror(errno);
  ASSERT_EQ(rename2(path("d1/b"), path("d2/c"), 0), 0) << strerror(errno);
  EXPECT_EQ(list_dir(path("d1")), std::set<std::string>{});
  EXPECT_EQ(list_dir(path("d2")), std::set<std::string>{"c"});
  EXPECT_EQ(read_file(path("d2/c")), "content of a");

  // A directory moved across directories: nlink of both parents and ".."
  // follow it.
  ASSERT_EQ(::mkdir(path("d1/sub").c_str(), 0755), 0);
  write_file(path("d1/sub/f"), "in sub");
  EXPECT_EQ(stat_of(path("d1")).st_nlink, 3u);
  EXPECT_EQ(stat_of(path("d2")).st_nlink, 2u);
  ASSERT_EQ(rename2(path("d1/sub"), path("d2/sub2"), 0), 0) << strerror(errno);
  EXPECT_EQ(stat_of(path("d1")).st_nlink, 2u);
  EXPECT_EQ(stat_of(path("d2")).st_nlink, 3u);
  EXPECT_EQ(stat_of(path("d2/sub2/..")).st_ino, stat_of(path("d2")).st_ino);
  EXPECT_EQ(read_file(path("d2/sub2/f")), "in sub");

  remount();
  EXPECT_FALSE(lexists(path("a")));
  EXPECT_FALSE(lexists(path("d1/sub")));
  EXPECT_EQ(read_file(path("d2/c")), "content of a");
  EXPECT_EQ(read_file(path("d2/sub2/f")), "in sub");
  EXPECT_EQ(stat_of(path("d2/sub2/..")).st_ino, stat_of(path("d2")).st_ino);
}

TEST_F(names, rename_over_an_existing_file_replaces_it_and_releases_its_content) {
  const auto chunks_empty = stats_u64("chunks");
  std::string const old_content = random_bytes(8 * k_mib, 71);
  std::string const new_content = random_bytes(1000, 72);
  write_file(path("target"), old_content);
  write_file(path("source"), new_content);
  // Random data: no chunk is shared, so the store holds each file's chunks.
  const auto target_chunks = info(path("target"))["chunk_count"].get<std::uint64_t>();
  const auto source_chunks = info(path("source"))["chunk_count"].get<std::uint64_t>();
  EXPECT_GE(target_chunks, 2u);
  EXPECT_EQ(source_chunks, 1u);
  EXPECT_TRUE(eventually([&] {
    return stats_u64("chunks") == chunks_empty + target_chunks + source_chunks;
  })) << "chunks now "
      << stats_u64("chunks");

  // An fd on the replaced file keeps reading what it had (POSIX), and the
  // name never disappears: it points to the old or the new file.
  const int old_fd = open(path("target").c_str(), O_RDONLY);
  ASSERT_GE(old_fd, 0);
  const ino_t source_ino = stat_of(path("source")).st_ino;
  ASSERT_EQ(rename2(path("source"), path("target"), 0), 0) << strerror(errno);
  EXPECT_FALSE(lexists(path("source")));
  EXPECT_EQ(stat_of(path("target")).st_ino, source_ino);
  EXPECT_TRUE(same_bytes(new_content, read_file(path("target"))));
  EXPECT_TRUE(same_bytes(old_content, pread_exact(old_fd, old_content.size(), 0)))
      << "the replaced file, read through an fd opened before the rename";
  EXPECT_EQ(stats_u64("chunks"), chunks_empty + target_chunks + source_chunks)
      << "released while still open";
  close(old_fd);
  EXPECT_TRUE(eventually([&] { return stats_u64("chunks") == chunks_empty + 1; }))
      << "the replaced file's chunks are released after its last close; chunks now "
      << stats_u64("chunks");

  remount();
  EXPECT_TRUE(same_bytes(new_content, read_file(path("target"))));
  EXPECT_EQ(stats_u64("chunks"), chunks_empty + 1);
}

TEST_F(names, rename_noreplace_and_exchange) {
  ASSERT_EQ(::mkdir(path("a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("b").c_str(), 0755), 0);
  std::string const x = random_bytes(5 * k_mib, 81);
  std::string const y = "small y";
  write_file(path("a/x"), x);
  write_file(path("b/y"), y);

  EXPECT_EQ(errno_of([&] { return rename2(path("a/x"), path("b/y"), RENAME_NOREPLACE); }), EEXIST);
  EXPECT_TRUE(same_bytes(x, read_file(path("a/x"))));
  EXPECT_EQ(read_file(path("b/y")), y);
  ASSERT_EQ(rename2(path("a/x"), path("a/x2"), RENAME_NOREPLACE), 0) << strerror(errno);
  ASSERT_EQ(rename2(path("a/x2"), path("a/x"), RENAME_NOREPLACE), 0) << strerror(errno);

  ASSERT_EQ(rename2(path("a/x"), path("b/y"), RENAME_EXCHANGE), 0) << strerror(errno);
  EXPECT_EQ(read_file(path("a/x")), y);
  EXPECT_TRUE(same_bytes(x, read_file(path("b/y"))));
  EXPECT_EQ(errno_of([&] { return rename2(path("a/x"), path("a/missing"), RENAME_EXCHANGE); }),
            ENOENT);

  // A file exchanged with a directory: the directory's ".." follows it.
  ASSERT_EQ(::mkdir(path("b/dir").c_str(), 0755), 0);
  write_file(path("b/dir/inner"), "inner");
  ASSERT_EQ(rename2(path("a/x"), path("b/dir"), RENAME_EXCHANGE), 0) << strerror(errno);
  EXPECT_TRUE(S_ISDIR(stat_of(path("a/x")).st_mode));
  EXPECT_TRUE(S_ISREG(stat_of(path("b/dir")).st_mode));
  EXPECT_EQ(read_file(path("a/x/inner")), "inner");
  EXPECT_EQ(read_file(path("b/dir")), y);
  EXPECT_EQ(stat_of(path("a/x/..")).st_ino, stat_of(path("a")).st_ino);
  EXPECT_EQ(stat_of(path("a")).st_nlink, 3u);
  EXPECT_EQ(stat_of(path("b")).st_nlink, 2u);

  remount();
  EXPECT_EQ(read_file(path("a/x/inner")), "inner");
  EXPECT_EQ(read_file(path("b/dir")), y);
  EXPECT_TRUE(same_bytes(x, read_file(path("b/y"))));
}

TEST_F(names, rename_directories_over_directories_and_type_mismatches) {
  ASSERT_EQ(::mkdir(path("src").c_str(), 0755), 0);
  write_file(path("src/f"), "f");
  ASSERT_EQ(::mkdir(path("empty").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("full").c_str(), 0755), 0);
  write_file(path("full/g"), "g");
  write_file(path("file"), "file");

  EXPECT_EQ(errno_of([&] { return rename2(path("src"), path("full"), 0); }), ENOTEMPTY);
  EXPECT_EQ(read_file(path("full/g")), "g");
  EXPECT_EQ(errno_of([&] { return rename2(path("src"), path("file"), 0); }), ENOTDIR);
  EXPECT_EQ(errno_of([&] { return rename2(path("file"), path("empty"), 0); }), EISDIR);
  EXPECT_EQ(errno_of([&] { return rename2(path("src"), path("src/inside"), 0); }), EINVAL);

  ASSERT_EQ(rename2(path("src"), path("empty"), 0), 0) << strerror(errno);
  EXPECT_FALSE(lexists(path("src")));
  EXPECT_EQ(read_file(path("empty/f")), "f");
  EXPECT_EQ(stat_of(mnt_).st_nlink, 4u) << "root holds empty/ and full/";

  remount();
  EXPECT_EQ(list_dir(mnt_), (std::set<std::string>{"empty", "file", "full"}));
  EXPECT_EQ(read_file(path("empty/f")), "f");
}

TEST_F(names, hard_links_share_content_and_count) {
  write_file(path("one"), "shared");
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  ASSERT_EQ(link(path("one").c_str(), path("two").c_str()), 0) << strerror(errno);
  ASSERT_EQ(link(path("one").c_str(), path("d/three").c_str()), 0) << strerror(errno);
  EXPECT_EQ(stat_of(path("one")).st_nlink, 3u);
  EXPECT_EQ(stat_of(path("d/three")).st_nlink, 3u);
  EXPECT_EQ(stat_of(path("one")).st_ino, stat_of(path("two")).st_ino);

  std::string const changed = random_bytes(4 * k_mib + 3, 91);
  write_file(path("two"), changed);
  EXPECT_TRUE(same_bytes(changed, read_file(path("one"))));
  EXPECT_TRUE(same_bytes(changed, read_file(path("d/three"))));

  ASSERT_EQ(unlink(path("one").c_str()), 0);
  EXPECT_EQ(stat_of(path("two")).st_nlink, 2u);
  EXPECT_TRUE(same_bytes(changed, read_file(path("two"))));
  EXPECT_EQ(errno_of([&] { return link(path("d").c_str(), path("dlink").c_str()); }), EPERM);
  EXPECT_EQ(errno_of([&] { return link(path("two").c_str(), path("d/three").c_str()); }), EEXIST);

  remount();
  EXPECT_EQ(stat_of(path("two")).st_nlink, 2u);
  EXPECT_EQ(stat_of(path("two")).st_ino, stat_of(path("d/three")).st_ino);
  ASSERT_EQ(unlink(path("two").c_str()), 0);
  EXPECT_EQ(stat_of(path("d/three")).st_nlink, 1u);
  EXPECT_TRUE(same_bytes(changed, read_file(path("d/three"))));
}

TEST_F(names, symlinks_readlink_lstat_and_dangling) {
  write_file(path("target"), "through the link");
  ASSERT_EQ(symlink("target", path("rel").c_str()), 0) << strerror(errno);
  ASSERT_EQ(symlink("/nonexistent/x/y", path("dangling").c_str()), 0);
  std::string const long_target(4095, 'L');  // PATH_MAX - 1, as on ext4
  ASSERT_EQ(symlink(long_target.c_str(), path("long").c_str()), 0) << strerror(errno);

  auto check = [&](const char* when) {
    char buf[8192];
    ssize_t n = readlink(path("rel").c_str(), buf, sizeof buf);
    ASSERT_GE(n, 0) << strerror(errno);
    EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "target") << when;
    struct stat const l = stat_of(path("rel"));
    EXPECT_TRUE(S_ISLNK(l.st_mode)) << when;
    EXPECT_EQ(l.st_size, 6) << when;
    EXPECT_EQ(read_file(path("rel")), "through the link") << when;
    struct stat st {};
    EXPECT_EQ(errno_of([&] { return stat(path("dangling").c_str(), &st); }), ENOENT) << when;
    EXPECT_TRUE(S_ISLNK(stat_of(path("dangling")).st_mode)) << when;
    n = readlink(path("long").c_str(), buf, sizeof buf);
    ASSERT_GE(n, 0) << strerror(errno);
    EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), long_target) << when;
    // A short buffer truncates without error.
    n = readlink(path("rel").c_str(), buf, 3);
    EXPECT_EQ(n, 3) << when;
  };
  check("after creation");
  remount();
  check("after remount");
}

TEST_F(names, special_files_fifo_devices_and_sockets) {
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0640), 0) << strerror(errno);
  EXPECT_TRUE(S_ISFIFO(stat_of(path("fifo")).st_mode));
  EXPECT_EQ(stat_of(path("fifo")).st_mode & 07777, 0640u);
  {
    // The fifo works as a pipe.
    const int r = open(path("fifo").c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(r, 0) << strerror(errno);
    const int w = open(path("fifo").c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(w, 0) << strerror(errno);
    ASSERT_EQ(write(w, "ping", 4), 4);
    char buf[8];
    EXPECT_EQ(read(r, buf, sizeof buf), 4);
    close(w);
    close(r);
  }
  const bool root = geteuid() == 0;
  if (root) {
    ASSERT_EQ(mknod(path("null").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0) << strerror(errno);
    ASSERT_EQ(mknod(path("blk").c_str(), S_IFBLK | 0600, makedev(7, 200)), 0) << strerror(errno);
  }

  // A unix socket bound inside the mount: it shows as a socket and accepts.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string const sock_path = path("sock").string();
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::copy(sock_path.begin(), sock_path.end(), addr.sun_path);
  const int srv = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(srv, 0);
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  ASSERT_EQ(listen(srv, 1), 0);
  EXPECT_TRUE(S_ISSOCK(stat_of(path("sock")).st_mode));
  const int cli = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(cli, 0);
  EXPECT_EQ(connect(cli, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  close(cli);
  close(srv);

  remount();
  EXPECT_TRUE(S_ISFIFO(stat_of(path("fifo")).st_mode));
  EXPECT_TRUE(S_ISSOCK(stat_of(path("sock")).st_mode));
  if (root) {
    const auto c = stat_of(path("null"));
    EXPECT_TRUE(S_ISCHR(c.st_mode));
    EXPECT_EQ(c.st_rdev, makedev(1, 3));
    const auto b = stat_of(path("blk"));
    EXPECT_TRUE(S_ISBLK(b.st_mode));
    EXPECT_EQ(b.st_rdev, makedev(7, 200));
  }
  EXPECT_EQ(unlink(path("fifo").c_str()), 0);
  EXPECT_EQ(unlink(path("sock").c_str()), 0);
}

TEST_F(names, unlinked_open_file_stays_usable_until_last_close_then_is_released) {
  const auto chunks_empty = stats_u64("chunks");
  const auto stored_empty = stats_u64("stored_bytes");
  std::string content = random_bytes(8 * k_mib, 101);
  write_file(path("doomed"), content);
  const auto file_chunks = info(path("doomed"))["chunk_count"].get<std::uint64_t>();
  ASSERT_GE(file_chunks, 2u);
  ASSERT_TRUE(eventually([&] { return stats_u64("chunks") == chunks_empty + file_chunks; }))
      << "chunks now " << stats_u64("chunks");

  const int fd = open(path("doomed").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(unlink(path("doomed").c_str()), 0) << strerror(errno);
  EXPECT_FALSE(lexists(path("doomed")));
  EXPECT_EQ(list_dir(mnt_).count("doomed"), 0u);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  EXPECT_EQ(stats_u64("chunks"), chunks_empty + file_chunks) << "released while still open";

  EXPECT_TRUE(same_bytes(content, pread_exact(fd, content.size(), 0)));
  std::string const patch = random_bytes(3000, 102);
  ASSERT_TRUE(pwrite_all(fd, patch, k_mib - 1000));
  std::copy(patch.begin(), patch.end(), content.begin() + (k_mib - 1000));
  ASSERT_EQ(fsync(fd), 0) << strerror(errno);
  EXPECT_TRUE(same_bytes(content, pread_exact(fd, content.size(), 0))) << "after a write via fd";
  // A new file may reuse nothing of it.
  write_file(path("doomed"), "new file, same name");
  EXPECT_TRUE(same_bytes(content, pread_exact(fd, content.size(), 0)));
  close(fd);

  EXPECT_TRUE(eventually([&] {
    return stats_u64("chunks") == chunks_empty + 1 &&
           stats_u64("stored_bytes") < stored_empty + 100;
  })) << "after the last close only the new small file remains; chunks "
      << stats_u64("chunks") << ", stored_bytes " << stats_u64("stored_bytes");
  remount();
  EXPECT_EQ(stats_u64("chunks"), chunks_empty + 1);
  EXPECT_EQ(read_file(path("doomed")), "new file, same name");
}

TEST_F(names, mkdir_rmdir_and_errors) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0750), 0) << strerror(errno);
  const auto d = stat_of(path("d"));
  EXPECT_TRUE(S_ISDIR(d.st_mode));
  EXPECT_EQ(d.st_mode & 07777, 0750u);
  EXPECT_EQ(d.st_nlink, 2u);
  EXPECT_EQ(stat_of(mnt_).st_nlink, 3u);
  EXPECT_EQ(errno_of([&] { return ::mkdir(path("d").c_str(), 0755); }), EEXIST);
  write_file(path("d/f"), "x");
  ASSERT_EQ(::mkdir(path("d/sub").c_str(), 0755), 0);
  EXPECT_EQ(stat_of(path("d")).st_nlink, 3u);
  EXPECT_EQ(errno_of([&] { return rmdir(path("d").c_str()); }), ENOTEMPTY);
  EXPECT_EQ(errno_of([&] { return rmdir(path("d/f").c_str()); }), ENOTDIR);
  EXPECT_EQ(errno_of([&] { return unlink(path("d/sub").c_str()); }), EISDIR);
  EXPECT_EQ(errno_of([&] { return rmdir(path("missing").c_str()); }), ENOENT);
  ASSERT_EQ(rmdir(path("d/sub").c_str()), 0) << strerror(errno);
  ASSERT_EQ(unlink(path("d/f").c_str()), 0);
  ASSERT_EQ(rmdir(path("d").c_str()), 0) << strerror(errno);
  EXPECT_FALSE(lexists(path("d")));
  EXPECT_EQ(stat_of(mnt_).st_nlink, 2u);
  remount();
  EXPECT_EQ(list_dir(mnt_), std::set<std::string>{});
}

TEST_F(names, deep_tree_of_depth_200) {
  stdfs::path p = mnt_;
  for (int i = 0; i < 200; ++i) {
    p /= "d" + std::to_string(i);
    ASSERT_EQ(::mkdir(p.c_str(), 0755), 0) << "depth " << i << ": " << strerror(errno);
  }
  write_file(p / "bottom", "at depth 200");
  EXPECT_EQ(read_file(p / "bottom"), "at depth 200");
  remount();
  EXPECT_EQ(read_file(p / "bottom"), "at depth 200");
  std::error_code ec;
  const auto removed = stdfs::remove_all(mnt_ / "d0", ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(removed, 201u);
  EXPECT_EQ(list_dir(mnt_), std::set<std::string>{});
}

TEST_F(names, directory_with_100k_entries) {
  constexpr int k_entries = 100000;
  ASSERT_EQ(::mkdir(path("big").c_str(), 0755), 0);
  const int dfd = open(path("big").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dfd, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < k_entries; ++i) {
    std::string const name = "entry-" + std::to_string(i);
    // mknod of a regular file: one FUSE request per entry, like `touch` minus
    // the open/close round trips, so the test measures the directory.
    ASSERT_EQ(mknodat(dfd, name.c_str(), S_IFREG | 0644, 0), 0) << name << ": " << strerror(errno);
  }
  close(dfd);
  const auto created = std::chrono::steady_clock::now();
  auto listing = list_dir(path("big"));
  const auto listed = std::chrono::steady_clock::now();
  EXPECT_EQ(listing.size(), static_cast<std::size_t>(k_entries));
  EXPECT_EQ(listing.count("entry-0"), 1u);
  EXPECT_EQ(listing.count("entry-99999"), 1u);
  remount();
  const auto remounted = std::chrono::steady_clock::now();
  listing = list_dir(path("big"));
  const auto relisted = std::chrono::steady_clock::now();
  EXPECT_EQ(listing.size(), static_cast<std::size_t>(k_entries)) << "after remount";
  for (int i : {0, 1, 4242, 50000, 99999})
    EXPECT_TRUE(S_ISREG(stat_of(path("big/entry-" + std::to_string(i))).st_mode));
  EXPECT_EQ(stat_of(path("big")).st_nlink, 2u);

  using ms = std::chrono::milliseconds;
  const auto t = [](auto a, auto b) { return std::chrono::duration_cast<ms>(b - a).count(); };
  std::cout << "[ timing ] 100k entries: create " << t(start, created) << " ms, readdir "
            << t(created, listed) << " ms, cold readdir after remount " << t(remounted, relisted)
            << " ms\n";
  RecordProperty("create_ms", static_cast<int>(t(start, created)));
  RecordProperty("readdir_ms", static_cast<int>(t(created, listed)));
}

// 255-byte names of any bytes but '/' and NUL.
std::vector<std::string> odd_names() {
  std::vector<std::string> out;
  std::string all;
  for (int b = 1; b < 256; ++b)
    if (b != '/') all.push_back(static_cast<char>(b));
  all.push_back('!');  // 254 distinct bytes + 1 = 255
  out.push_back(all);
  std::reverse(all.begin(), all.end());
  out.push_back(all);
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    std::string n = random_bytes(255, 1000 + seed);
    for (auto& c : n)
      if (c == '\0' || c == '/') c = 'x';
    out.push_back(n);
  }
  out.push_back(std::string(255, 'a'));
  out.push_back("\xff\xfe invalid utf-8 \xc3\x28 and newline\n and tab\t");
  return out;
}

TEST_F(names, names_of_255_arbitrary_bytes_and_256_is_too_long) {
  const auto odd = odd_names();
  for (const auto& n : odd) write_file(mnt_ / n, n);
  ASSERT_EQ(::mkdir((mnt_ / (std::string(254, 'd') + "D")).c_str(), 0755), 0) << strerror(errno);
  std::set<std::string> expected(odd.begin(), odd.end());
  expected.insert(std::string(254, 'd') + "D");

  auto check = [&](const char* when) {
    EXPECT_EQ(list_dir(mnt_), expected) << when;
    for (auto const& n : odd) EXPECT_EQ(read_file(mnt_ / n), n) << when;
  };
  check("after creation");

  std::string const too_long(256, 'z');
  EXPECT_EQ(errno_of([&] {
              int const fd = open((mnt_ / too_long).c_str(), O_WRONLY | O_CREAT, 0644);
              if (fd >= 0) close(fd);
              return fd >= 0 ? 0 : -1;
            }),
            ENAMETOOLONG);
  EXPECT_EQ(errno_of([&] { return ::mkdir((mnt_ / too_long).c_str(), 0755); }), ENAMETOOLONG);
  EXPECT_EQ(errno_of([&] { return symlink("x", (mnt_ / too_long).c_str()); }), ENAMETOOLONG);
  EXPECT_EQ(errno_of([&] { return link((mnt_ / odd[0]).c_str(), (mnt_ / too_long).c_str()); }),
            ENAMETOOLONG);
  EXPECT_EQ(errno_of([&] { return rename2(mnt_ / odd[0], mnt_ / too_long, 0); }), ENAMETOOLONG);
  EXPECT_EQ(errno_of([&] { return mkfifo((mnt_ / too_long).c_str(), 0644); }), ENAMETOOLONG);
  struct stat st {};
  EXPECT_EQ(errno_of([&] { return lstat((mnt_ / too_long).c_str(), &st); }), ENAMETOOLONG);
  check("after the failed calls");

  remount();
  check("after remount");
}

}  // namespace
}  // namespace densefs::test
