// The space workload: for each kind of file in the inputs, the logical
// bytes against what the target actually uses to hold them. Three views,
// because no single one is right everywhere (docs/bench.md):
//   allocated  sum of st_blocks * 512: right on ext4 and APFS, but btrfs
//              reports uncompressed blocks and densefs reports its own;
//   used       the statvfs used-bytes delta around writing the files and
//              sync(): what the file system really spent, including
//              compression, but noisy when others write to the same disk;
//   stored     densefs only: the stored_bytes delta of `densefs stats`.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <system_error>

#include "tools/bench/bench.h"

namespace densefs::tools::bench {

std::uint64_t used_bytes(const std::string& dir) {
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) != 0)
    throw std::system_error(errno, std::generic_category(), dir);
  return static_cast<std::uint64_t>(sv.f_blocks - sv.f_bfree) *
         static_cast<std::uint64_t>(sv.f_frsize);
}

namespace {

// Writes `files` (all of one kind) into `dir` and measures them.
space_result measure_kind(const std::vector<std::string>& files, const target& t,
                          const std::string& dir, const std::string& type) {
  space_result r;
  r.target = t.label;
  r.type = type;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::system_error(errno, std::generic_category(), dir);
  // Garbage of earlier rows (the trees removed before this workload, the
  // kind before) collected first: densefs's collector would otherwise free
  // it while this kind is measured, and the used delta came out negative.
  settle(t.dir);
  ::sync();
  const std::uint64_t used_before = used_bytes(t.dir);
  const auto stored_before = densefs_stored_bytes(t.dir);
  std::size_t n = 0;
  std::vector<std::string> written;
  for (const auto& f : files) {
    char name[32];
    std::snprintf(name, sizeof name, "/%06zu", n++);
    // No fsync per file: one sync() per kind is what statvfs needs.
    const worker_counts c = write_file(f, dir + name, false);
    r.logical += c.bytes;
    ++r.files;
    written.push_back(dir + name);
  }
  // As finally stored: densefs re-encodes JPEGs (and fast-ingested data)
  // in the background. A note, not a failure, when it cannot wait.
  settle(dir);
  ::sync();
  r.used = static_cast<std::int64_t>(used_bytes(t.dir)) - static_cast<std::int64_t>(used_before);
  const auto stored_after = densefs_stored_bytes(t.dir);
  if (stored_before && stored_after) r.fs_stored = *stored_after - *stored_before;
  for (const auto& w : written) {
    struct stat st {};
    if (::lstat(w.c_str(), &st) == 0) r.allocated += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return r;
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::vector<space_result> run_space(const std::vector<std::string>& inputs, const target& t,
                                    const std::string& work_dir) {
  std::vector<space_result> out;
  if (::mkdir(work_dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::system_error(errno, std::generic_category(), work_dir);
  for (const auto& in : inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) != 0) continue;
    const std::string name = base_name(in);
    std::map<std::string, std::vector<std::string>> by_kind;
    if (S_ISREG(st.st_mode)) {
      by_kind[file_kind(in)].push_back(in);
    } else if (S_ISDIR(st.st_mode)) {
      for (auto& f : list_files(in)) by_kind[file_kind(f)].push_back(std::move(f));
    }
    // One row per kind of file in each input, and the input's total (the
    // figures add up) when it holds more than one kind.
    space_result total;
    total.target = t.label;
    total.type = name + " (all)";
    total.fs_stored = 0;
    for (const auto& [kind, files] : by_kind) {
      space_result r =
          measure_kind(files, t, work_dir + "/" + name + "." + kind, name + " " + kind);
      total.files += r.files;
      total.logical += r.logical;
      total.allocated += r.allocated;
      total.used += r.used;
      if (r.fs_stored && total.fs_stored) {
        *total.fs_stored += *r.fs_stored;
      } else {
        total.fs_stored.reset();
      }
      out.push_back(std::move(r));
    }
    if (by_kind.size() > 1) out.push_back(total);
  }
  return out;
}

}  // namespace densefs::tools::bench
