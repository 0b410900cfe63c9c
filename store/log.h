// One place for log lines. In the foreground they go to stderr; a daemon
// sends them to syslog/journal (set once by fs::mount after daemonizing).
#pragma once

#include <string_view>

namespace densefs {

enum class log_level { error, warning, info, debug };

void log_to_syslog(bool enabled);
// Info and debug lines to syslog even before log_to_syslog: a mount that
// goes to the background says nothing on the terminal when it succeeds (as
// mount(8) of ext4); warnings and errors still go to stderr until then.
void log_quiet_terminal(bool enabled);
void log_set_verbose(bool verbose);  // debug lines only when set
void log(log_level level, std::string_view message);

inline void log_error(std::string_view m) {
  log(log_level::error, m);
}
inline void log_warning(std::string_view m) {
  log(log_level::warning, m);
}
inline void log_info(std::string_view m) {
  log(log_level::info, m);
}
inline void log_debug(std::string_view m) {
  log(log_level::debug, m);
}

}  // namespace densefs
