// A latency histogram kept with relaxed atomics: what `-o metrics=` serves
// as a Prometheus histogram (docs/metrics.md) for each FUSE request kind
// (request_counts.h) and for the group commits of file data
// (data_path.h). add() is a handful of relaxed increments, cheap beside
// the round trip or the commit it times.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace densefs::fs {

// The upper bounds (seconds) of the buckets: 50 us, the floor of a FUSE
// round trip here, to 10 s, a commit waiting for a far server.
inline constexpr double k_latency_bounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                              0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                              0.5,     1,      2.5,     5,      10};
inline constexpr std::size_t k_latency_buckets = std::size(k_latency_bounds);
// The same bounds in nanoseconds: what add() compares, once per event.
inline constexpr auto k_latency_bounds_ns = [] {
  std::array<std::uint64_t, k_latency_buckets> ns{};
  for (std::size_t b = 0; b < k_latency_buckets; ++b)
    ns[b] = static_cast<std::uint64_t>(k_latency_bounds[b] * 1e9 + 0.5);
  return ns;
}();

class latency_histogram {
 public:
  // One event that took `nanoseconds`.
  void add(std::uint64_t nanoseconds) {
    count_.fetch_add(1, std::memory_order_relaxed);
    nanos_.fetch_add(nanoseconds, std::memory_order_relaxed);
    // The first bucket that holds it; past the last: only in the count
    // (the histogram's +Inf).
    std::size_t b = 0;
    while (b < k_latency_buckets && nanoseconds > k_latency_bounds_ns[b]) ++b;
    if (b < k_latency_buckets) buckets_[b].fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  std::uint64_t nanoseconds() const { return nanos_.load(std::memory_order_relaxed); }
  // Events that took at most k_latency_bounds[b] and more than the bound
  // before (not cumulative).
  std::uint64_t in_bucket(std::size_t b) const {
    return buckets_[b].load(std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> nanos_{0};
  std::array<std::atomic<std::uint64_t>, k_latency_buckets> buckets_{};
};

}  // namespace densefs::fs
