// The walk workload, in the spirit of Mercurial's contrib/slow-readdir.py:
// opendir/readdir on every directory and lstat on every entry, recursing
// into directories, as `hg status` or `find` do. Portable POSIX only.
#include <dirent.h>
#include <sys/stat.h>

#include <vector>

#include "tools/bench/bench.h"

namespace densefs::tools::bench {

worker_counts walk_tree(const std::string& root) {
  worker_counts c;
  std::vector<std::string> pending{root};
  while (!pending.empty()) {
    const std::string dir = std::move(pending.back());
    pending.pop_back();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      ++c.errors;
      continue;
    }
    while (const dirent* e = ::readdir(d)) {
      const char* name = e->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      std::string path = dir + "/" + name;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) {
        ++c.errors;
        continue;
      }
      ++c.entries;
      if (S_ISDIR(st.st_mode)) pending.push_back(std::move(path));
    }
    ::closedir(d);
  }
  return c;
}

}  // namespace densefs::tools::bench
