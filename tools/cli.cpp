#include "tools/cli.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iostream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "store/export.h"
#include "store/store.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {

std::optional<int> parse_cli(CLI::App& app, const std::vector<std::string>& args,
                             const tool_io& io) {
  // CLI11 takes the words in reverse order.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    io.out << app.help();
    return k_exit_ok;
  } catch (const CLI::ParseError& e) {
    // The app is named "densefs mkfs" for its usage line; errors say "mkfs".
    std::string name = app.get_name();
    if (name.rfind("densefs ", 0) == 0) name.erase(0, 8);
    print_error(io, name, e.what());
    return k_exit_usage;
  }
  return std::nullopt;
}

void print_error(const tool_io& io, const std::string& what, const std::string& why) {
  // One line: a multi-line library message is folded.
  std::string line = why;
  std::replace(line.begin(), line.end(), '\n', ' ');
  while (!line.empty() && line.back() == ' ') line.pop_back();
  io.err << "densefs: " << what << ": " << line << '\n';
}

std::optional<std::string> read_xattr(const std::string& path, const char* name) {
  std::string value;
  // The value can change size between the two calls (stats of a live mount).
  for (int attempt = 0; attempt < 8; ++attempt) {
    const ssize_t size = ::getxattr(path.c_str(), name, nullptr, 0);
    if (size < 0) {
      if (errno == ENODATA || errno == ENOTSUP) return std::nullopt;
      throw std::system_error(errno, std::generic_category(), path);
    }
    value.resize(static_cast<std::size_t>(size) + 4096);
    const ssize_t got = ::getxattr(path.c_str(), name, value.data(), value.size());
    if (got >= 0) {
      value.resize(static_cast<std::size_t>(got));
      return value;
    }
    if (errno == ENODATA || errno == ENOTSUP) return std::nullopt;
    if (errno != ERANGE) throw std::system_error(errno, std::generic_category(), path);
  }
  throw std::system_error(ERANGE, std::generic_category(), path + ": xattr " + name);
}

std::optional<std::string> read_xattr(int fd, const std::string& path, const char* name) {
  std::string value(1024, '\0');
  for (int attempt = 0; attempt < 8; ++attempt) {
    const ssize_t got = ::fgetxattr(fd, name, value.data(), value.size());
    if (got >= 0) {
      value.resize(static_cast<std::size_t>(got));
      return value;
    }
    if (errno == ENODATA || errno == ENOTSUP) return std::nullopt;
    if (errno != ERANGE) throw std::system_error(errno, std::generic_category(), path);
    value.resize(value.size() * 4);
  }
  throw std::system_error(ERANGE, std::generic_category(), path + ": xattr " + name);
}

std::string mount_store_dir(const std::string& info, const std::string& path) {
  const auto j = nlohmann::json::parse(info, nullptr, false);
  if (!j.is_object() || !j.contains("store") || !j["store"].is_string())
    throw std::runtime_error(path +
                             ": this densefs daemon is too old for this command "
                             "(restart the mount)");
  return j["store"].get<std::string>();
}

bool progress_wanted(const tool_io& io) {
  return &io.err == &std::cerr && ::isatty(STDERR_FILENO) == 1;
}

namespace {

// Who holds a store's lock, and what to do: one line for a command that
// needs the store unmounted. A scale-out volume's client directory is named
// as the volume (what the user asked about), with the other clients.
std::string in_use_message(const std::filesystem::path& dir) {
  std::string what = "store " + dir.string();
  std::string others;
  try {
    if (const auto volume = store::store::read_volume_status(dir.string(), false)) {
      what = volume->metadata_location + " (this machine's client directory " + dir.string() + ")";
      others = "; densefs status " + dir.string() + " lists its other clients";
    }
  } catch (const store::store_error&) {
    // The database cannot be reached now: the directory names it well enough.
  }
  const auto holder = store::store::read_lock_holder(dir);
  if (!holder) return what + " is in use by another process (already mounted?)";
  const std::string pid = std::to_string(holder->pid);
  if (holder->mountpoint.empty())
    return what + " is in use by pid " + pid +
           " (densefs fsck, gc or another tool): wait for it to finish";
  return what + " is mounted on " + holder->mountpoint + " (densefs daemon pid " + pid +
         "); unmount it first: densefs umount " + holder->mountpoint + others;
}

}  // namespace

