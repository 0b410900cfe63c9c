#include "tools/cli.h"

#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace densefs::tools {

std::optional<int> parse_cli(CLI::App& app, const std::vector<std::string>& args,
                             const tool_io& io) {
  // CLI11 takes the words in reverse order.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    io.out << app.help();
    return k_exit_ok;
  } catch (const CLI::ParseError& e) {
    // The app is named "densefs mkfs" for its usage line; errors say "mkfs".
    std::string name = app.get_name();
    if (name.rfind("densefs ", 0) == 0) name.erase(0, 8);
    print_error(io, name, e.what());
    return k_exit_usage;
  }
  return std::nullopt;
}

void print_error(const tool_io& io, const std::string& what, const std::string& why) {
  // One line: a multi-line library message is folded.
  std::string line = why;
  std::replace(line.begin(), line.end(), '\n', ' ');
  while (!line.empty() && line.back() == ' ') line.pop_back();
  io.err << "densefs: " << what << ": " << line << '\n';
}

std::optional<std::string> read_xattr(const std::string& path, const char* name) {
  std::string value;
  // The value can change size between the two calls (stats of a live mount).
  for (int attempt = 0; attempt < 8; ++attempt) {
    const ssize_t size = ::getxattr(path.c_str(), name, nullptr, 0);
    if (size < 0) {
      if (errno == ENODATA || errno == ENOTSUP) return std::nullopt;
      throw std::system_error(errno, std::generic_category(), path);
    }
    value.resize(static_cast<std::size_t>(size) + 4096);
    const ssize_t got = ::getxattr(path.c_str(), name, value.data(), value.size());
    if (got >= 0) {
      value.resize(static_cast<std::size_t>(got));
      return value;
    }
    if (errno == ENODATA || errno == ENOTSUP) return std::nullopt;
    if (errno != ERANGE) throw std::system_error(errno, std::generic_category(), path);
  }
  throw std::system_error(ERANGE, std::generic_category(), path + ": xattr " + name);
}

std::filesystem::path absolute_path(const std::string& text) {
  std::filesystem::path p = std::filesystem::absolute(text).lexically_normal();
  if (p.has_relative_path() && !p.has_filename()) p = p.parent_path();
  return p;
}

}  // namespace densefs::tools
