#include "tests/mount/mount_fixture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace densefs::test {

namespace {

using namespace std::chrono_literals;

// How long a mount may take to appear: RocksDB opens in well under a second
// here, so 10 s means something is wrong, not slow.
constexpr auto k_mount_timeout = 10s;
// Unmount flushes everything staged (up to max_staged_bytes) first.
constexpr auto k_unmount_timeout = 120s;

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// Waits for `pid` up to `limit`; nullopt on timeout (the child still runs).
std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

std::string tail(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

// Mount points in /proc/self/mountinfo escape space, tab, newline and
// backslash as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (std::size_t k = 1; k <= 3; ++k) {
        const char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string densefs_binary() {
  const char* env = std::getenv("DENSEFS_TEST_BINARY");
  return env != nullptr && *env != '\0' ? env : built_densefs_binary();
}

command_result run_command(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  command_result result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << errno_text(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    ADD_FAILURE() << "cannot run " << argv[0] << ": " << errno_text(rc);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<pollfd, 2> fds{pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<std::string*, 2> sinks{&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int n = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::string out(n, '\0');
  std::uint64_t state = seed * 0x2545f4914f6cdd1dULL + 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t const v = splitmix64(state);
    std::memcpy(out.data() + i, &v, 8);
  }
  if (i < n) {
    std::uint64_t const v = splitmix64(state);
    std::memcpy(out.data() + i, &v, n - i);
  }
  return out;
}

std::string compressible_bytes(std::size_t n, std::uint64_t seed) {
  static constexpr std::array<std::string_view, 16> words{
      "alpha", "bravo",  "charlie", "delta", "echo", "foxtrot",  "golf",  "hotel",
      "india", "juliet", "kilo",    "lima",  "mike", "november", "oscar", "papa"};
  std::string out;
  out.reserve(n + 128);
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 7;
  std::uint64_t line = 0;
  while (out.size() < n) {
    out += "line ";
    out += std::to_string(line++);
    out += ':';
    std::uint64_t r = splitmix64(state);
    for (int w = 0; w < 8; ++w) {
      out += ' ';
      out += words[r & 15];
      r >>= 4;
    }
    out += '\n';
  }
  out.resize(n);
  return out;
}

void write_file(const stdfs::path& p, std::string_view data, mode_t mode) {
  const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    ADD_FAILURE() << "open " << p << " for writing: " << errno_text(errno);
    return;
  }
  // Writes of at most 1 MiB, like cp: the size FUSE passes through anyway.
  std::size_t done = 0;
  while (done < data.size()) {
    std::size_t const piece = std::min<std::size_t>(data.size() - done, k_mib);
    const ssize_t n = write(fd, data.data() + done, piece);
    if (n < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "write " << p << " at " << done << ": " << errno_text(errno);
      close(fd);
      return;
    }
    done += static_cast<std::size_t>(n);
  }
  if (close(fd) != 0) ADD_FAILURE() << "close " << p << ": " << errno_text(errno);
}

std::string read_file(const stdfs::path& p) {
  std::string out;
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << "open " << p << " for reading: " << errno_text(errno);
    return out;
  }
  struct stat st {};
  if (fstat(fd, &st) == 0) out.reserve(static_cast<std::size_t>(st.st_size));
  std::string buf(k_mib, '\0');
  for (;;) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "read " << p << " at " << out.size() << ": " << errno_text(errno);
      break;
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
  close(fd);
  return out;
}

std::string pread_exact(int fd, std::size_t n, std::uint64_t offset) {
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fd, out.data() + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "pread of " << n << " bytes at " << offset << ": " << errno_text(errno);
      break;
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  out.resize(done);
  return out;
}

bool pwrite_all(int fd, std::string_view data, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "pwrite of " << data.size() << " bytes at " << offset << ": "
                    << errno_text(errno);
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::uint64_t xxh3(std::string_view data) {
  return XXH3_64bits(data.data(), data.size());
}

::testing::AssertionResult same_bytes(std::string_view expected, std::string_view actual) {
  if (expected == actual) return ::testing::AssertionSuccess();
  std::size_t const common = std::min(expected.size(), actual.size());
  std::size_t first = 0;
  while (first < common && expected[first] == actual[first]) ++first;
  std::size_t last = first;
  while (last < common && expected[last] != actual[last]) ++last;
  auto result = ::testing::AssertionFailure();
  result << "expected " << expected.size() << " bytes, got " << actual.size() << " bytes";
  if (first < common) {
    result << "; first difference at offset " << first << " (expected 0x" << std::hex
           << (static_cast<unsigned>(static_cast<unsigned char>(expected[first]))) << ", got 0x"
           << (static_cast<unsigned>(static_cast<unsigned char>(actual[first]))) << std::dec
           << "), differing run of " << (last - first) << " bytes";
    bool all_zero = true;
    for (std::size_t i = first; i < last; ++i) all_zero = all_zero && actual[i] == 0;
    if (all_zero) result << " (all zeros in what was read)";
  } else {
    result << "; the shorter is a prefix of the longer";
  }
  return result;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

std::optional<std::string> mounted_fs_type(const stdfs::path& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::string const want = dir.lexically_normal().string();
  std::optional<std::string> found;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - type source super
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (unescape_mountinfo(point) != want) continue;
    std::string f;
    while (fields >> f && f != "-") {
    }
    std::string type;
    fields >> type;
    found = type;  // the last match is the one on top
  }
  return found;
}

namespace {

// Whether the comma-separated `options` list `name` itself.
bool option_listed(const std::string& options, std::string_view name) {
  return ("," + options + ",").find("," + std::string(name) + ",") != std::string::npos;
}

}  // namespace

bool mounts_shared() {
  const char* extra = std::getenv("DENSEFS_TEST_MOUNT_OPTIONS");
  return extra && option_listed(extra, "shared");
}

bool mounts_on_postgres() {
  const char* pg = std::getenv("DENSEFS_TEST_POSTGRES");
  return pg && *pg;
}

void mount_test::SetUp() {
  if (access("/dev/fuse", F_OK) != 0)
    DENSEFS_SKIP_UNLESS_REQUIRED(
        "no /dev/fuse (load the fuse module; in a container pass --device /dev/fuse)");
  if (mounts_shared() && option_listed(mount_options(), "writeback_cache"))
    GTEST_SKIP() << "-o writeback_cache is refused beside other writers (fs/mount.cpp)";
  ASSERT_EQ(access(densefs_binary().c_str(), X_OK), 0)
      << "the densefs binary " << densefs_binary() << " is missing: " << errno_text(errno);

  // /var/tmp: large files here would not fit a small tmpfs /tmp.
  std::string templ = "/var/tmp/densefs-mount-test-XXXXXX";
  ASSERT_NE(mkdtemp(templ.data()), nullptr) << "mkdtemp in /var/tmp: " << errno_text(errno);
  work_ = stdfs::path(templ);
  store_ = work_ / "store";
  mnt_ = work_ / "mnt";
  scratch_ = work_ / "scratch";
  ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0) << errno_text(errno);
  ASSERT_EQ(::mkdir(scratch_.c_str(), 0755), 0) << errno_text(errno);

  std::vector<std::string> mkfs_args = {densefs_binary(), "mkfs", store_.string()};
  // DENSEFS_TEST_POSTGRES=CONNINFO (without dbname; scale_out_suite_test.sh
  // sets it): every store keeps its records in a new database of that
  // server, so the suite runs on the PostgreSQL engine (docs/scale-out.md).
  if (const char* pg = std::getenv("DENSEFS_TEST_POSTGRES"); pg && *pg) {
    static std::atomic<int> next{0};
    const std::string db = "densefs_" + std::to_string(::getpid()) + "_" + std::to_string(next++);
    const auto created =
        run_command({"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1",
                     std::string(pg) + " dbname=postgres", "-c", "CREATE DATABASE " + db});
    ASSERT_EQ(created.exit_code, 0) << "creating database " << db << ": " << created.err;
    mkfs_args.insert(mkfs_args.end(), {"--meta", std::string(pg) + " dbname=" + db});
    // DENSEFS_TEST_S3_ENDPOINT too (scale_out_suite_test.sh): the store's
    // packs are objects under a prefix of its own in one bucket.
    if (const char* s3 = std::getenv("DENSEFS_TEST_S3_ENDPOINT"); s3 && *s3)
      mkfs_args.insert(mkfs_args.end(),
                       {"--data", "s3://densefs-suite/" + db + "?endpoint=" + std::string(s3)});
  }
  const auto mkfs = run_command(mkfs_args);
  ASSERT_EQ(mkfs.exit_code, 0) << "densefs mkfs " << store_ << " failed:\n" << mkfs.err << mkfs.out;
  ASSERT_NO_FATAL_FAILURE(mount());
}

void mount_test::sync_mount() {
  const auto r = run_command({densefs_binary(), "sync", mnt_.string()});
  ASSERT_EQ(r.exit_code, 0) << "densefs sync " << mnt_ << ": " << r.err;
}

void mount_test::TearDown() {
  if (work_.empty()) return;
  if (mounted()) unmount();
  if (HasFailure()) {
    std::string const log = daemon_log();
    if (!log.empty()) std::cerr << "densefs daemon log (tail):\n" << tail(log, 4000) << "\n";
  }
  if (mounted_fs_type(mnt_)) {
    // Never remove_all through a live mount: that would delete through it and
    // hide the real problem. Leave it for a human.
    ADD_FAILURE() << mnt_ << " is still mounted after teardown; leaving " << work_;
    return;
  }
  if (HasFailure() && std::getenv("DENSEFS_KEEP_FAILED") != nullptr) {
    std::cerr << "kept " << work_ << " (DENSEFS_KEEP_FAILED)\n";
    return;
  }
  std::error_code ec;
  stdfs::remove_all(work_, ec);
}

std::size_t mount_test::log_lines_containing(std::string_view what) const {
  std::istringstream in(daemon_log());
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos) ++n;
  return n;
}

void mount_test::mount() {
  ASSERT_FALSE(mounted()) << "mount() while mounted";
  std::string const log_path = (work_ / "daemon.log").string();
  std::vector<std::string> argv{densefs_binary(), "mount", "-f", store_.string(), mnt_.string()};
  if (std::string const o = mount_options(); !o.empty()) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  // Every mount of a suite with more options (scale_out_suite_test.sh:
  // `shared`, the same tests through a writer beside others).
  if (const char* extra = std::getenv("DENSEFS_TEST_MOUNT_OPTIONS"); extra && *extra) {
    argv.push_back("-o");
    argv.push_back(extra);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ASSERT_EQ(rc, 0) << "posix_spawn " << densefs_binary() << ": " << errno_text(rc);
  ++mount_count_;

  const auto deadline = std::chrono::steady_clock::now() + k_mount_timeout;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      FAIL() << "densefs mount -f exited before mounting (" << status_text(status)
             << "); its output:\n"
             << tail(daemon_log(), 4000);
    }
    if (const auto type = mounted_fs_type(mnt_); type && type->rfind("fuse", 0) == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << mnt_ << " was not mounted within 10 s of starting densefs mount -f; its output:\n"
             << tail(daemon_log(), 4000);
    }
    std::this_thread::sleep_for(10ms);
  }
  // The kernel shows the mount before the daemon has opened its store and
  // logged "mounted"; a stat through the mount waits for both (the kernel
  // holds requests until the session loop runs), so a test may read the
  // daemon's log at once.
  struct stat ready {};
  ::stat(mnt_.c_str(), &ready);
  daemon_pid_ = pid;
}

