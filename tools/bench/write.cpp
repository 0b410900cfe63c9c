// The write workloads' own parts: one big file written sequentially and
// fsynced, and a portable tree copy (cp -a and rsync -a themselves are run
// as commands, bench_main.cpp). Portable POSIX only.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <vector>

#include "tools/bench/bench.h"

namespace densefs::tools::bench {
namespace {

// 1 MiB writes: what cp and dd use on Linux for big files.
constexpr std::size_t k_write_buffer = 1 << 20;

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(path);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Copies one regular file; returns its size. No fsync: a tree copy
// measures what cp does.
std::uint64_t copy_file(const std::string& from, const std::string& to, mode_t mode, bool synced) {
  const int in = ::open(from.c_str(), O_RDONLY);
  if (in < 0) fail(from);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode & 0777);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    errno = e;
    fail(to);
  }
  std::vector<char> buffer(k_write_buffer);
  std::uint64_t total = 0;
  try {
    for (;;) {
      const ssize_t n = ::read(in, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(from);
      if (n == 0) break;
      write_all(out, buffer.data(), static_cast<std::size_t>(n), to);
      total += static_cast<std::uint64_t>(n);
    }
    if (synced && ::fsync(out) != 0) fail(to);
  } catch (...) {
    ::close(in);
    ::close(out);
    throw;
  }
  ::close(in);
  if (::close(out) != 0) fail(to);
  return total;
}

std::vector<std::string> sorted_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void copy_tree_into(const std::string& from, const std::string& to, std::uint64_t cap,
                    std::uint64_t& copied) {
  for (const auto& name : sorted_names(from)) {
    if (copied >= cap) return;
    const std::string src = from + "/" + name;
    const std::string dst = to + "/" + name;
    struct stat st {};
    if (::lstat(src.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (::access(src.c_str(), R_OK | X_OK) != 0) continue;
      if (::mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) fail(dst);
      copy_tree_into(src, dst, cap, copied);
    } else if (S_ISLNK(st.st_mode)) {
      std::string link(4096, '\0');
      const ssize_t n = ::readlink(src.c_str(), link.data(), link.size());
      if (n < 0) continue;
      link.resize(static_cast<std::size_t>(n));
      if (::symlink(link.c_str(), dst.c_str()) != 0 && errno != EEXIST) fail(dst);
    } else if (S_ISREG(st.st_mode)) {
      if (::access(src.c_str(), R_OK) != 0) continue;  // the source's business
      copied += copy_file(src, dst, st.st_mode | 0600, false);
    }
    // Devices, fifos and sockets are no benchmark input.
  }
}

}  // namespace

worker_counts write_file(const std::string& from, const std::string& to, bool synced) {
  worker_counts c;
  c.bytes = copy_file(from, to, 0644, synced);
  c.entries = 1;
  return c;
}

std::uint64_t copy_tree(const std::string& from, const std::string& to, std::uint64_t cap) {
  if (::mkdir(to.c_str(), 0755) != 0 && errno != EEXIST) fail(to);
  std::uint64_t copied = 0;
  copy_tree_into(from, to, cap, copied);
  return copied;
}

}  // namespace densefs::tools::bench