store_lock::store_lock(const std::filesystem::path& store_dir) {
  try {
    fd_ = store::store::lock(store_dir);
  } catch (const store::store_error& e) {
    if (e.error_number() != EBUSY) throw;
    throw store::store_error(EBUSY, in_use_message(store_dir));
  }
}

store_lock::~store_lock() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<store_lock> lock_unless_mounted(const std::filesystem::path& store_dir) {
  // Without store_lock's description of the holder: mounted is the
  // expected answer here, not an error.
  try {
    return store_lock(store_lock::taken{store::store::lock(store_dir)});
  } catch (const store::store_error& e) {
    if (e.error_number() != EBUSY) throw;
  }
  return std::nullopt;
}

std::filesystem::path absolute_path(const std::string& text) {
  std::filesystem::path p = std::filesystem::absolute(text).lexically_normal();
  if (p.has_relative_path() && !p.has_filename()) p = p.parent_path();
  return p;
}

bool is_volume_uri(const std::string& text) {
  return text.starts_with("postgresql://") || text.starts_with("postgres://");
}

std::filesystem::path store_path(const std::string& text, const std::filesystem::path& base) {
  if (is_volume_uri(text)) return store::store::client_directory(text, base);
  return absolute_path(text);
}

namespace {

[[noreturn]] void throw_errno(const std::string& path) {
  throw std::system_error(errno, std::generic_category(), path);
}

}  // namespace

output_file::output_file(const std::string& path, const tool_io& io, mode_t mode) : path_(path) {
  if (path == "-") {
    stream_ = &io.out;
    return;
  }
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string pattern = (dir / ("." + target.filename().string() + ".densefs-XXXXXX")).string();
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd_ < 0) throw_errno(path);
  temp_ = pattern;
  // mkstemp makes 0600; a result file gets `mode` (usually 0666) minus umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, mode & ~mask);
}

output_file::~output_file() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void output_file::write(std::string_view bytes) {
  if (stream_ != nullptr) {
    stream_->write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!*stream_) throw std::system_error(EIO, std::generic_category(), "standard output");
    return;
  }
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path_);
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void output_file::write_at(std::uint64_t offset, std::string_view bytes) {
  if (fd_ < 0) throw std::system_error(ESPIPE, std::generic_category(), path_);
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path_);
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
}

void output_file::commit() {
  if (stream_ != nullptr) {
    stream_->flush();
    if (!*stream_) throw std::system_error(EIO, std::generic_category(), "standard output");
    return;
  }
  if (::fsync(fd_) != 0) throw_errno(path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_errno(path_);
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) throw_errno(path_);
  temp_.clear();
}

input_file::input_file(const std::string& path) : path_(path == "-" ? "standard input" : path) {
  if (path == "-") {
    fd_ = STDIN_FILENO;
    return;
  }
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_errno(path);
  owned_ = true;
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    throw_errno(path);
  }
}

input_file::~input_file() {
  if (owned_) ::close(fd_);
}

std::string input_file::read(std::size_t n) {
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd_, out.data() + done, n - done);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno(path_);
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  out.resize(done);
  return out;
}

std::string input_file::read_all(std::size_t limit) {
  std::string out;
  for (;;) {
    std::string piece = read(1u << 20);
    if (piece.empty()) return out;
    out += piece;
    if (out.size() > limit) {
      throw std::system_error(EFBIG, std::generic_category(),
                              path_ + " (more than " + std::to_string(limit) + " bytes)");
    }
  }
}

offline_file open_offline_file(const std::string& store_dir, const std::string& path) {
  store::store::check(store_dir);
  store::store_open_options options;
  options.read_only = true;
  options.chunk_cache_bytes = 0;  // every chunk is read once
  add_volume_secret(store_dir, {}, options);
  offline_file f;
  f.store = store::store::open(store_dir, options);
  f.ino = store::resolve_path(*f.store, path.empty() || path.front() != '/' ? "/" + path : path);
  return f;
}

}  // namespace densefs::tools
