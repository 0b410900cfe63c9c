#include "store/snapshot/pre_image.h"

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

constexpr std::size_t k_id_bytes = 8;

std::string be64(std::uint64_t v) {
  std::string out(k_id_bytes, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[static_cast<std::size_t>(i)] = static_cast<char>(v);
  return out;
}

std::string table_prefix(table t) {
  std::string p(k_pre_image_prefix);
  p += static_cast<char>(t);
  return p;
}

}  // namespace

std::string escape_key(std::string_view key) {
  std::string out;
  out.reserve(key.size() + 2);
  for (const char c : key) {
    out += c;
    if (c == '\0') out += '\xff';
  }
  out += '\0';
  out += '\x01';
  return out;
}

std::optional<std::string> unescape_key(std::string_view escaped) {
  std::string out;
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '\0') {
      out += escaped[i];
      continue;
    }
    if (i + 1 >= escaped.size()) return std::nullopt;
    if (escaped[i + 1] == '\xff') {
      out += '\0';
      ++i;
    } else if (escaped[i + 1] == '\x01' && i + 2 == escaped.size()) {
      return out;
    } else {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::string pre_image_key(table t, std::string_view key, std::uint64_t snapshot) {
  return table_prefix(t) + escape_key(key) + be64(snapshot);
}

key_range pre_image_range(table t, const key_range& range) {
  key_range r;
  // Escaped keys keep the order, so the record range maps to the rows of
  // the records in it: from the first row of `lower`, to the first row of
  // `upper` (or the end of the table's rows).
  r.lower = table_prefix(t) + (range.lower.empty() ? std::string() : escape_key(range.lower));
  if (range.upper.empty()) {
    r.upper = prefix_range(table_prefix(t)).upper;
  } else {
    r.upper = table_prefix(t) + escape_key(range.upper);
  }
  return r;
}

std::optional<pre_image_row> parse_pre_image_key(std::string_view row_key) {
  const std::size_t head = k_pre_image_prefix.size() + 1;
  if (row_key.size() < head + 2 + k_id_bytes || !row_key.starts_with(k_pre_image_prefix))
    return std::nullopt;
  const auto t = static_cast<unsigned char>(row_key[k_pre_image_prefix.size()]);
  if (t >= k_table_count) return std::nullopt;
  const std::string_view escaped = row_key.substr(head, row_key.size() - head - k_id_bytes);
  std::optional<std::string> key = unescape_key(escaped);
  if (!key) return std::nullopt;
  std::uint64_t id = 0;
  for (const char c : row_key.substr(row_key.size() - k_id_bytes))
    id = (id << 8) | static_cast<unsigned char>(c);
  return pre_image_row{static_cast<table>(t), std::move(*key), id};
}

std::string encode_pre_image(const std::optional<std::string_view>& value) {
  if (!value) return std::string(1, '\0');
  std::string out(1, '\x01');
  out += *value;
  return out;
}

std::optional<std::string> decode_pre_image(std::string_view row_value, std::string_view what) {
  if (row_value == std::string_view("\0", 1)) return std::nullopt;
  if (row_value.empty() || row_value[0] != '\x01')
    throw store_error(EIO, "corrupt pre-image row of " + std::string(what));
  return std::string(row_value.substr(1));
}

bool is_pre_imaged(table t) {
  return t == table::inodes || t == table::dirents || t == table::extents || t == table::xattrs;
}

std::optional<std::uint64_t> owner_ino(std::string_view key) {
  if (key.size() < 8) return std::nullopt;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(key[i]);
  return v;
}

}  // namespace densefs::store
