// FUSE requests a mount has received, by operation: what a workload costs
// in round trips between the kernel and the daemon (docs/read-path.md,
// "Requests per file"), and how long the daemon spent on each kind (from the
// callback's start to its return, reply included; not the kernel's side of
// the round trip). Counted once per request where the callback table hands
// it to the file system (fs/mount.cpp), or, for a request answered from
// another thread (an fsync from its pool, a read that waits for a decode),
// where that thread answers, with the time from the callback's start.
// Shown in the stats xattr (`densefs stats MNT --json`, "requests" and
// "request_seconds") and by -o metrics=.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "fs/latency_histogram.h"

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
  getlk,
  setlk,
  flock,
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
      "fallocate", "copy_file_range", "getlk",        "setlk",      "flock",
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
  void add(fuse_request r, std::uint64_t nanoseconds) { latency_[index(r)].add(nanoseconds); }
  // Bytes read replies carried (cut at the end of the file) and bytes the
  // kernel gave in writes.
  void add_read_bytes(std::uint64_t n) { read_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void add_written_bytes(std::uint64_t n) {
    written_bytes_.fetch_add(n, std::memory_order_relaxed);
  }
  std::uint64_t read_bytes() const { return read_bytes_.load(std::memory_order_relaxed); }
  std::uint64_t written_bytes() const { return written_bytes_.load(std::memory_order_relaxed); }
  // The latency histogram of kind `r` (its count is the requests').
  const latency_histogram& latency(fuse_request r) const { return latency_[index(r)]; }
  std::uint64_t get(fuse_request r) const { return latency_[index(r)].count(); }
  std::uint64_t nanoseconds(fuse_request r) const { return latency_[index(r)].nanoseconds(); }
  struct seen {
    const char* name;
    std::uint64_t count;
    std::uint64_t nanoseconds;  // spent in the daemon, all requests of the kind
  };
  // The kinds seen at least once, in enum order.
  std::vector<seen> nonzero() const {
    std::vector<seen> out;
    for (std::size_t i = 0; i < latency_.size(); ++i) {
      const std::uint64_t n = latency_[i].count();
      if (n != 0)
        out.push_back({request_name(static_cast<fuse_request>(i)), n, latency_[i].nanoseconds()});
    }
    return out;
  }

 private:
  static std::size_t index(fuse_request r) { return static_cast<std::size_t>(r); }
  static constexpr std::size_t k_kinds = static_cast<std::size_t>(fuse_request::count_);
  std::array<latency_histogram, k_kinds> latency_{};
  std::atomic<std::uint64_t> read_bytes_{0};
  std::atomic<std::uint64_t> written_bytes_{0};
};

}  // namespace densefs::fs
