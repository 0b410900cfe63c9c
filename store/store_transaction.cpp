// The transaction a commit applies.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <iterator>
#include <stdexcept>
#include <utility>

#include "store/metadata/fault_injection.h"
#include "store/metadata/metadata_engine.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

transaction::transaction() : impl_(std::make_unique<impl>()) {}
transaction::~transaction() = default;
transaction::transaction(transaction&&) noexcept = default;
transaction& transaction::operator=(transaction&&) noexcept = default;

void transaction::put_inode(const inode_record& r) {
  ensure(impl_).ops.push_back({table::inodes, false, inode_key(r.ino), r});
}
void transaction::delete_inode(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::inodes, true, inode_key(ino), {}});
}
void transaction::put_dirent(std::uint64_t parent, std::string_view name, const dirent_record& r) {
  ensure(impl_).ops.push_back({table::dirents, false, dirent_key(parent, name), r});
}
void transaction::delete_dirent(std::uint64_t parent, std::string_view name) {
  ensure(impl_).ops.push_back({table::dirents, true, dirent_key(parent, name), {}});
}
void transaction::made_inode(std::uint64_t ino, bool directory) {
  impl& t = ensure(impl_);
  if (directory)
    t.new_directories.push_back(ino);
  else
    t.new_inodes.push_back(ino);
}
void transaction::put_extent(std::uint64_t ino, std::uint64_t file_offset, const extent_record& r) {
  ensure(impl_).ops.push_back({table::extents, false, extent_key(ino, file_offset), r});
}
void transaction::delete_extent(std::uint64_t ino, std::uint64_t file_offset) {
  ensure(impl_).ops.push_back({table::extents, true, extent_key(ino, file_offset), {}});
}
void transaction::put_xattr(std::uint64_t ino, std::string_view name, std::string_view value) {
  ensure(impl_).ops.push_back(
      {table::xattrs, false, xattr_key(ino, name), encode_xattr_value(value)});
}
void transaction::delete_xattr(std::uint64_t ino, std::string_view name) {
  ensure(impl_).ops.push_back({table::xattrs, true, xattr_key(ino, name), {}});
}
void transaction::add_orphan(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, false, orphan_key(ino), encode_orphan()});
}
void transaction::remove_orphan(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, true, orphan_key(ino), {}});
}
void transaction::mark_new_file(std::uint64_t ino, std::uint64_t parent, std::string_view name,
                                std::string_view writer) {
  ensure(impl_).ops.push_back(
      {table::meta, false, new_file_key(ino), encode_new_file(parent, name, writer)});
}
void transaction::clear_new_file(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, true, new_file_key(ino), {}});
}

void transaction::ref_chunk(const prepared_chunk& chunk) {
  chunk_delta& d = ensure(impl_).chunks[chunk.hash];
  d.delta += 1;
  d.plain_size = chunk.plain_size;
  if (chunk.encoded && !d.encoded) d.encoded = chunk.encoded;
}

void transaction::unref_chunk(const chunk_hash& hash) {
  ensure(impl_).chunks[hash].delta -= 1;
}

void transaction::queue_recompress(const chunk_hash& hash, std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, false, recompress_key(hash), encode_recompress(ino)});
}
void transaction::drop_recompress(const chunk_hash& hash) {
  ensure(impl_).ops.push_back({table::meta, true, recompress_key(hash), {}});
}
void transaction::replace_payload(const chunk_hash& hash, std::uint64_t expected_checksum,
                                  codec::encoded_chunk encoded, bool content_checked) {
  std::vector<payload_swap> one;
  one.push_back({hash, expected_checksum, std::move(encoded), content_checked});
  ensure(impl_).replacements.push_back(std::move(one));
}
void transaction::replace_payloads(std::vector<payload_swap> swaps) {
  if (!swaps.empty()) ensure(impl_).replacements.push_back(std::move(swaps));
}

void transaction::prepend(transaction&& earlier) {
  if (!earlier.impl_) return;
  impl& e = *earlier.impl_;
  if (!e.chunks.empty() || !e.replacements.empty())
    throw std::logic_error(
        "transaction::prepend: chunk references and payload swaps stay in order");
  impl& t = ensure(impl_);
  t.ops.insert(t.ops.begin(), std::make_move_iterator(e.ops.begin()),
               std::make_move_iterator(e.ops.end()));
  t.new_inodes.insert(t.new_inodes.begin(), e.new_inodes.begin(), e.new_inodes.end());
  t.new_directories.insert(t.new_directories.begin(), e.new_directories.begin(),
                           e.new_directories.end());
  earlier.impl_.reset();
}

bool transaction::empty() const {
  return !impl_ || (impl_->ops.empty() && impl_->chunks.empty() && impl_->replacements.empty());
}

chunk_missing::chunk_missing(const chunk_hash& h)
    : store_error(EIO, "chunk " + h.hex() +
                           " is referenced but neither stored nor supplied with its payload"),
      hash(h) {}

}  // namespace densefs::store
