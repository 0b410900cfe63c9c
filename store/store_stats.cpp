// `densefs stats`: what a store holds and saves.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <unordered_set>

#include "codec/lepton_file.h"
#include "store/metadata/metadata_engine.h"
#include "store/payload/pack_store.h"
#include "store/records_detail.h"
#include "store/snapshot/pre_image.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

namespace fs = std::filesystem;

store_stats store::stats() const {
  store_stats st;
  st.policy = codec::format_policy(policy_);
  st.payload_backend = payload_backend_name(settings_.payloads);
  st.metadata_engine = engine_->kind();
  st.metadata_location = engine_->where();
  if (encrypted_) st.encryption = "aes-256-gcm";
  if (packs_ && packs_->remote()) {
    st.payload_location = packs_->remote()->where();
    st.payload_object_bytes = packs_->file_bytes();
    st.cache_bytes = packs_->cache_bytes();
    st.cache_capacity = options_.cache_bytes;
    st.object_requests = packs_->remote()->requests();
  }
  if (packs_) {
    st.pack_reader = packs_->reader_kind();
    // A directory listing: the index walk of usage() is not needed to count.
    for (const std::uint64_t size : packs_->file_sizes())
      if (size > 0) ++st.pack_files;
  }
  // scan_prefix: one pass over everything without filling the engine's cache.
  scan_prefix(table::inodes, {}, {}, "scanning inodes",
              [&](std::string_view key, std::string_view value) {
                const inode_record r = decode_inode(decode_u64_be(key), value);
                if (S_ISREG(r.mode)) {
                  ++st.files;
                  st.logical_bytes += r.size;
                  store_stats::type_stats& t = st.by_type[static_cast<std::size_t>(r.type)];
                  ++t.files;
                  t.logical_bytes += r.size;
                  t.stored_bytes += r.stored_bytes;
                  if (r.flags & k_inode_fell_back) ++t.fallbacks;
                } else if (S_ISDIR(r.mode)) {
                  ++st.directories;
                }
                return true;
              });
  // Snapshots: the chunks their kept extents name (few: only records
  // changed since a snapshot have one), less those live files use too.
  st.snapshots = read_snapshots(*engine_).size();
  std::unordered_set<chunk_hash, chunk_hash_hasher> only_in_snapshots;
  if (st.snapshots > 0) {
    std::string prefix(k_pre_image_prefix);
    prefix += static_cast<char>(table::extents);
    scan_prefix(table::meta, prefix, prefix, "scanning the extents snapshots keep",
                [&](std::string_view, std::string_view value) {
                  if (const auto kept = decode_pre_image(value, "a snapshot's extent"))
                    only_in_snapshots.insert(detail::decode_extent(*kept, "scan").hash);
                  return true;
                });
  }
  scan_prefix(table::extents, {}, {}, "scanning extents",
              [&](std::string_view, std::string_view value) {
                const extent_record e = detail::decode_extent(value, "scan");
                st.referenced_bytes += e.length;
                if (!only_in_snapshots.empty()) only_in_snapshots.erase(e.hash);
                return true;
              });
  for (const chunk_hash& h : only_in_snapshots)
    if (const std::optional<chunk_record> c = get_chunk(h))
      st.snapshot_only_bytes += c->stored_size;
  scan_prefix(table::chunks, {}, {}, "scanning chunks",
              [&](std::string_view key, std::string_view value) {
                const chunk_record r =
                    detail::decode_chunk(value, "chunk " + chunk_hash::from_bytes(key).hex());
                ++st.chunks;
                st.unique_plain_bytes += r.plain_size;
                st.stored_bytes += r.stored_size;
                const auto id = static_cast<std::size_t>(r.codec);
                if (id < std::size(st.chunks_by_codec)) {
                  ++st.chunks_by_codec[id];
                  st.stored_by_codec[id] += r.stored_size;
                  st.plain_by_codec[id] += r.plain_size;
                }
                return true;
              });
  scan_prefix(table::meta, k_recompress_prefix, k_recompress_prefix, "counting queued re-encodings",
              [&](std::string_view, std::string_view) {
                ++st.pending_recompress;
                return true;
              });
  st.dedup_saved_bytes =
      st.referenced_bytes > st.unique_plain_bytes ? st.referenced_bytes - st.unique_plain_bytes : 0;

  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) == 0 && !S_ISDIR(sb.st_mode))
      st.disk_bytes += static_cast<std::uint64_t>(sb.st_blocks) * 512;
  }
  return st;
}

