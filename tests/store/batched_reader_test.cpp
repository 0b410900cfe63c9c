// Batched positional reads under both implementations (store/payload/batched_reader.h):
// ranges across a file, big batches, more ranges than the queue depth, a
// range past the end, concurrent callers.
#include "store/payload/batched_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/error.h"

#include "tests/test_env.h"

namespace densefs::store {
namespace {

// A temp file of pseudo-random bytes, open for reading.
class temp_file {
 public:
  explicit temp_file(std::size_t size) {
    path_ =
        std::filesystem::temp_directory_path() /
        ("densefs-batched-reader-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::mt19937 rng(static_cast<unsigned>(size));
    content_.resize(size);
    for (auto& c : content_) c = static_cast<char>(rng());
    const int wfd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(wfd, 0);
    EXPECT_EQ(::write(wfd, content_.data(), content_.size()),
              static_cast<ssize_t>(content_.size()));
    ::close(wfd);
    fd_ = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd_, 0);
  }
  ~temp_file() {
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  int fd() const { return fd_; }
  const std::string& content() const { return content_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
  std::string content_;
  int fd_ = -1;
};

struct result {
  int calls = 0;
  int error = -1;
  std::string bytes;
};

std::vector<result> read_all(batched_reader& reader, const std::vector<read_range>& ranges) {
  std::vector<result> out(ranges.size());
  reader.read_all(ranges, [&](std::size_t i, std::string&& bytes, int error) {
    ASSERT_LT(i, out.size());
    ++out[i].calls;
    out[i].error = error;
    out[i].bytes = std::move(bytes);
  });
  return out;
}

void expect_content(const temp_file& f, const std::vector<read_range>& ranges,
                    const std::vector<result>& got) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_EQ(got[i].calls, 1) << "range " << i;
    ASSERT_EQ(got[i].error, 0) << "range " << i;
    ASSERT_EQ(got[i].bytes, f.content().substr(ranges[i].offset, ranges[i].length))
        << "range " << i << " at " << ranges[i].offset;
  }
}

class batched_reader_test : public testing::TestWithParam<io_mode> {
 protected:
  std::unique_ptr<batched_reader> make(unsigned depth = k_default_queue_depth) {
    if (GetParam() == io_mode::uring) {
      const std::string why = io_uring_unavailable_reason();
      if (!why.empty()) return nullptr;
    }
    return make_batched_reader(GetParam(), depth);
  }
};

#define MAKE_OR_SKIP(reader, ...)  \
  auto reader = make(__VA_ARGS__); \
  if (!reader)                     \
  DENSEFS_SKIP_UNLESS_REQUIRED("io_uring unavailable: " << io_uring_unavailable_reason())

TEST_P(batched_reader_test, reports_its_kind) {
  MAKE_OR_SKIP(reader);
  EXPECT_EQ(reader->kind(), GetParam() == io_mode::uring ? "io_uring" : "pread");
}

TEST_P(batched_reader_test, reads_ranges_across_a_file) {
  MAKE_OR_SKIP(reader);
  temp_file f(1 << 20);
  const std::vector<read_range> ranges = {
      {f.fd(), 0, 4096},      {f.fd(), 1000, 1},
      {f.fd(), 12345, 54321}, {f.fd(), (1 << 20) - 10, 10},
      {f.fd(), 500000, 0},    {f.fd(), 0, 1 << 20},
      {f.fd(), 4096, 4096},   {f.fd(), 4096, 4096},  // the same range twice
  };
  expect_content(f, ranges, read_all(*reader, ranges));
}

TEST_P(batched_reader_test, many_ranges_in_one_batch_beyond_the_queue_depth) {
  for (unsigned depth : {1u, 3u, k_default_queue_depth}) {
    MAKE_OR_SKIP(reader, depth);
    temp_file f(4 << 20);
    std::mt19937 rng(depth);
    std::vector<read_range> ranges;
    for (int i = 0; i < 1000; ++i) {
      const std::uint32_t length = rng() % 70000;
      const std::uint64_t offset = rng() % (f.content().size() - length);
      ranges.push_back({f.fd(), offset, length});
    }
    expect_content(f, ranges, read_all(*reader, ranges));
  }
}

TEST_P(batched_reader_test, a_range_past_the_end_is_eio_and_the_others_still_arrive) {
  MAKE_OR_SKIP(reader, 2);
  temp_file f(10000);
  const std::vector<read_range> ranges = {
      {f.fd(), 0, 100},     {f.fd(), 9990, 20}, {f.fd(), 20000, 5},
      {f.fd(), 5000, 5000}, {-1, 0, 10},  // a bad descriptor: its errno, not a crash
  };
  const auto got = read_all(*reader, ranges);
  for (const auto& r : got) EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(got[0].error, 0);
  EXPECT_EQ(got[0].bytes, f.content().substr(0, 100));
  EXPECT_EQ(got[1].error, EIO);  // ends 10 bytes past the end
  EXPECT_TRUE(got[1].bytes.empty());
  EXPECT_EQ(got[2].error, EIO);
  EXPECT_TRUE(got[2].bytes.empty());
  EXPECT_EQ(got[3].error, 0);
  EXPECT_EQ(got[3].bytes, f.content().substr(5000));
  EXPECT_EQ(got[4].error, EBADF);
}

TEST_P(batched_reader_test, concurrent_callers_each_get_their_own_ranges) {
  MAKE_OR_SKIP(reader, 8);
  temp_file a(2 << 20), b(3 << 20);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      const temp_file& f = t % 2 ? a : b;
      std::mt19937 rng(t);
      for (int round = 0; round < 20; ++round) {
        std::vector<read_range> ranges;
        for (int i = 0; i < 40; ++i) {
          const std::uint32_t length = 1 + rng() % 40000;
          ranges.push_back({f.fd(), rng() % (f.content().size() - length), length});
        }
        const auto got = read_all(*reader, ranges);
        for (std::size_t i = 0; i < ranges.size(); ++i)
          if (got[i].calls != 1 || got[i].error != 0 ||
              got[i].bytes != f.content().substr(ranges[i].offset, ranges[i].length))
            ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(batched_reader_test, an_exception_from_done_waits_for_the_reads_in_flight) {
  MAKE_OR_SKIP(reader, 16);
  temp_file f(1 << 20);
  std::vector<read_range> ranges(100, read_range{f.fd(), 0, 8192});
  int calls = 0;
  EXPECT_THROW(reader->read_all(ranges,
                                [&](std::size_t, std::string&&, int) {
                                  if (++calls == 3) throw std::runtime_error("stop");
                                }),
               std::runtime_error);
  EXPECT_EQ(calls, 3);
  // The ring is usable again (nothing of the failed batch is left in it).
  expect_content(f, {{f.fd(), 100, 200}}, read_all(*reader, {{f.fd(), 100, 200}}));
}

INSTANTIATE_TEST_SUITE_P(io, batched_reader_test, testing::Values(io_mode::pread, io_mode::uring),
                         [](const auto& info) { return std::string(io_mode_name(info.param)); });

TEST(store_batched_reader, automatic_falls_back_to_pread_without_io_uring) {
  ::setenv("DENSEFS_FAKE_NO_IO_URING", "1", 1);
  EXPECT_NE(io_uring_unavailable_reason(), "");
  EXPECT_EQ(make_batched_reader(io_mode::automatic)->kind(), "pread");
  try {
    make_batched_reader(io_mode::uring);
    ADD_FAILURE() << "uring mode without io_uring must throw";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), ENOTSUP);
  }
  ::unsetenv("DENSEFS_FAKE_NO_IO_URING");
}

TEST(store_batched_reader, environment_picks_the_implementation_in_automatic_mode) {
  ::setenv("DENSEFS_IO", "pread", 1);
  EXPECT_EQ(make_batched_reader(io_mode::automatic)->kind(), "pread");
  ::setenv("DENSEFS_IO", "bogus", 1);
  EXPECT_THROW(make_batched_reader(io_mode::automatic), store_error);
  ::unsetenv("DENSEFS_IO");
  EXPECT_EQ(parse_io_mode("auto"), io_mode::automatic);
  EXPECT_EQ(parse_io_mode("uring"), io_mode::uring);
  EXPECT_EQ(parse_io_mode("pread"), io_mode::pread);
  EXPECT_EQ(parse_io_mode("mmap"), std::nullopt);
}

}  // namespace
}  // namespace densefs::store
