// The PostgreSQL 15 server of the tests of one process. Under ctest it is
// the server the phase shares (DENSEFS_TEST_POSTGRES_SERVICE names its
// directory: tests/services/postgres_service.sh, a ctest fixture), and the
// databases this process made are dropped at exit. Run by hand, it is a
// private, throwaway server: initdb into a temporary directory, listening
// only on a unix socket there (listen_addresses=''), fsync off; stopped
// (pg_ctl stop -m immediate) and removed at exit. As root (CI), the server runs as the `postgres`
// user the Debian package creates, which owns the directory. Tests get a fresh database each
// (create_database) and talk to it as the superuser through psql when they need SQL of their own,
// so they do not need libpq's headers.
//
// Without the binaries a test skips, or fails when DENSEFS_REQUIRE_TOOLS=1
// (tools/setup.sh installs postgresql-15 and sets it).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace densefs::test {

class postgres_server {
 public:
  static constexpr const char* k_bin_dir = "/usr/lib/postgresql/15/bin";
  static constexpr const char* k_superuser = "postgres";
  // Only part of the socket's file name: the socket directory is private.
  static constexpr int k_port = 5432;
  // The test process that started a server, in its directory.
  static constexpr const char* k_owner_file = "owner.pid";

  // The process's server, started on first use. nullptr when it cannot
  // start; `why` then says why (missing binaries, initdb's log tail).
  static postgres_server* instance(std::string& why) {
    static std::mutex mutex;
    static std::unique_ptr<postgres_server> server;
    static std::string failure;
    std::lock_guard lock(mutex);
    if (!server && failure.empty()) {
      try {
        server.reset(new postgres_server());
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    why = failure;
    return server.get();
  }

  ~postgres_server() {
    if (!started_) {
      // The phase's server stays; only what this process made goes.
      for (const auto& db : databases_) {
        try {
          psql("postgres", "DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
        } catch (const std::exception&) {
        }
      }
      return;
    }
    run({bin("pg_ctl"), "stop", "-D", data_dir(), "-m", "immediate", "-s"}, true);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  postgres_server(const postgres_server&) = delete;
  postgres_server& operator=(const postgres_server&) = delete;

  const std::filesystem::path& socket_dir() const { return dir_; }
  // A libpq connection string for database `db` (as the superuser; trust
  // authentication on the private socket).
  std::string conninfo(const std::string& db) const {
    return "host=" + dir_.string() + " port=" + std::to_string(k_port) + " user=" + k_superuser +
           " dbname=" + db;
  }
  // A new empty database; returns its name.
  std::string create_database() {
    // Named by the process too: processes share the phase's server.
    static std::atomic<int> next{0};
    const std::string name =
        "densefs_test_" + std::to_string(::getpid()) + "_" + std::to_string(next++);
    psql("postgres", "CREATE DATABASE " + name);
    std::lock_guard lock(databases_mutex_);
    databases_.push_back(name);
    return name;
  }
  // Runs `sql` in `db` with psql; throws with psql's output on failure.
  // Returns what it printed (unaligned, tuples only).
  std::string psql(const std::string& db, const std::string& sql) const {
    return run({bin("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", dir_.string(),
                "-p", std::to_string(k_port), "-U", k_superuser, "-d", db, "-c", sql},
               false, /*as_server_user=*/false);
  }

  // Whether a missing server fails the test instead of skipping it.
  static bool required() {
    const char* v = std::getenv("DENSEFS_REQUIRE_TOOLS");
    return v && std::string(v) == "1";
  }

 private:
  postgres_server() {
    if (const char* shared = std::getenv("DENSEFS_TEST_POSTGRES_SERVICE"); shared && *shared) {
      dir_ = shared;
      if (!std::filesystem::exists(dir_ / (".s.PGSQL." + std::to_string(k_port))))
        throw std::runtime_error("the phase's PostgreSQL server is not running (no socket in " +
                                 dir_.string() + "; ctest starts it as the fixture test " +
                                 "service.postgres)");
      return;
    }
    if (!std::filesystem::exists(bin("initdb")) || !std::filesystem::exists(bin("pg_ctl")))
      throw std::runtime_error(std::string("PostgreSQL 15 is not installed (no ") + k_bin_dir +
                               "/initdb; tools/setup.sh installs postgresql-15)");
    remove_orphans();
    std::string pattern = (std::filesystem::temp_directory_path() / "densefs-pg-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    try {
      std::ofstream(dir_ / k_owner_file) << ::getpid() << "\n";
      // initdb refuses to run as root: the server runs as the Debian
      // package's `postgres` user, which must own its directory.
      if (::geteuid() == 0) {
        const passwd* pw = ::getpwnam(k_superuser);
        if (!pw)
          throw std::runtime_error(
              "running as root and there is no `postgres` user to run the test server as");
        if (::chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0)
          throw std::runtime_error("chown of " + dir_.string() + " failed");
      }
      run({bin("initdb"), "-D", data_dir(), "-U", k_superuser, "--auth=trust", "--no-sync",
           "--no-instructions", "-E", "UTF8", "--locale=C"});
      // Only the unix socket in our directory; no durability needed.
      const std::string options = "-c listen_addresses='' -k " + dir_.string() + " -p " +
                                  std::to_string(k_port) +
                                  " -c fsync=off -c full_page_writes=off -c max_connections=200";
      run({bin("pg_ctl"), "start", "-D", data_dir(), "-w", "-t", "60", "-s", "-l",
           (dir_ / "server.log").string(), "-o", options});
      started_ = true;
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      throw;
    }
  }

  // A test process that crashed left its server running: the next one
  // stops servers whose owner is gone, and removes their directories.
  static void remove_orphans() {
    std::error_code ec;
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
      if (entry.path().filename().string().rfind("densefs-pg-", 0) != 0) continue;
      pid_t owner = 0;
      std::ifstream(entry.path() / k_owner_file) >> owner;
      if (owner <= 0 || running(owner)) continue;
      std::vector<std::string> stop = {
          bin("pg_ctl"), "stop", "-D", (entry.path() / "data").string(), "-m", "immediate", "-s"};
      if (::geteuid() == 0) stop.insert(stop.begin(), {"runuser", "-u", k_superuser, "--"});
      spawn(stop, "/dev/null");
      std::filesystem::remove_all(entry.path(), ec);
    }
  }

  // Whether a process exists and has not exited (a zombie whose parent has
  // not reaped it yet has exited: PID 1 of a container may never do so).
  static bool running(pid_t pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t name_end = line.rfind(')');
    return !(name_end != std::string::npos && name_end + 2 < line.size() &&
             line[name_end + 2] == 'Z');
  }

  // Runs a command, stdin from /dev/null, stdout and stderr to `output`;
  // returns its wait status (-1: fork failed).
  static int spawn(std::vector<std::string> args, const std::string& output) {
    const pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      const int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) ::dup2(null, 0);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }

  static std::string bin(const char* name) { return std::string(k_bin_dir) + "/" + name; }
  std::string data_dir() const { return (dir_ / "data").string(); }

  // Runs a command (as the server's user when we are root and
  // `as_server_user`), its output to a log file; throws with the log's tail
  // when it fails, unless `ignore_failure`. Returns the output.
  std::string run(std::vector<std::string> args, bool ignore_failure = false,
                  bool as_server_user = true) const {
    if (as_server_user && ::geteuid() == 0)
      args.insert(args.begin(), {"runuser", "-u", k_superuser, "--"});
    // Named by the process too: the phase's server's directory is shared.
    const std::filesystem::path out = dir_ / ("command-" + std::to_string(::getpid()) + "-" +
                                              std::to_string(++commands_) + ".log");
    const int status = spawn(args, out.string());
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    std::error_code ec;
    std::filesystem::remove(out, ec);
    if (!ignore_failure && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::string tail = text.str();
      if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
      std::string command;
      for (const auto& a : args) command += (command.empty() ? "" : " ") + a;
      throw std::runtime_error(command + " failed: " + tail);
    }
    return text.str();
  }

  std::filesystem::path dir_;
  // Whether this process started the server (else it is the phase's).
  bool started_ = false;
  std::mutex databases_mutex_;
  std::vector<std::string> databases_;
  mutable std::atomic<int> commands_{0};
};

}  // namespace densefs::test

// In a test body or SetUp: `server` names the process's PostgreSQL server,
// or the test skips (fails under DENSEFS_REQUIRE_TOOLS=1) saying why.
#define DENSEFS_POSTGRES_SERVER(server)                                             \
  std::string server##_why;                                                         \
  ::densefs::test::postgres_server* server =                                        \
      ::densefs::test::postgres_server::instance(server##_why);                     \
  if (!server) {                                                                    \
    if (::densefs::test::postgres_server::required()) GTEST_FAIL() << server##_why; \
    GTEST_SKIP() << server##_why;                                                   \
  }
