#include "store/snapshot/snapshot_reader.h"

#include <limits>

#include "store/record_reads.h"
#include "store/store.h"

namespace densefs::store {

snapshot_reader::snapshot_reader(const store& live, const metadata_engine& engine,
                                 snapshot_record record)
    : live_(live), engine_(engine), view_(engine, record.id), record_(std::move(record)) {}

bool snapshot_reader::alive() const {
  const auto row = engine_.get(table::meta, snapshot_key(record_.id), "a snapshot");
  return row && decode_snapshot(record_.id, *row, "a snapshot").state == snapshot_state::live;
}

std::optional<inode_record> snapshot_reader::get_inode(std::uint64_t ino) const {
  return record_reads::inode(view_, ino);
}

std::optional<dirent_record> snapshot_reader::get_dirent(std::uint64_t parent,
                                                         std::string_view name) const {
  return record_reads::dirent(view_, parent, name);
}

void snapshot_reader::list_dir(
    std::uint64_t parent, std::optional<std::string_view> after,
    const std::function<bool(std::string_view, const dirent_record&)>& fn) const {
  record_reads::list_dir(view_, parent, after, fn);
}

extent_list snapshot_reader::extents(std::uint64_t ino, std::uint64_t begin,
                                     std::uint64_t end) const {
  extent_list out;
  if (begin < end)
    record_reads::append_extents(view_, ino, begin, true, begin, end,
                                 std::numeric_limits<std::size_t>::max(), out);
  return out;
}

std::optional<std::string> snapshot_reader::get_xattr(std::uint64_t ino,
                                                      std::string_view name) const {
  return record_reads::xattr(view_, ino, name);
}

std::vector<std::string> snapshot_reader::list_xattrs(std::uint64_t ino) const {
  return record_reads::xattr_names(view_, ino);
}

std::shared_ptr<const std::string> snapshot_reader::read_chunk(const chunk_hash& hash) const {
  return live_.read_chunk(hash);
}

std::shared_ptr<const std::string> snapshot_reader::cached_chunk(const chunk_hash& hash) const {
  return live_.cached_chunk(hash);
}

}  // namespace densefs::store