void mount_test::unmount() {
  ASSERT_TRUE(mounted()) << "unmount() while not mounted";
  const pid_t pid = daemon_pid_;
  daemon_pid_ = -1;
  const auto um = run_command({"fusermount3", "-u", mnt_.string()});
  if (um.exit_code != 0) {
    ADD_FAILURE() << "fusermount3 -u " << mnt_ << " failed: " << um.err;
    run_command({"fusermount3", "-uz", mnt_.string()});
  }
  const auto status = wait_for(pid, k_unmount_timeout);
  if (!status) {
    // Where each thread waits: the one thing that explains a hang later.
    const auto stacks = run_command(
        {"gdb", "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"}, 60s);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    FAIL() << "densefs did not exit within 120 s of being unmounted; its output:\n"
           << tail(daemon_log(), 4000) << "\nits threads (gdb):\n"
           << tail(stacks.out + stacks.err, 48000);
  }
  // 64 KB of the log: a whole sanitizer report (TSan's exit status 66).
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "densefs mount -f ended with " << status_text(*status) << " after unmount; its output:\n"
      << tail(daemon_log(), 64000);
  EXPECT_FALSE(mounted_fs_type(mnt_)) << mnt_ << " is still mounted after unmount";
}

void mount_test::kill_daemon(const std::function<void()>& after_kill) {
  ASSERT_TRUE(mounted());
  const pid_t pid = daemon_pid_;
  daemon_pid_ = -1;
  ASSERT_EQ(kill(pid, SIGKILL), 0) << errno_text(errno);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status_text(status);
  if (after_kill) after_kill();
  // The connection is dead; the mount point stays until unmounted.
  const auto um = run_command({"fusermount3", "-u", mnt_.string()});
  if (um.exit_code != 0) {
    const auto lazy = run_command({"fusermount3", "-uz", mnt_.string()});
    ASSERT_EQ(lazy.exit_code, 0) << "cannot unmount the dead mount " << mnt_ << ": " << um.err
                                 << lazy.err;
  }
  ASSERT_FALSE(mounted_fs_type(mnt_));
}

