// call_isolated (isolated_call.h): fork, a pipe, and the child's bytes
// framed by their length so a child that dies halfway is told apart from
// one that finished.
#include "codec/isolated_call.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace densefs::codec::detail {
namespace {

// The child's end of the pipe, moved here before every other descriptor
// is closed.
constexpr int k_child_out_fd = 3;

bool write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// What the child is allowed to keep and cost: none of the daemon's
// descriptors (the store's lock, /dev/fuse, RocksDB's files, the pipes of
// other encodings: a child that outlived the daemon would hold the store),
// no core dump (the daemon's memory holds users' data), CPU time bounded,
// and it is the one the OOM killer takes first. It dies with its parent.
void confine_child(int out_fd, std::chrono::seconds cpu_limit) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (out_fd != k_child_out_fd) {
    ::dup2(out_fd, k_child_out_fd);
  } else {
    ::fcntl(out_fd, F_SETFD, 0);
  }
  const int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    // The encoder's own messages as it fails (libjxl prints its failed
    // check) are not the mount's: the caller just sees no encoding.
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  ::close_range(k_child_out_fd + 1, ~0u, 0);
  const rlimit cpu{static_cast<rlim_t>(cpu_limit.count()), static_cast<rlim_t>(cpu_limit.count())};
  ::setrlimit(RLIMIT_CPU, &cpu);
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  const int oom = ::open("/proc/self/oom_score_adj", O_WRONLY);
  if (oom >= 0) {
    (void)!::write(oom, "1000", 4);
    ::close(oom);
  }
}

[[noreturn]] void run_child(int out_fd, const std::function<std::optional<std::string>()>& encode,
                            std::chrono::seconds cpu_limit) {
  confine_child(out_fd, cpu_limit);
  int status = 1;
  try {
    if (std::optional<std::string> out = encode()) {
      const std::uint64_t n = out->size();
      char header[sizeof n];
      std::memcpy(header, &n, sizeof n);
      if (write_all(k_child_out_fd, header, sizeof header) &&
          write_all(k_child_out_fd, out->data(), out->size())) {
        status = 0;
      }
    }
  } catch (...) {
    status = 1;
  }
  ::_exit(status);
}

// Reads the child's output until it closes the pipe or the wall-clock
// deadline passes (a child blocked on a lock it inherited locked from
// another thread of the parent would never use up its CPU time). False on
// the deadline or a read error.
bool read_until_closed(int fd, std::chrono::steady_clock::time_point deadline, std::string& got) {
  char buf[65536];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return false;
    if (ready == 0) continue;
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) return true;
    got.append(buf, static_cast<std::size_t>(r));
  }
}

}  // namespace

std::optional<std::string> call_isolated(const std::function<std::optional<std::string>()>& encode,
                                         std::chrono::seconds cpu_limit) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) run_child(fds[1], encode, cpu_limit);
  ::close(fds[1]);
  std::string got;
  // Twice the CPU limit of wall-clock time: the child shares the machine.
  const bool closed =
      read_until_closed(fds[0], std::chrono::steady_clock::now() + 2 * cpu_limit, got);
  ::close(fds[0]);
  if (!closed) ::kill(pid, SIGKILL);
  int status = 0;
  pid_t waited;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  // ECHILD (a parent that ignores SIGCHLD): the framing alone decides.
  const bool exited_ok =
      waited < 0 ? errno == ECHILD : WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::uint64_t n = 0;
  if (!closed || !exited_ok || got.size() < sizeof n) return std::nullopt;
  std::memcpy(&n, got.data(), sizeof n);
  if (n != got.size() - sizeof n) return std::nullopt;
  return got.substr(sizeof n);
}

}  // namespace densefs::codec::detail
