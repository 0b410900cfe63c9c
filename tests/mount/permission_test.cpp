// suid and sgid after every way of changing a file's data, by root, by the
// owner in and not in the file's group and by another user with write
// permission: the mode on densefs must equal the mode on ext4 (the scratch
// directory) after the same change by the same user. The kernel decides
// most of it; densefs applies the one rule the kernel's FUSE code leaves
// out (sgid without group-exec goes when the writer is not in the group).
#include <fcntl.h>
#include <grp.h>
#include <linux/falloc.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

// Two unprivileged users, each with a group of its own, made here when
// missing (tests run as root in CI).
constexpr const char* k_user_a = "densefs-perm-a";
constexpr const char* k_user_b = "densefs-perm-b";

struct user {
  uid_t uid = 0;
  gid_t gid = 0;
};

std::optional<user> find_user(const char* name) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwnam_r(name, &entry, buffer.data(), buffer.size(), &found) != 0 || !found)
    return std::nullopt;
  return user{found->pw_uid, found->pw_gid};
}

std::optional<user> find_or_add_user(const char* name) {
  if (auto u = find_user(name)) return u;
  run_command({"useradd", "--system", "--user-group", "--no-create-home", "--shell",
               "/usr/sbin/nologin", name});
  return find_user(name);
}

// Runs `action` in a child process as `who` (uid 0: root with all its
// capabilities; otherwise only the user's own group and no capabilities).
// Returns 0 or an errno; 255 when the switch failed.
int run_as(const user& who, const std::function<int()>& action) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (who.uid != 0 &&
        (::setgroups(1, &who.gid) != 0 || ::setresgid(who.gid, who.gid, who.gid) != 0 ||
         ::setresuid(who.uid, who.uid, who.uid) != 0))
      ::_exit(255);
    ::_exit(action());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

int errno_unless(bool ok) {
  return ok ? 0 : errno;
}

// Opens `p`, runs `io` on the fd, closes; 0 or the first errno.
int with_fd(const std::string& p, int flags, const std::function<bool(int)>& io) {
  const int fd = ::open(p.c_str(), flags);
  if (fd < 0) return errno;
  const int error = errno_unless(io(fd));
  ::close(fd);
  return error;
}

constexpr std::size_t k_file_size = 8192;

struct change {
  const char* name;
  std::function<int(const std::string& path)> apply;  // 0 or an errno
};

const std::vector<change>& changes() {
  static const std::vector<change> all = {
      {"write",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY, [](int fd) { return ::pwrite(fd, "x", 1, 2) == 1; });
       }},
      {"O_DIRECT write",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY | O_DIRECT, [](int fd) {
           void* block = nullptr;
           if (::posix_memalign(&block, 4096, 4096) != 0) return false;
           std::memset(block, 'd', 4096);
           const bool ok = ::pwrite(fd, block, 4096, 0) == 4096;
           std::free(block);
           return ok;
         });
       }},
      // ext4 leaves the bits of a file written through a shared mapping.
      {"mmap write, msync, munmap",
       [](const std::string& p) {
         return with_fd(p, O_RDWR, [](int fd) {
           void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
           if (m == MAP_FAILED) return false;
           static_cast<char*>(m)[1] = 'm';
           const bool ok = ::msync(m, 4096, MS_SYNC) == 0;
           return ::munmap(m, 4096) == 0 && ok;
         });
       }},
      {"fallocate",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY,
                        [](int fd) { return ::fallocate(fd, 0, 0, 2 * k_file_size) == 0; });
       }},
      {"fallocate KEEP_SIZE",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY, [](int fd) {
           return ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 2 * k_file_size) == 0;
         });
       }},
      {"fallocate PUNCH_HOLE",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY, [](int fd) {
           return ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0;
         });
       }},
      {"copy_file_range into it",
       [](const std::string& p) {
         const int in = ::open((p + ".src").c_str(), O_RDONLY);
         if (in < 0) return errno;
         const int error = with_fd(p, O_WRONLY, [&](int fd) {
           loff_t from = 0, to = 100;
           return ::copy_file_range(in, &from, fd, &to, 100, 0) == 100;
         });
         ::close(in);
         return error;
       }},
      {"truncate",
       [](const std::string& p) { return errno_unless(::truncate(p.c_str(), 3) == 0); }},
      {"ftruncate",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY, [](int fd) { return ::ftruncate(fd, 5) == 0; });
       }},
      {"open O_TRUNC",
       [](const std::string& p) {
         return with_fd(p, O_WRONLY | O_TRUNC, [](int) { return true; });
       }},
  };
  return all;
}

// The default mount and the two variants that change who writes back and
// what the kernel caches.
class permission : public mount_test, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string mount_options() const override {
    return "allow_other" + (GetParam().empty() ? std::string() : "," + GetParam());
  }
  void SetUp() override {
    if (::geteuid() != 0)
      DENSEFS_SKIP_UNLESS_REQUIRED("needs root: runs as two other users and as root");
    mount_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // mkdtemp made the work directory 0700: the users must reach both the
    // mount and the ext4 reference directory below it.
    ASSERT_EQ(::chmod(work_.c_str(), 0755), 0) << std::strerror(errno);
    ASSERT_EQ(::chmod(mnt_.c_str(), 0777), 0) << std::strerror(errno);
    ASSERT_EQ(::chmod(scratch_.c_str(), 0777), 0) << std::strerror(errno);
    const auto a = find_or_add_user(k_user_a);
    const auto b = find_or_add_user(k_user_b);
    if (!a || !b)
      DENSEFS_SKIP_UNLESS_REQUIRED("cannot create users " << k_user_a << " and " << k_user_b);
    a_ = *a;
    b_ = *b;
  }

  // A file of user a's with `group` and `mode`, on densefs or on ext4.
  void make_file(const std::string& p, gid_t group, mode_t mode) {
    const std::string data(k_file_size, 'a');
    write_file(p, data, 0644);
    write_file(p + ".src", data, 0644);
    ASSERT_EQ(::chown(p.c_str(), a_.uid, group), 0) << p << ": " << std::strerror(errno);
    ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p << ": " << std::strerror(errno);
  }

  user a_, b_;
};

