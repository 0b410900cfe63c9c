#include "store/payload/batched_reader.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <vector>

#include "store/error.h"
#include "store/log.h"

namespace densefs::store {
namespace {

// Reads one range with pread, retried over short reads and EINTR.
int pread_range(const read_range& r, std::string& bytes) {
  bytes.assign(r.length, '\0');
  std::size_t got = 0;
  while (got < r.length) {
    const ssize_t n =
        ::pread(r.fd, bytes.data() + got, r.length - got, static_cast<off_t>(r.offset + got));
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      bytes.clear();
      return EIO;  // the file ends before the range does
    } else if (errno != EINTR) {
      const int error = errno;
      bytes.clear();
      return error;
    }
  }
  return 0;
}

void pread_all(std::span<const read_range> ranges, const batched_reader::completion& done) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    std::string bytes;
    const int error = pread_range(ranges[i], bytes);
    done(i, std::move(bytes), error);
  }
}

// One pread per range.
class pread_reader final : public batched_reader {
 public:
  void read_all(std::span<const read_range> ranges, const completion& done) override {
    pread_all(ranges, done);
  }
  std::string_view kind() const override { return "pread"; }
};

// Every ring has this many entries; a reader keeps at most its queue depth
// (<= this) in flight. The completion queue is twice as big (liburing's
// default), so it cannot overflow.
constexpr unsigned k_ring_entries = k_default_queue_depth;

// A ring per thread, set up on the thread's first batch and reused by every
// later one (setting one up costs a few syscalls and a locked mapping;
// FUSE and decode threads are long-lived). Not shared between threads, so
// no locking: a completion always belongs to this thread's batch.
struct thread_ring {
  io_uring ring{};
  int init_error = 0;  // > 0: io_uring_queue_init failed on this thread
  bool busy = false;   // a batch is running (guards a `done` that reads again)

  thread_ring() {
    const int rc = io_uring_queue_init(k_ring_entries, &ring, 0);
    if (rc < 0) init_error = -rc;
  }
  ~thread_ring() {
    if (init_error == 0) io_uring_queue_exit(&ring);
  }
  thread_ring(const thread_ring&) = delete;
  thread_ring& operator=(const thread_ring&) = delete;
};

thread_ring& this_thread_ring() {
  thread_local thread_ring r;
  return r;
}

// The reason, once per process, a thread fell back from io_uring to pread
// after the reader was created (a ring could not be set up on that thread).
void log_thread_fallback(int error) {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true))
    log_warning(std::string("io_uring: a thread could not set up its ring (") +
                std::strerror(error) + "); its reads use pread");
}

// One io_uring submission for the first queue_depth ranges of a batch; each
// completion frees a slot for the next range (so a batch of any size keeps
// at most queue_depth reads in flight and buffers allocated). Short reads
// are continued from where they stopped.
class uring_reader final : public batched_reader {
 public:
  explicit uring_reader(unsigned queue_depth) : depth_(queue_depth) {}

  void read_all(std::span<const read_range> ranges, const completion& done) override {
    if (ranges.empty()) return;
    thread_ring& tr = this_thread_ring();
    if (tr.init_error != 0 || tr.busy) {
      // A nested call from `done` would mix its completions into the outer
      // batch's; it is rare enough to take the simple path.
      if (tr.init_error != 0) log_thread_fallback(tr.init_error);
      pread_all(ranges, done);
      return;
    }
    tr.busy = true;
    try {
      run(tr.ring, ranges, done);
    } catch (...) {
      tr.busy = false;
      throw;
    }
    tr.busy = false;
  }
  std::string_view kind() const override { return "io_uring"; }

 private:
  struct pending {
    std::string bytes;
    std::uint32_t got = 0;
  };

