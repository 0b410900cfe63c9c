// call_isolated (isolated_call.h): fork, a pipe, and the child's bytes
// framed by their length so a child that dies halfway is told apart from
// one that finished.
#include "codec/isolated_call.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace densefs::codec::detail {
namespace {

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

[[noreturn]] void run_child(int fd, const std::function<std::optional<std::string>()>& encode,
                            std::chrono::seconds cpu_limit) {
  const rlimit cpu{static_cast<rlim_t>(cpu_limit.count()), static_cast<rlim_t>(cpu_limit.count())};
  ::setrlimit(RLIMIT_CPU, &cpu);
  // The encoder's own messages as it fails (libjxl prints its failed check)
  // are not the mount's: the caller just sees no encoding.
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) ::dup2(null, STDERR_FILENO);
  int status = 1;
  try {
    if (std::optional<std::string> out = encode()) {
      const std::uint64_t n = out->size();
      char header[sizeof n];
      std::memcpy(header, &n, sizeof n);
      if (write_all(fd, header, sizeof header) && write_all(fd, out->data(), out->size())) {
        status = 0;
      }
    }
  } catch (...) {
    status = 1;
  }
  ::_exit(status);
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
  if (pid == 0) {
    ::close(fds[0]);
    run_child(fds[1], encode, cpu_limit);
  }
  ::close(fds[1]);
  std::string got;
  char buf[65536];
  while (true) {
    const ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got.append(buf, static_cast<std::size_t>(r));
  }
  ::close(fds[0]);
  int status = 0;
  pid_t waited;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  // ECHILD (a parent that ignores SIGCHLD): the framing alone decides.
  const bool exited_ok = waited < 0 ? errno == ECHILD
                                    : WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::uint64_t n = 0;
  if (!exited_ok || got.size() < sizeof n) return std::nullopt;
  std::memcpy(&n, got.data(), sizeof n);
  if (n != got.size() - sizeof n) return std::nullopt;
  return got.substr(sizeof n);
}

}  // namespace densefs::codec::detail