std::string mount_test::daemon_log() const {
  std::ifstream in(work_ / "daemon.log", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json mount_test::stats() {
  const auto r = run_command({densefs_binary(), "stats", mnt_.string(), "--json"});
  if (r.exit_code != 0) {
    ADD_FAILURE() << "densefs stats " << mnt_ << " --json failed (exit " << r.exit_code
                  << "): " << r.err;
    return nlohmann::json::object();
  }
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ADD_FAILURE() << "densefs stats --json printed no JSON object:\n" << r.out;
    return nlohmann::json::object();
  }
  return j;
}

std::uint64_t mount_test::stats_u64(const char* field) {
  const auto j = stats();
  if (!j.contains(field) || !j[field].is_number_unsigned()) {
    ADD_FAILURE() << "densefs stats --json has no unsigned field \"" << field << "\": " << j.dump();
    return 0;
  }
  return j[field].get<std::uint64_t>();
}

nlohmann::json mount_test::info(const stdfs::path& p) {
  const auto r = run_command({densefs_binary(), "info", p.string(), "--json"});
  if (r.exit_code != 0) {
    ADD_FAILURE() << "densefs info " << p << " --json failed (exit " << r.exit_code
                  << "): " << r.err;
    return nlohmann::json::object();
  }
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ADD_FAILURE() << "densefs info --json printed no JSON object:\n" << r.out;
    return nlohmann::json::object();
  }
  return j;
}

}  // namespace densefs::test
