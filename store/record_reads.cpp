#include "store/record_reads.h"

#include <cerrno>

#include "store/error.h"
#include "store/records_detail.h"
#include "store/text.h"

namespace densefs::store::record_reads {
namespace {

// Names in messages: printable ASCII as is, other bytes as \xNN, so one odd
// file name cannot break a log line.
std::string printable(std::string_view name) {
  return '"' + escape_bytes(name, "\"\\") + '"';
}
std::string dirent_what(std::uint64_t parent, std::string_view name) {
  return "entry " + printable(name) + " of directory " + std::to_string(parent);
}
std::string xattr_what(std::uint64_t ino, std::string_view name) {
  return "xattr " + printable(name) + " of inode " + std::to_string(ino);
}

}  // namespace

key_range u64_prefix(std::uint64_t n) {
  return prefix_range(inode_key(n));
}

std::string extent_what(std::uint64_t ino, std::uint64_t offset) {
  return "inode " + std::to_string(ino) + " at offset " + std::to_string(offset);
}

std::uint64_t extent_offset(std::uint64_t ino, std::string_view key) {
  if (key.size() != 16)
    throw store_error(EIO, "corrupt extent key of inode " + std::to_string(ino) + ": " +
                               std::to_string(key.size()) + " bytes instead of 16");
  return decode_u64_be(key.substr(8));
}

std::optional<inode_record> inode(const metadata_engine& e, std::uint64_t ino) {
  const auto v = e.get(table::inodes, inode_key(ino), "inode " + std::to_string(ino));
  if (!v) return std::nullopt;
  return decode_inode(ino, *v);
}

std::optional<dirent_record> dirent(const metadata_engine& e, std::uint64_t parent,
                                    std::string_view name) {
  const std::string what = dirent_what(parent, name);
  const auto v = e.get(table::dirents, dirent_key(parent, name), what);
  if (!v) return std::nullopt;
  return detail::decode_dirent(*v, what);
}

void list_dir(const metadata_engine& e, std::uint64_t parent, std::optional<std::string_view> after,
              const std::function<bool(std::string_view, const dirent_record&)>& fn) {
  const std::string start = after ? dirent_key(parent, *after) : std::string();
  scan_options o;
  o.start = start;
  e.scan(table::dirents, u64_prefix(parent), o, "listing directory " + std::to_string(parent),
         [&](std::string_view key, std::string_view value) {
           const std::string_view name = key.substr(8);
           if (after && name == *after) return true;
           const std::string what = dirent_what(parent, name);
           if (name.empty())
             throw store_error(EIO, "corrupt dirent record for " + what + ": empty name");
           return fn(name, detail::decode_dirent(value, what));
         });
}

void append_extents(const metadata_engine& e, std::uint64_t ino, std::uint64_t from,
                    bool from_floor, std::uint64_t begin, std::uint64_t end, std::size_t limit,
                    extent_list& out) {
  if (out.size() >= limit) return;
  scan_options o;
  const std::string start = extent_key(ino, from);
  o.start = start;
  o.order = from_floor ? scan_order::forward_from_floor : scan_order::forward;
  e.scan(table::extents, u64_prefix(ino), o, "reading extents of inode " + std::to_string(ino),
         [&](std::string_view key, std::string_view value) {
           const std::uint64_t offset = extent_offset(ino, key);
           if (offset >= end) return false;
           const extent_record r = detail::decode_extent(value, extent_what(ino, offset));
           if (offset + r.length > begin) out.emplace_back(offset, r);
           return out.size() < limit;
         });
}

std::optional<std::string> xattr(const metadata_engine& e, std::uint64_t ino,
                                 std::string_view name) {
  const std::string what = xattr_what(ino, name);
  const auto v = e.get(table::xattrs, xattr_key(ino, name), what);
  if (!v) return std::nullopt;
  return detail::decode_xattr_value(*v, what);
}

std::vector<std::string> xattr_names(const metadata_engine& e, std::uint64_t ino) {
  std::vector<std::string> names;
  e.scan(table::xattrs, u64_prefix(ino), {}, "listing xattrs of inode " + std::to_string(ino),
         [&](std::string_view key, std::string_view) {
           names.emplace_back(key.substr(8));
           return true;
         });
  return names;
}

}  // namespace densefs::store::record_reads
