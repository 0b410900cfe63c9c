#include "store/batched_reader.h"

#include <unistd.h>

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

// One pread per range, retried over short reads and EINTR.
class pread_reader final : public batched_reader {
 public:
  void read_all(std::span<const read_range> ranges, const completion& done) override {
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const read_range& r = ranges[i];
      std::string bytes(r.length, '\0');
      std::size_t got = 0;
      int error = 0;
      while (got < r.length) {
        const ssize_t n =
            ::pread(r.fd, bytes.data() + got, r.length - got, static_cast<off_t>(r.offset + got));
        if (n > 0) {
          got += static_cast<std::size_t>(n);
        } else if (n == 0) {
          error = EIO;  // the file ends before the range does
          break;
        } else if (errno != EINTR) {
          error = errno;
          break;
        }
      }
      if (error != 0) bytes.clear();
      done(i, std::move(bytes), error);
    }
  }
  std::string_view kind() const override { return "pread"; }
};

}  // namespace

std::unique_ptr<batched_reader> make_batched_reader(io_mode mode) {
  // The io_uring implementation comes with the read-path work; until then
  // every mode but an explicit `uring` gets pread.
  if (mode == io_mode::uring) throw store_error(ENOTSUP, "io_uring reads are not built in");
  return std::make_unique<pread_reader>();
}

}  // namespace densefs::store
