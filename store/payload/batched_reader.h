// Batched positional reads: the pack files' read path. A read that needs
// several chunks submits all their byte ranges at once, and each range is
// handed to the caller as soon as it completes, so decoding the first chunk
// overlaps the I/O of the others.
//
// Two implementations behind one interface: io_uring (one submission for the
// whole batch) and pread (one call per range), the fallback where io_uring is
// unavailable (old kernel, seccomp, io_uring_disabled sysctl). make_batched_reader
// picks one and logs one line when it falls back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace densefs::store {

struct read_range {
  int fd = -1;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};

class batched_reader {
 public:
  virtual ~batched_reader() = default;

  // Reads every range. `done(i, bytes, error)` is called once per range, in
  // completion order, on the calling thread: error 0 and exactly
  // ranges[i].length bytes, or an errno (EIO for a short read past the end
  // of the file) and empty bytes. All calls have happened when read_all
  // returns. Safe to call from many threads at once.
  using completion = std::function<void(std::size_t index, std::string&& bytes, int error)>;
  virtual void read_all(std::span<const read_range> ranges, const completion& done) = 0;

  // "io_uring" or "pread": for logs, `densefs stats` and tests.
  virtual std::string_view kind() const = 0;

  // One range: its bytes into `out`; returns the errno (EIO: short) or 0.
  int read_one(int fd, std::uint64_t offset, std::uint32_t length, std::string& out);
};

enum class io_mode { automatic, uring, pread };

// "auto", "uring", "pread" (mount option io=, store_open_options::io).
std::string_view io_mode_name(io_mode mode);
// nullopt for anything else.
std::optional<io_mode> parse_io_mode(std::string_view name);

// How many reads one io_uring reader keeps in flight: a bigger batch is fed
// to the ring as completions free slots.
inline constexpr unsigned k_default_queue_depth = 64;

// automatic: io_uring when the kernel allows it, else pread with one log
// line (once per process). uring: io_uring or throw store_error(ENOTSUP).
// pread: always pread. In automatic mode the environment variable DENSEFS_IO
// (auto, uring, pread) overrides, so tests can pick a path for a whole
// mount. queue_depth is clamped to [1, k_default_queue_depth].
std::unique_ptr<batched_reader> make_batched_reader(io_mode mode = io_mode::automatic,
                                                    unsigned queue_depth = k_default_queue_depth);

// Why io_uring cannot be used here ("" when it can): the io_uring_disabled
// sysctl, or io_uring_queue_init's error (EPERM under seccomp, ENOSYS on an
// old kernel). Tests that need io_uring skip with this message.
std::string io_uring_unavailable_reason();

}  // namespace densefs::store