INSTANTIATE_TEST_SUITE_P(mount_options, permission, posix_mount_setups(), mount_setup_name);

TEST_P(permission, suid_and_sgid_after_data_changes_match_ext4) {
  struct actor {
    const char* name;
    user who;
    gid_t file_group;
  };
  const actor actors[] = {
      {"root (CAP_FSETID)", user{0, 0}, a_.gid},
      {"owner in the file's group", a_, a_.gid},
      {"owner not in the file's group", a_, b_.gid},
      {"another user with write permission", b_, a_.gid},
  };
  // sgid without group-exec (the case the kernel's FUSE code gets wrong),
  // alone (the kernel then asks for no mode change at all) and with suid,
  // and sgid with group-exec.
  const mode_t modes[] = {02666, 06666, 06676};
  std::map<std::string, mode_t> on_densefs;
  int cleared = 0;
  int i = 0;
  for (const auto& who : actors) {
    for (const auto& c : changes()) {
      for (const mode_t mode : modes) {
        SCOPED_TRACE(std::string(c.name) + " by " + who.name + ", mode 0" +
                     (std::ostringstream() << std::oct << mode).str());
        const std::string name = "f" + std::to_string(i++);
        mode_t after[2] = {0, 0};
        for (int side = 0; side < 2; ++side) {
          const std::string p = ((side == 0 ? mnt_ : scratch_) / name).string();
          ASSERT_NO_FATAL_FAILURE(make_file(p, who.file_group, mode));
          ASSERT_EQ(run_as(who.who, [&] { return c.apply(p); }), 0) << p;
          struct stat st {};
          ASSERT_EQ(::stat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
          after[side] = st.st_mode & 07777;
        }
        EXPECT_EQ(after[0], after[1])
            << std::oct << "densefs 0" << after[0] << ", ext4 0" << after[1];
        on_densefs[name] = after[0];
        if (after[0] != mode) ++cleared;
      }
    }
  }
  // Something was cleared (the test would pass trivially otherwise), and
  // what was cleared is stored, not only in the kernel's cache.
  EXPECT_GT(cleared, 0);
  remount();
  for (const auto& [name, mode] : on_densefs) {
    struct stat st {};
    ASSERT_EQ(::stat(path(name).c_str(), &st), 0) << name << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_mode & 07777, mode) << name << " after remount";
  }
}

// chown(-1, -1) changes nothing but still clears the bits like a write
// (the VFS's chown rules), and a chmod by the owner that keeps sgid on a
// file whose group the owner is not in loses it: both as on ext4.
TEST_P(permission, chown_without_change_and_chmod_by_owner_match_ext4) {
  struct change_by_owner {
    const char* name;
    gid_t file_group;
    std::function<int(const std::string&)> apply;
  };
  const change_by_owner cases[] = {
      {"chown(-1, -1) by the owner not in the group", b_.gid,
       [](const std::string& p) {
         return errno_unless(::chown(p.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1)) ==
                             0);
       }},
      {"chown(-1, -1) by the owner in the group", a_.gid,
       [](const std::string& p) {
         return errno_unless(::chown(p.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(-1)) ==
                             0);
       }},
      {"chmod 02644 by the owner not in the group", b_.gid,
       [](const std::string& p) { return errno_unless(::chmod(p.c_str(), 02644) == 0); }},
      {"chmod 02644 by the owner in the group", a_.gid,
       [](const std::string& p) { return errno_unless(::chmod(p.c_str(), 02644) == 0); }},
      {"utimensat by the owner not in the group", b_.gid,
       [](const std::string& p) {
         const timespec times[2] = {{1000, 0}, {2000, 0}};
         return errno_unless(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
       }},
  };
  int i = 0;
  for (const auto& c : cases) {
    for (const mode_t mode : {06666, 06676}) {
      SCOPED_TRACE(c.name);
      const std::string name = "g" + std::to_string(i++);
      mode_t after[2] = {0, 0};
      for (int side = 0; side < 2; ++side) {
        const std::string p = ((side == 0 ? mnt_ : scratch_) / name).string();
        ASSERT_NO_FATAL_FAILURE(make_file(p, c.file_group, mode));
        ASSERT_EQ(run_as(a_, [&] { return c.apply(p); }), 0) << p;
        struct stat st {};
        ASSERT_EQ(::stat(p.c_str(), &st), 0) << p << ": " << std::strerror(errno);
        after[side] = st.st_mode & 07777;
      }
      EXPECT_EQ(after[0], after[1])
          << std::oct << "mode 0" << mode << ": densefs 0" << after[0] << ", ext4 0" << after[1];
    }
  }
}

}  // namespace
}  // namespace densefs::test
