// Bytes as text, one way everywhere in store/: hex digits (chunk names,
// SQL literals, SigV4 digests, change notices), percent-encoding (S3 URLs,
// libpq URIs) and names fit for a log line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace densefs::store {

// The hex digit of `v` (0-15), lower case unless `upper_case`.
inline char hex_digit(unsigned v, bool upper_case = false) {
  return (upper_case ? "0123456789ABCDEF" : "0123456789abcdef")[v & 15];
}

// Appends `b` as two hex digits.
inline void append_hex(std::string& out, std::uint8_t b, bool upper_case = false) {
  out += hex_digit(b >> 4, upper_case);
  out += hex_digit(b & 15, upper_case);
}

// `bytes` as lower-case hex, two digits a byte.
std::string to_hex(std::string_view bytes);

// RFC 3986's unreserved characters (A-Z a-z 0-9 - _ . ~), and '/' when
// `keep_slash`, as they are; every other byte as %XX in upper case. What
// S3's SigV4 signs and what libpq reads back from a URI.
std::string percent_encode(std::string_view s, bool keep_slash = false);

// Printable ASCII as is, other bytes and those in `escaped` as \xNN, so one
// odd file name cannot break a log line or a message.
std::string escape_bytes(std::string_view s, std::string_view escaped = "\\");

}  // namespace densefs::store
