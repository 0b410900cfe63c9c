#include "store/membership/change_notice.h"

#include <algorithm>
#include <set>

#include "store/text.h"

namespace densefs::store {

namespace {
constexpr std::string_view k_notice_version = "1";
// PostgreSQL refuses NOTIFY payloads of 8,000 bytes or more.
constexpr std::size_t k_max_notice_bytes = 7000;

void append_hex_u64(std::string& out, std::uint64_t v) {
  char buf[16];
  int n = 0;
  do {
    buf[n++] = hex_digit(static_cast<unsigned>(v & 15));
    v >>= 4;
  } while (v != 0);
  while (n > 0) out += buf[--n];
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::uint64_t> parse_hex_u64(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    const int d = hex_value(c);
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<std::uint64_t>(d);
  }
  return v;
}
}  // namespace

std::string encode_change_notice(const change_notice& c) {
  std::string out(k_notice_version);
  // The writer's token survives a notice cut to `*`: a shared writer must
  // still know its own.
  const std::string writer = c.writer.empty() ? std::string() : " w" + c.writer;
  if (c.everything) return out + " *" + writer;
  std::set<std::uint64_t> inodes(c.inodes.begin(), c.inodes.end());
  std::set<std::pair<std::uint64_t, std::string>> entries(c.entries.begin(), c.entries.end());
  for (const std::uint64_t ino : inodes) {
    out += " i";
    append_hex_u64(out, ino);
  }
  for (const auto& [parent, name] : entries) {
    out += " e";
    append_hex_u64(out, parent);
    out += ':';
    out += to_hex(name);
    if (out.size() > k_max_notice_bytes) break;
  }
  for (const std::string& id : c.sessions_started) out += " s" + id;
  for (const std::string& id : c.sessions_answered) out += " a" + id;
  out += writer;
  if (out.size() > k_max_notice_bytes) return std::string(k_notice_version) + " *" + writer;
  return out;
}

std::optional<change_notice> decode_change_notice(std::string_view text) {
  change_notice c;
  std::size_t at = 0;
  bool first = true;
  while (at <= text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view token = text.substr(at, end - at);
    at = end + 1;
    if (first) {
      if (token != k_notice_version) return std::nullopt;
      first = false;
    } else if (token == "*") {
      c.everything = true;
    } else if (token.size() > 1 && token[0] == 'i') {
      const auto ino = parse_hex_u64(token.substr(1));
      if (!ino) return std::nullopt;
      c.inodes.push_back(*ino);
    } else if (token.size() > 1 && token[0] == 'e') {
      const std::size_t colon = token.find(':');
      if (colon == std::string_view::npos) return std::nullopt;
      const auto parent = parse_hex_u64(token.substr(1, colon - 1));
      const std::string_view hex = token.substr(colon + 1);
      if (!parent || hex.empty() || hex.size() % 2 != 0 || hex.size() > 2 * 255)  // NAME_MAX
        return std::nullopt;
      std::string name;
      for (std::size_t i = 0; i < hex.size(); i += 2) {
        const int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        name += static_cast<char>(hi << 4 | lo);
      }
      c.entries.emplace_back(*parent, std::move(name));
    } else if (token.size() == 17 && (token[0] == 's' || token[0] == 'a' || token[0] == 'w')) {
      // A session id: 16 lower-case hex digits (random_hex_id).
      const std::string_view id = token.substr(1);
      if (!std::all_of(id.begin(), id.end(), [](char ch) { return hex_value(ch) >= 0; }))
        return std::nullopt;
      if (token[0] == 'w')
        c.writer = id;
      else
        (token[0] == 's' ? c.sessions_started : c.sessions_answered).emplace_back(id);
    } else {
      return std::nullopt;
    }
  }
  if (first) return std::nullopt;
  return c;
}

}  // namespace densefs::store
