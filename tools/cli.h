// Shared plumbing for subcommands (private to tools/): CLI11 parsing that
// reports errors as one line, and JSON/xattr helpers.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/tool_main.h"

namespace densefs::store {
class store;
}

namespace densefs::tools {

// Parses `args` into `app`. Returns an exit status when the command is done
// (help printed: 0; usage error printed as "densefs: NAME: why": 2), or
// nothing when the caller should go on.
std::optional<int> parse_cli(CLI::App& app, const std::vector<std::string>& args,
                             const tool_io& io);

// Prints "densefs: <what>: <why>" on io.err.
void print_error(const tool_io& io, const std::string& what, const std::string& why);

// The value of a virtual xattr, or nothing when the file has no such xattr
// or the file system has no xattrs (ENODATA, ENOTSUP). Other failures throw
// std::system_error naming the path.
std::optional<std::string> read_xattr(const std::string& path, const char* name);
// The same for an open file (`path` only names it in errors).
std::optional<std::string> read_xattr(int fd, const std::string& path, const char* name);

// The store directory of the daemon serving `info` (the user.densefs.info
// JSON of a file on a live mount), where its control socket lives. Throws
// std::runtime_error naming `path` when the daemon does not say.
std::string mount_store_dir(const std::string& info, const std::string& path);

// Long-running commands show a progress line only on a terminal: when
// io.err is the process's real stderr and that is a tty.
bool progress_wanted(const tool_io& io);

// One file of an unmounted store, for commands that read it with --store
// (cat, czip pack): the store opened read-only without a chunk cache (each
// chunk is read once) and the file's inode, from a path inside the store
// ("/a/b" or "a/b"). Throws store_error naming what is missing.
struct offline_file {
  std::unique_ptr<store::store> store;
  std::uint64_t ino = 0;
};
offline_file open_offline_file(const std::string& store_dir, const std::string& path);

// Closes `fd` (when >= 0) on scope exit.
struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// The store's exclusive lock (store::store::lock: throws "already mounted")
// for commands that change an unmounted store; released on destruction.
class store_lock {
 public:
  explicit store_lock(const std::filesystem::path& store_dir);
  ~store_lock();
  store_lock(store_lock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  store_lock(const store_lock&) = delete;
  store_lock& operator=(const store_lock&) = delete;

 private:
  friend std::optional<store_lock> lock_unless_mounted(const std::filesystem::path& store_dir);
  struct taken {
    int fd;
  };
  explicit store_lock(taken t) : fd_(t.fd) {}
  int fd_ = -1;
};

// For commands that work on a store mounted or not (gc, scrub): its lock
// when it is not mounted, nothing when a daemon holds it (then the command
// asks the daemon). Other errors (no store there) throw.
std::optional<store_lock> lock_unless_mounted(const std::filesystem::path& store_dir);

// `text` made absolute and normal, without a trailing '/': the daemon runs
// in /, and mount tables list paths without one.
std::filesystem::path absolute_path(const std::string& text);
// STORE as commands take it: a store directory, or a scale-out volume's
// postgresql:// (postgres://) URI, which names the volume's local directory
// under `base` (store::client_directory; made on first use).
bool is_volume_uri(const std::string& text);
std::filesystem::path store_path(const std::string& text, const std::filesystem::path& base = {});

// Where a command writes a result file: "-" is io.out; any other path is
// written to a temporary file beside it and renamed over it by commit(), so
// a failed command never leaves a partial OUT (the destructor removes the
// temporary file). Failures throw std::system_error naming the path.
class output_file {
 public:
  // `mode`: the file's permissions before the umask (0600 for what only
  // the store's owner may read: a metadata dump).
  output_file(const std::string& path, const tool_io& io, mode_t mode = 0666);
  ~output_file();
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;

  void write(std::string_view bytes);
  // A file (not "-") can be overwritten in place before commit(): formats
  // that write their header last (CZIP) use it.
  bool seekable() const { return fd_ >= 0; }
  void write_at(std::uint64_t offset, std::string_view bytes);
  void commit();

 private:
  std::string path_;
  std::string temp_;
  std::ostream* stream_ = nullptr;  // for "-"
  int fd_ = -1;
};

// An input file ("-" is standard input), read in pieces or whole. Failures
// throw std::system_error naming the path.
class input_file {
 public:
  explicit input_file(const std::string& path);
  ~input_file();
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;

  // Up to n bytes; fewer only at the end of the input.
  std::string read(std::size_t n);
  // Everything that is left; throws std::system_error(EFBIG) past `limit`.
  std::string read_all(std::size_t limit);

 private:
  std::string path_;
  int fd_ = -1;
  bool owned_ = false;
};

}  // namespace densefs::tools
