#include "store/text.h"

namespace densefs::store {

std::string to_hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_hex(out, static_cast<std::uint8_t>(c));
  return out;
}

std::string percent_encode(std::string_view s, bool keep_slash) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if ((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || b == '-' ||
        b == '_' || b == '.' || b == '~' || (keep_slash && b == '/')) {
      out += c;
    } else {
      out += '%';
      append_hex(out, b, true);
    }
  }
  return out;
}

std::string escape_bytes(std::string_view s, std::string_view escaped) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f && escaped.find(c) == std::string_view::npos) {
      out += c;
    } else {
      out += "\\x";
      append_hex(out, b);
    }
  }
  return out;
}

}  // namespace densefs::store
