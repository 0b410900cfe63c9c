// FUSE requests a mount has received, by operation: what a workload costs
// in round trips between the kernel and the daemon (docs/read-path.md,
// "Requests per file"). Counted once per request where the callback table
// hands it to the file system (fs/mount.cpp), and shown in the stats xattr
// (`densefs stats MNT --json`, "requests").
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

namespace densefs::fs {

// The kernel's request kinds that reach densefs, in FUSE's own names
// (lower case). batch_forget is one request carrying many forgets.
enum class fuse_request : std::uint8_t {
  lookup,
  forget,
  batch_forget,
  getattr,
  setattr,
  readlink,
  mknod,
  mkdir,
  unlink,
  rmdir,
  symlink,
  rename,
  link,
  open,
  create,
  read,
  write,
  flush,
  release,
  fsync,
  opendir,
  readdir,
  readdirplus,
  releasedir,
  fsyncdir,
  statfs,
  setxattr,
  getxattr,
  listxattr,
  removexattr,
  fallocate,
  copy_file_range,
  count_,
};

inline const char* request_name(fuse_request r) {
  // Same order as the enum; a missing name shows up as "?" in the stats.
  static constexpr const char* k_names[] = {
      "lookup",    "forget",          "batch_forget", "getattr",    "setattr",
      "readlink",  "mknod",           "mkdir",        "unlink",     "rmdir",
      "symlink",   "rename",          "link",         "open",       "create",
      "read",      "write",           "flush",        "release",    "fsync",
      "opendir",   "readdir",         "readdirplus",  "releasedir", "fsyncdir",
      "statfs",    "setxattr",        "getxattr",     "listxattr",  "removexattr",
      "fallocate", "copy_file_range",
  };
  static_assert(std::size(k_names) == static_cast<std::size_t>(fuse_request::count_),
                "one name per fuse_request");
  const auto i = static_cast<std::size_t>(r);
  return i < std::size(k_names) ? k_names[i] : "?";
}

class request_counts {
 public:
  // Relaxed: a counter nobody orders anything by; the FUSE threads touch
  // it once per request, next to a syscall round trip.
  void add(fuse_request r) { counts_[index(r)].fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t get(fuse_request r) const {
    return counts_[index(r)].load(std::memory_order_relaxed);
  }
  // The kinds seen at least once, in enum order, with their counts.
  std::vector<std::pair<const char*, std::uint64_t>> nonzero() const {
    std::vector<std::pair<const char*, std::uint64_t>> out;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      const std::uint64_t n = counts_[i].load(std::memory_order_relaxed);
      if (n != 0) out.emplace_back(request_name(static_cast<fuse_request>(i)), n);
    }
    return out;
  }

 private:
  static std::size_t index(fuse_request r) { return static_cast<std::size_t>(r); }
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(fuse_request::count_)> counts_{};
};

}  // namespace densefs::fs
