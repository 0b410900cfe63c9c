#include "fs/file_info.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "codec/codec.h"

namespace densefs::fs {
namespace {

const char* type_name(std::uint32_t mode) {
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISLNK(mode)) return "symlink";
  return "other";
}

timespec to_timespec(const store::timestamp& t) {
  return {static_cast<time_t>(t.sec), static_cast<long>(t.nsec)};
}

}  // namespace

struct stat file_stat(const store::inode_record& r) {
  struct stat st {};
  st.st_ino = r.ino;
  st.st_mode = r.mode;
  st.st_nlink = r.nlink;
  st.st_uid = r.uid;
  st.st_gid = r.gid;
  st.st_rdev = r.rdev;
  st.st_size = static_cast<off_t>(r.size);
  st.st_blksize = 4096;
  // st_blocks is the stored size: what the data costs on disk. Never 0 for
  // a non-empty file: GNU tar --sparse would archive such a file as holes.
  std::uint64_t blocks = (r.stored_bytes + 511) / 512;
  if (blocks == 0 && r.size > 0) blocks = 1;
  st.st_blocks = static_cast<blkcnt_t>(blocks);
  st.st_atim = to_timespec(r.atime);
  st.st_mtim = to_timespec(r.mtime);
  st.st_ctim = to_timespec(r.ctime);
  return st;
}

std::string file_info_json(const store::store& st, std::uint64_t ino,
                           const store::inode_record& record, const store::extent_list& extents,
                           std::uint64_t pending, std::size_t max_chunk_list_bytes,
                           std::string_view snapshot) {
  nlohmann::json j;
  j["ino"] = ino;
  // The store directory: `densefs cat` finds the daemon's control socket
  // there (STORE/control.sock, docs/export.md).
  j["store"] = st.dir().string();
  j["type"] = type_name(record.mode);
  j["size"] = record.size;
  j["stored_bytes"] = record.stored_bytes;
  j["pending_bytes"] = pending;
  // A file of a snapshot (a snapshot's mount, or .snapshots/NAME/).
  if (!snapshot.empty()) j["snapshot"] = std::string(snapshot);
  j["payload_backend"] = std::string(store::payload_backend_name(st.payloads_backend()));
  if (S_ISREG(record.mode)) {
    // What the classifier decided and the policy codec and chunker that
    // follow from it.
    j["file_type"] = std::string(codec::file_type_name(record.type));
    j["policy_codec"] = codec::format_codec_spec(st.policy().for_type(record.type));
    j["policy_chunker"] = codec::format_chunker_spec(st.policy().chunker_for(record.type));
    j["fell_back"] = (record.flags & store::k_inode_fell_back) != 0;
  }
  auto chunks = nlohmann::json::array();
  std::uint64_t count = 0;
  // Dedup hits: extents whose chunk is referenced more than once (by this
  // file elsewhere or by another file), so its bytes are stored once.
  std::uint64_t shared_chunks = 0;
  std::uint64_t shared_bytes = 0;
  std::size_t list_bytes = 0;
  bool truncated = false;
  if (S_ISREG(record.mode)) {
    for (const auto& [offset, extent] : extents) {
      ++count;
      nlohmann::json c;
      c["offset"] = offset;
      c["length"] = extent.length;
      c["hash"] = extent.hash.hex();
      if (auto record = st.get_chunk(extent.hash)) {
        c["codec"] = codec::codec_name(record->codec);
        c["plain_size"] = record->plain_size;
        c["stored_size"] = record->stored_size;
        c["refcount"] = record->refcount;
        // A lookup of its own: only for chunks the list shows.
        if (!truncated) c["recompress_queued"] = st.is_queued_for_recompress(extent.hash);
        if (record->refcount > 1) {
          ++shared_chunks;
          shared_bytes += extent.length;
        }
      }
      if (truncated) continue;
      std::string text = c.dump();
      if (list_bytes + text.size() + 1 > max_chunk_list_bytes) {
        truncated = true;
        continue;
      }
      list_bytes += text.size() + 1;
      chunks.push_back(std::move(c));
    }
  }
  j["chunk_count"] = count;
  j["shared_chunks"] = shared_chunks;
  j["shared_bytes"] = shared_bytes;
  j["chunks"] = std::move(chunks);
  if (truncated) j["chunks_truncated"] = true;
  return j.dump();
}

}  // namespace densefs::fs