namespace {
// Fraction of `plain` saved (0 when nothing is stored, negative when the
// stored form is larger).
double savings(std::uint64_t plain, std::uint64_t stored) {
  return plain == 0 ? 0.0 : 1.0 - static_cast<double>(stored) / static_cast<double>(plain);
}
}  // namespace

std::string to_json(const store_stats& s) {
  nlohmann::json j;
  j["files"] = s.files;
  j["directories"] = s.directories;
  j["logical_bytes"] = s.logical_bytes;
  j["referenced_bytes"] = s.referenced_bytes;
  j["chunks"] = s.chunks;
  j["unique_plain_bytes"] = s.unique_plain_bytes;
  j["stored_bytes"] = s.stored_bytes;
  j["dedup_saved_bytes"] = s.dedup_saved_bytes;
  j["disk_bytes"] = s.disk_bytes;
  j["chunks_by_codec"] = s.chunks_by_codec;
  j["stored_by_codec"] = s.stored_by_codec;
  j["plain_by_codec"] = s.plain_by_codec;
  j["pending_recompress"] = s.pending_recompress;
  j["policy"] = s.policy;
  j["payload_backend"] = s.payload_backend;
  j["metadata_engine"] = s.metadata_engine;
  j["metadata_location"] = s.metadata_location;
  j["encryption"] = s.encryption;
  j["snapshots"] = s.snapshots;
  j["snapshot_only_bytes"] = s.snapshot_only_bytes;
  if (!s.payload_location.empty()) {
    j["payload_location"] = s.payload_location;
    j["payload_object_bytes"] = s.payload_object_bytes;
    j["cache_bytes"] = s.cache_bytes;
    j["cache_capacity"] = s.cache_capacity;
    const object_store::request_counts& r = s.object_requests;
    j["object_requests"] = {{"put", r.puts},
                            {"get", r.gets},
                            {"head", r.heads},
                            {"list", r.lists},
                            {"delete", r.deletes},
                            {"bytes_sent", r.bytes_sent},
                            {"bytes_received", r.bytes_received}};
  }
  if (s.payload_backend == "pack") {
    j["pack_files"] = s.pack_files;
    j["pack_reader"] = s.pack_reader;
  }
  j["ratio"] = s.logical_bytes == 0
                   ? 0.0
                   : static_cast<double>(s.stored_bytes) / static_cast<double>(s.logical_bytes);
  nlohmann::json codecs = nlohmann::json::object();
  for (std::size_t i = 0; i < std::size(s.chunks_by_codec); ++i) {
    // raw and zstd always appear, so scripts can rely on them.
    if (s.chunks_by_codec[i] == 0 && i > static_cast<std::size_t>(codec::codec_id::zstd)) continue;
    codecs[codec::codec_name(static_cast<codec::codec_id>(i))] = {
        {"chunks", s.chunks_by_codec[i]},
        {"plain_bytes", s.plain_by_codec[i]},
        {"stored_bytes", s.stored_by_codec[i]},
        {"savings", savings(s.plain_by_codec[i], s.stored_by_codec[i])}};
  }
  j["codecs"] = codecs;
  // A Lepton file's first chunk holds the whole JPEG and its members hold
  // 48 bytes each, so the two codec rows alone say little: together, what
  // those JPEGs save.
  const auto file = static_cast<std::size_t>(codec::codec_id::lepton_file);
  const auto member = static_cast<std::size_t>(codec::codec_id::lepton_member);
  if (s.chunks_by_codec[file] != 0) {
    const std::uint64_t plain = s.plain_by_codec[file] + s.plain_by_codec[member];
    const std::uint64_t stored = s.stored_by_codec[file] + s.stored_by_codec[member];
    j["lepton_files"] = {{"files", s.chunks_by_codec[file]},
                         {"chunks", s.chunks_by_codec[file] + s.chunks_by_codec[member]},
                         {"plain_bytes", plain},
                         {"stored_bytes", stored},
                         {"savings", savings(plain, stored)}};
  }
  nlohmann::json types = nlohmann::json::object();
  for (std::size_t i = 0; i < codec::k_file_type_count; ++i) {
    const store_stats::type_stats& t = s.by_type[i];
    if (t.files == 0) continue;
    types[std::string(codec::file_type_name(static_cast<codec::file_type>(i)))] = {
        {"files", t.files},
        {"logical_bytes", t.logical_bytes},
        {"stored_bytes", t.stored_bytes},
        {"savings", savings(t.logical_bytes, t.stored_bytes)},
        {"fallbacks", t.fallbacks}};
  }
  j["types"] = types;
  return j.dump();
}

}  // namespace densefs::store
