// densefs umount MNT: fusermount3 -u, then wait until the daemon has let go
// of the store, so a remount or a backup of STORE right after is safe.
#include <fcntl.h>
#include <spawn.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "store/store.h"
#include "tools/cli.h"

extern char** environ;

namespace densefs::tools {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && s.size() - i >= 4) {
      const auto octal = [](char c) { return c >= '0' && c <= '7'; };
      if (octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
        out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// Every mount in this namespace, in mountinfo's order: mount point,
// file system type and source, unescaped.
struct mount_entry {
  std::string mountpoint;
  std::string fstype;
  std::string source;
};
std::vector<mount_entry> mounts() {
  std::vector<mount_entry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    std::string word;
    while (fields >> word && word != "-") {
    }
    std::string fstype, source;
    fields >> fstype >> source;
    out.push_back({unescape_mountinfo(point), fstype, unescape_mountinfo(source)});
  }
  return out;
}

// The store behind a densefs mount at `mountpoint`, from the fsname that
// fs::mount sets; empty when the path is not a densefs mount.
std::string store_of_mount(const std::string& mountpoint) {
  std::string found;
  for (const mount_entry& m : mounts()) {
    if (m.mountpoint != mountpoint) continue;
    // The last matching line is the mount on top.
    found = m.fstype == "fuse.densefs" ? m.source : std::string();
  }
  return found;
}

// Whether a densefs mount of `store_dir` is left in this namespace: a
// second mount point bound to the first (fs::mount) keeps the daemon
// serving after one of them is unmounted.
bool store_still_mounted(const std::string& store_dir) {
  for (const mount_entry& m : mounts()) {
    if (m.fstype != "fuse.densefs" || m.source != store_dir) continue;
    // A live one: a bind left behind by a daemon that was killed answers
    // ENOTCONN, and must not stop us waiting for the daemon we unmounted.
    struct statfs info {};
    if (::statfs(m.mountpoint.c_str(), &info) == 0) return true;
  }
  return false;
}

// Runs fusermount3 -u; returns its exit status and what it wrote on stderr.
int run_fusermount(const std::string& mountpoint, std::string& message) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);

  std::string arg0 = "fusermount3", arg1 = "-u", arg2 = mountpoint;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = -1;
  // mount helpers may run with PATH unset: fall back to where Debian puts it.
  int rc = ::posix_spawnp(&pid, "fusermount3", &actions, nullptr, argv, environ);
  for (const char* path : {"/usr/bin/fusermount3", "/bin/fusermount3"}) {
    if (rc != ENOENT) break;
    rc = ::posix_spawn(&pid, path, &actions, nullptr, argv, environ);
  }
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw std::system_error(rc, std::generic_category(), "cannot run fusermount3");
  }

  char buf[1024];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    message.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "waitpid");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// FUSE unmount returns before the daemon has finished flushing and closing
// the store; its lock on the store is released last.
bool wait_for_store_release(const std::string& store_dir, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    try {
      const int fd = store::store::lock(store_dir);
      ::close(fd);
      return true;
    } catch (const store::store_error& e) {
      if (e.error_number() != EBUSY) return true;  // nothing left to wait for
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int umount_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Unmount a densefs mount; returns once everything is written to the store.",
               "densefs umount"};
  std::string mnt;
  app.add_option("MOUNTPOINT", mnt, "where the store is mounted")->required();
  if (auto done = parse_cli(app, args, io)) return *done;

  const std::string mountpoint = absolute_path(mnt).string();
  const std::string store_dir = store_of_mount(mountpoint);

  std::string message;
  if (run_fusermount(mountpoint, message) != 0) {
    // fusermount3 says "fusermount3: <why>"; keep the why, on one line.
    if (message.empty()) message = "fusermount3 -u failed";
    const auto first_line = message.substr(0, message.find('\n'));
    const std::string prefix = "fusermount3: ";
    print_error(io, "umount " + mountpoint,
                first_line.rfind(prefix, 0) == 0 ? first_line.substr(prefix.size()) : first_line);
    return k_exit_failure;
  }
  // Still served at another mount point: the daemon keeps running.
  if (!store_dir.empty() && store_still_mounted(store_dir)) return k_exit_ok;
  if (!store_dir.empty() && !wait_for_store_release(store_dir, std::chrono::seconds(120))) {
    print_error(io, "umount " + mountpoint,
                "unmounted, but the daemon still holds " + store_dir + " after 120 s");
    return k_exit_failure;
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
