// FUSE requests a mount has received, by operation: what a workload costs
// in round trips between the kernel and the daemon (docs/read-path.md,
// "Requests per file"), and how long the daemon spent on each kind (from the
// callback's start to its return, reply included; not the kernel's side of
// the round trip). Counted once per request where the callback table hands
// it to the file system (fs/mount.cpp); an fsync, answered from a pool of
// its own, adds the time it spent there (add_time; the latency histogram
// counts the callback's part only). Shown in the stats xattr (`densefs
// stats MNT --json`, "requests" and "request_seconds") and by -o metrics=.
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

// The upper bounds (seconds) of the latency histogram's buckets, as
// `-o metrics=` serves them (docs/metrics.md): 50 us, the floor of a FUSE
// round trip here, to 10 s, a commit waiting for a far server.
inline constexpr double k_latency_bounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                              0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                              0.5,     1,      2.5,     5,      10};
inline constexpr std::size_t k_latency_buckets = std::size(k_latency_bounds);
// The same bounds in nanoseconds: what add() compares, once per request.
inline constexpr auto k_latency_bounds_ns = [] {
  std::array<std::uint64_t, k_latency_buckets> ns{};
  for (std::size_t b = 0; b < k_latency_buckets; ++b)
    ns[b] = static_cast<std::uint64_t>(k_latency_bounds[b] * 1e9 + 0.5);
  return ns;
}();

class request_counts {
 public:
  // Relaxed: a counter nobody orders anything by; the FUSE threads touch
  // it once per request, next to a syscall round trip.
  void add(fuse_request r, std::uint64_t nanoseconds) {
    counts_[index(r)].fetch_add(1, std::memory_order_relaxed);
    nanos_[index(r)].fetch_add(nanoseconds, std::memory_order_relaxed);
    // The first bucket that holds it; past the last: only in the count
    // (the histogram's +Inf).
    std::size_t b = 0;
    while (b < k_latency_buckets && nanoseconds > k_latency_bounds_ns[b]) ++b;
    if (b < k_latency_buckets) buckets_[index(r)][b].fetch_add(1, std::memory_order_relaxed);
  }
  // Bytes read replies carried (cut at the end of the file) and bytes the
  // kernel gave in writes.
  void add_read_bytes(std::uint64_t n) { read_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void add_written_bytes(std::uint64_t n) {
    written_bytes_.fetch_add(n, std::memory_order_relaxed);
  }
  std::uint64_t read_bytes() const { return read_bytes_.load(std::memory_order_relaxed); }
  std::uint64_t written_bytes() const { return written_bytes_.load(std::memory_order_relaxed); }
  // How many requests of kind `r` took at most k_latency_bounds[b] (not
  // cumulative: those of bucket b alone).
  std::uint64_t in_bucket(fuse_request r, std::size_t b) const {
    return buckets_[index(r)][b].load(std::memory_order_relaxed);
  }
  // Time spent on a request after its callback returned (counted by add).
  void add_time(fuse_request r, std::uint64_t nanoseconds) {
    nanos_[index(r)].fetch_add(nanoseconds, std::memory_order_relaxed);
  }
  std::uint64_t get(fuse_request r) const {
    return counts_[index(r)].load(std::memory_order_relaxed);
  }
  std::uint64_t nanoseconds(fuse_request r) const {
    return nanos_[index(r)].load(std::memory_order_relaxed);
  }
  struct seen {
    const char* name;
    std::uint64_t count;
    std::uint64_t nanoseconds;  // spent in the daemon, all requests of the kind
  };
  // The kinds seen at least once, in enum order.
  std::vector<seen> nonzero() const {
    std::vector<seen> out;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      const std::uint64_t n = counts_[i].load(std::memory_order_relaxed);
      if (n != 0)
        out.push_back({request_name(static_cast<fuse_request>(i)), n,
                       nanos_[i].load(std::memory_order_relaxed)});
    }
    return out;
  }

 private:
  static std::size_t index(fuse_request r) { return static_cast<std::size_t>(r); }
  static constexpr std::size_t k_kinds = static_cast<std::size_t>(fuse_request::count_);
  std::array<std::atomic<std::uint64_t>, k_kinds> counts_{};
  std::array<std::atomic<std::uint64_t>, k_kinds> nanos_{};
  std::array<std::array<std::atomic<std::uint64_t>, k_latency_buckets>, k_kinds> buckets_{};
  std::atomic<std::uint64_t> read_bytes_{0};
  std::atomic<std::uint64_t> written_bytes_{0};
};

}  // namespace densefs::fs
