// Worker processes and their measurement: fork/waitpid, a pipe as the start
// barrier, the parent's monotonic clock for wall time and RUSAGE_CHILDREN
// for user and sys time. Processes, not threads, like Mercurial's
// slow-readdir.py: each worker has its own file table and cwd, as N
// concurrent commands would.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "tools/bench/bench.h"

namespace densefs::tools::bench {
namespace {

double now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double seconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

struct pipe_pair {
  int fd[2] = {-1, -1};
  pipe_pair() {
    if (::pipe(fd) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  }
  ~pipe_pair() {
    close_read();
    close_write();
  }
  void close_read() {
    if (fd[0] >= 0) ::close(fd[0]);
    fd[0] = -1;
  }
  void close_write() {
    if (fd[1] >= 0) ::close(fd[1]);
    fd[1] = -1;
  }
};

bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Starts n children that wait on `start` and then run `child(i)`; returns
// their pids. The parent releases them all at once by closing the write end.
std::vector<pid_t> spawn(int n, pipe_pair& start, const std::function<void(int)>& child) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      for (const pid_t p : pids) ::kill(p, SIGKILL);
      for (const pid_t p : pids) ::waitpid(p, nullptr, 0);
      throw std::system_error(e, std::generic_category(), "fork");
    }
    if (pid == 0) {
      // The parent's interrupt handler (bench_main.cpp) is inherited: a
      // worker interrupted by ^C must just die.
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      start.close_write();
      char c;
      while (::read(start.fd[0], &c, 1) < 0 && errno == EINTR) {
      }
      child(i);
      ::_exit(0);  // child() exits itself; never return into the caller
    }
    pids.push_back(pid);
  }
  return pids;
}

measure wait_all(const std::vector<pid_t>& pids, pipe_pair& start, double& begin) {
  rusage before{};
  ::getrusage(RUSAGE_CHILDREN, &before);
  begin = now();
  start.close_write();  // every child's read returns 0: go
  measure m;
  for (const pid_t pid : pids) {
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    // r < 0 (ECHILD when SIGCHLD is ignored and children are reaped
    // unseen): the worker's result and rusage are lost, so it failed.
    if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++m.failed_workers;
  }
  m.wall = now() - begin;
  rusage after{};
  ::getrusage(RUSAGE_CHILDREN, &after);
  m.user = seconds(after.ru_utime) - seconds(before.ru_utime);
  m.sys = seconds(after.ru_stime) - seconds(before.ru_stime);
  return m;
}

}  // namespace

measure run_processes(int n, const std::function<worker_counts(int index)>& work) {
  pipe_pair start;
  pipe_pair results;  // each worker writes one worker_counts (< PIPE_BUF: atomic)
  const auto pids = spawn(n, start, [&](int i) {
    results.close_read();
    worker_counts c;
    int status = 0;
    try {
      c = work(i);
    } catch (...) {
      status = 1;
    }
    if (!write_all(results.fd[1], &c, sizeof c)) status = 1;
    ::_exit(status);
  });
  results.close_write();
  start.close_read();
  double begin = 0;
  measure m = wait_all(pids, start, begin);
  worker_counts c;
  for (;;) {
    const ssize_t got = ::read(results.fd[0], &c, sizeof c);
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof c)) break;
    m.entries += c.entries;
    m.bytes += c.bytes;
    m.errors += c.errors;
  }
  return m;
}

bool program_available(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t pos = 0;
  while (pos <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', pos), dirs.size());
    const std::string candidate = dirs.substr(pos, end - pos) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    pos = end + 1;
  }
  return false;
}

std::optional<measure> run_command(const std::vector<std::string>& argv) {
  if (argv.empty() || !program_available(argv[0])) return std::nullopt;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pipe_pair start;
  const auto pids = spawn(1, start, [&](int) {
    start.close_read();
    // The tools' own chatter is not the benchmark's output.
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      ::dup2(devnull, STDOUT_FILENO);
      ::close(devnull);
    }
    ::execvp(args[0], args.data());
    ::_exit(127);
  });
  start.close_read();
  double begin = 0;
  return wait_all(pids, start, begin);
}

bool can_drop_caches(std::string& why) {
#ifdef __linux__
  if (::geteuid() != 0) {
    why = "warm only: dropping caches for cold runs needs root";
    return false;
  }
  if (::access("/proc/sys/vm/drop_caches", W_OK) != 0) {
    why = "warm only: /proc/sys/vm/drop_caches is not writable here";
    return false;
  }
  return true;
#else
  why = "warm only: dropping caches is only implemented on Linux";
  return false;
#endif
}

void drop_caches() {
#ifdef __linux__
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  if (!f) throw std::runtime_error("cannot write /proc/sys/vm/drop_caches");
#endif
}

}  // namespace densefs::tools::bench
