// The real-mount test fixture: a fresh store in a temporary directory under
// /var/tmp, mounted by the densefs binary running in the foreground as a child
// of the test, and helpers to look at the mount the way a user would.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include <vector>
#include "tests/test_env.h"

namespace densefs::test {

namespace stdfs = std::filesystem;

// The densefs binary of this build tree (a generated source:
// tests/mount/CMakeLists.txt); DENSEFS_TEST_BINARY overrides it.
const char* built_densefs_binary();

inline constexpr std::uint64_t k_kib = 1024;
inline constexpr std::uint64_t k_mib = 1024 * k_kib;
inline constexpr std::uint64_t k_gib = 1024 * k_mib;

// Built with ASan or TSan (GCC defines __SANITIZE_*, clang has
// __has_feature): the daemon runs several times slower, and RSS measures
// the sanitizer's shadow memory and quarantine.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool k_sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool k_sanitized_build = true;
#else
inline constexpr bool k_sanitized_build = false;
#endif
#else
inline constexpr bool k_sanitized_build = false;
#endif

// The densefs binary under test: DENSEFS_TEST_BINARY from the environment
// when set (e.g. a sanitizer build), else the one built with these tests.
std::string densefs_binary();

struct command_result {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] (PATH is searched) with the given arguments, capturing stdout
// and stderr. Kills it and reports timed_out after `timeout`.
command_result run_command(const std::vector<std::string>& argv,
                           std::chrono::seconds timeout = std::chrono::seconds(120));

// Deterministic test data. Incompressible: a seeded PRNG stream.
// Compressible: text-like lines from a small vocabulary (zstd saves > 70%).
std::string random_bytes(std::size_t n, std::uint64_t seed);
std::string compressible_bytes(std::size_t n, std::uint64_t seed);

// Whole-file helpers; they fail the test (ADD_FAILURE) with the errno and
// path on any error and return what they could.
void write_file(const stdfs::path& p, std::string_view data, mode_t mode = 0644);
std::string read_file(const stdfs::path& p);
// pread of exactly n bytes at offset (fewer only at EOF).
std::string pread_exact(int fd, std::size_t n, std::uint64_t offset);
// pwrite of all bytes; false (with a failure recorded) on error.
bool pwrite_all(int fd, std::string_view data, std::uint64_t offset);

std::uint64_t xxh3(std::string_view data);

// Compares two byte strings; on mismatch the message names the first
// differing offset instead of dumping megabytes.
::testing::AssertionResult same_bytes(std::string_view expected, std::string_view actual);

// Polls `condition` every 50 ms until it holds or `limit` passes.
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds limit = std::chrono::milliseconds(5000));

// True when `dir` is the mount point of a mounted file system (from
// /proc/self/mountinfo), and its fs type when so.
std::optional<std::string> mounted_fs_type(const stdfs::path& dir);

// Whether every mount of this run is a writer beside others
// (DENSEFS_TEST_MOUNT_OPTIONS has `shared`: scale_out_suite_test.sh's
// second pass). Such mounts refuse -o writeback_cache (fs/mount.cpp).
bool mounts_shared();

// Whether the stores of this run keep their records in PostgreSQL
// (DENSEFS_TEST_POSTGRES: scale_out_suite_test.sh).
bool mounts_on_postgres();

class mount_test : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // -o options for `densefs mount`; empty means none.
  virtual std::string mount_options() const { return {}; }

  // Starts `densefs mount -f STORE MNT` and waits until MNT is mounted.
  void mount();
  // fusermount3 -u MNT, then waits for the daemon and expects exit status 0.
  void unmount();
  void remount() {
    unmount();
    mount();
  }
  // SIGKILL to the daemon (a crash), runs `after_kill` (e.g. to close fds
  // still open on the dead mount), then clears the dead mount.
  void kill_daemon(const std::function<void()>& after_kill = {});
  bool mounted() const { return daemon_pid_ > 0; }
  // `densefs sync MNT`: everything written so far committed and synced
  // (write-behind keeps closed files' data staged until a group commit;
  // sync(2) does not reach a FUSE daemon). Fails the test if it fails.
  void sync_mount();

  // `densefs stats MNT --json` and `densefs info PATH --json`, parsed.
  nlohmann::json stats();
  nlohmann::json info(const stdfs::path& p);
  std::uint64_t stats_u64(const char* field);

  // The daemon's stderr so far (for failure messages).
  std::string daemon_log() const;
  // How many lines of daemon_log() contain `what`.
  std::size_t log_lines_containing(std::string_view what) const;

  stdfs::path path(std::string_view relative) const { return mnt_ / relative; }

  stdfs::path work_;     // temporary directory holding everything below
  stdfs::path store_;    // the store
  stdfs::path mnt_;      // the mount point
  stdfs::path scratch_;  // a plain ext4 directory for reference behaviour
  pid_t daemon_pid_ = -1;
  int mount_count_ = 0;
};

// The mount setups the POSIX-behaviour suites run under (INSTANTIATE_TEST_SUITE_P
// with posix_mount_setups() and mount_setup_name): default caches,
// writeback_cache, and no kernel caching of names and attributes.
inline auto posix_mount_setups() {
  return ::testing::Values(std::string(), std::string("writeback_cache"),
                           std::string("entry_timeout=0,attr_timeout=0"));
}
inline std::string mount_setup_name(const ::testing::TestParamInfo<std::string>& info) {
  if (info.param.empty()) return "default";
  if (info.param == "writeback_cache") return info.param;
  return "timeouts0";
}

}  // namespace densefs::test
