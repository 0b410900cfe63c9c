#include "store/log.h"

#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace densefs {
namespace {

std::atomic<bool> g_syslog{false};
std::atomic<bool> g_verbose{false};
std::atomic<bool> g_quiet_terminal{false};
std::mutex g_stderr_mutex;  // one line at a time from many threads

const char* level_name(log_level level) {
  switch (level) {
    case log_level::error:
      return "error";
    case log_level::warning:
      return "warning";
    case log_level::info:
      return "info";
    case log_level::debug:
      return "debug";
  }
  return "?";
}

int syslog_priority(log_level level) {
  switch (level) {
    case log_level::error:
      return LOG_ERR;
    case log_level::warning:
      return LOG_WARNING;
    case log_level::info:
      return LOG_INFO;
    case log_level::debug:
      return LOG_DEBUG;
  }
  return LOG_INFO;
}

}  // namespace

void log_to_syslog(bool enabled) {
  if (enabled && !g_syslog.exchange(true)) openlog("densefs", LOG_PID, LOG_DAEMON);
  if (!enabled) g_syslog = false;
}

void log_quiet_terminal(bool enabled) {
  if (enabled) openlog("densefs", LOG_PID, LOG_DAEMON);
  g_quiet_terminal = enabled;
}

void log_set_verbose(bool verbose) {
  g_verbose = verbose;
}

void log(log_level level, std::string_view message) {
  if (level == log_level::debug && !g_verbose) return;
  const bool quiet = g_quiet_terminal && (level == log_level::info || level == log_level::debug);
  if (g_syslog || quiet) {
    syslog(syslog_priority(level), "%.*s", static_cast<int>(message.size()), message.data());
    return;
  }
  std::string line = "densefs: ";
  line += level_name(level);
  line += ": ";
  line += message;
  line += '\n';
  std::lock_guard lock(g_stderr_mutex);
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace densefs
