// The read workloads: every file of a tree split over N processes, or one
// big file sequentially. Plain read(2) into one buffer, as cat or a backup
// tool would; portable POSIX only.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "tools/bench/bench.h"

namespace densefs::tools::bench {
namespace {

// Big enough that syscalls do not dominate, small enough to stay in L2.
constexpr std::size_t k_read_buffer = 256 * 1024;

}  // namespace

std::vector<std::string> list_files(const std::string& root) {
  std::vector<std::string> files;
  std::vector<std::string> pending{root};
  while (!pending.empty()) {
    const std::string dir = std::move(pending.back());
    pending.pop_back();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string path = dir + "/" + name;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        pending.push_back(std::move(path));
      } else if (S_ISREG(st.st_mode)) {
        files.push_back(std::move(path));
      }
    }
    ::closedir(d);
  }
  // Sorted: every target gets the same split over the workers.
  std::sort(files.begin(), files.end());
  return files;
}

worker_counts read_file(const std::string& path) {
  worker_counts c;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    ++c.errors;
    return c;
  }
  std::vector<char> buffer(k_read_buffer);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ++c.errors;  // counted as an error, not as a file read
      ::close(fd);
      return c;
    }
    if (n == 0) break;
    c.bytes += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  ++c.entries;
  return c;
}

worker_counts read_files(const std::vector<std::string>& files, int index, int n) {
  worker_counts total;
  for (std::size_t i = static_cast<std::size_t>(index); i < files.size();
       i += static_cast<std::size_t>(n)) {
    const worker_counts c = read_file(files[i]);
    total.entries += c.entries;
    total.bytes += c.bytes;
    total.errors += c.errors;
  }
  return total;
}

}  // namespace densefs::tools::bench