  void run(io_uring& ring, std::span<const read_range> ranges, const completion& done) const {
    std::vector<pending> ops(ranges.size());
    std::size_t next = 0;        // first range not queued yet
    std::size_t in_flight = 0;   // queued or submitted, not completed
    std::exception_ptr failure;  // from `done`: stop calling it, drain, rethrow

    const auto queue = [&](std::size_t i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      // Cannot fail: in_flight <= depth_ <= the ring's entries, and every
      // queued entry is submitted before we wait.
      if (!sqe) throw store_error(EIO, "io_uring: submission queue full");
      const read_range& r = ranges[i];
      pending& p = ops[i];
      io_uring_prep_read(sqe, r.fd, p.bytes.data() + p.got, r.length - p.got, r.offset + p.got);
      io_uring_sqe_set_data64(sqe, i);
      ++in_flight;
    };
    const auto finish = [&](std::size_t i, int error) {
      std::string bytes = error == 0 ? std::move(ops[i].bytes) : std::string();
      ops[i].bytes = std::string();  // free the buffer now, not at the end of the batch
      if (failure) return;
      try {
        done(i, std::move(bytes), error);
      } catch (...) {
        failure = std::current_exception();
      }
    };
    const auto refill = [&] {
      while (!failure && next < ranges.size() && in_flight < depth_) {
        const std::size_t i = next++;
        if (ranges[i].length == 0) {
          finish(i, 0);
          continue;
        }
        ops[i].bytes.assign(ranges[i].length, '\0');
        queue(i);
      }
    };

    refill();
    while (in_flight > 0) {
      const int rc = io_uring_submit_and_wait(&ring, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // The kernel did not take the queued entries; nothing can be waited
        // for safely any more. Not expected with a working ring.
        throw store_error(-rc, std::string("io_uring_submit: ") + std::strerror(-rc));
      }
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe) {
        const std::size_t i = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring, cqe);
        --in_flight;
        pending& p = ops[i];
        if (res == -EINTR || res == -EAGAIN) {
          queue(i);
        } else if (res < 0) {
          finish(i, -res);
        } else if (res == 0) {
          finish(i, EIO);  // the file ends before the range does
        } else {
          p.got += static_cast<std::uint32_t>(res);
          if (p.got < ranges[i].length)
            queue(i);  // a short read: continue from where it stopped
          else
            finish(i, 0);
        }
      }
      refill();
    }
    if (failure) std::rethrow_exception(failure);
  }

  const unsigned depth_;
};

std::string read_sysctl(const char* path) {
  std::ifstream in(path);
  std::string value;
  in >> value;
  return value;
}

}  // namespace

std::string_view io_mode_name(io_mode mode) {
  switch (mode) {
    case io_mode::automatic:
      return "auto";
    case io_mode::uring:
      return "uring";
    case io_mode::pread:
      return "pread";
  }
  return "auto";
}

std::optional<io_mode> parse_io_mode(std::string_view name) {
  if (name == "auto") return io_mode::automatic;
  if (name == "uring" || name == "io_uring") return io_mode::uring;
  if (name == "pread") return io_mode::pread;
  return std::nullopt;
}

std::string io_uring_unavailable_reason() {
  // 2: disabled for everyone; 1: only for members of kernel.io_uring_group
  // (and CAP_SYS_ADMIN), which the ring set-up below finds out.
  if (read_sysctl("/proc/sys/kernel/io_uring_disabled") == "2")
    return "/proc/sys/kernel/io_uring_disabled is 2";
  // The test hook: behave as a kernel without io_uring would.
  if (const char* fake = std::getenv("DENSEFS_FAKE_NO_IO_URING"); fake && *fake)
    return "io_uring_queue_init returned -ENOSYS (DENSEFS_FAKE_NO_IO_URING)";
  const thread_ring& tr = this_thread_ring();
  if (tr.init_error != 0)
    return std::string("io_uring_queue_init returned -") +
           (tr.init_error == EPERM    ? "EPERM"
            : tr.init_error == ENOSYS ? "ENOSYS"
            : tr.init_error == ENOMEM ? "ENOMEM"
                                      : std::to_string(tr.init_error)) +
           " (" + std::strerror(tr.init_error) + ")";
  return {};
}

std::unique_ptr<batched_reader> make_batched_reader(io_mode mode, unsigned queue_depth) {
  queue_depth = std::clamp(queue_depth, 1u, k_ring_entries);
  if (mode == io_mode::automatic) {
    if (const char* env = std::getenv("DENSEFS_IO"); env && *env) {
      const auto parsed = parse_io_mode(env);
      if (!parsed)
        throw store_error(EINVAL, std::string("DENSEFS_IO=") + env + ": not auto, uring or pread");
      mode = *parsed;
    }
  }
  if (mode == io_mode::pread) return std::make_unique<pread_reader>();
  const std::string why_not = io_uring_unavailable_reason();
  if (why_not.empty()) return std::make_unique<uring_reader>(queue_depth);
  if (mode == io_mode::uring) throw store_error(ENOTSUP, "io_uring reads unavailable: " + why_not);
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true))
    log_warning("io_uring unavailable (" + why_not + "); reading with pread");
  return std::make_unique<pread_reader>();
}

int batched_reader::read_one(int fd, std::uint64_t offset, std::uint32_t length, std::string& out) {
  const read_range range{fd, offset, length};
  int error = 0;
  read_all(std::span(&range, 1), [&](std::size_t, std::string&& bytes, int e) {
    out = std::move(bytes);
    error = e;
  });
  return error;
}

}  // namespace densefs::store
