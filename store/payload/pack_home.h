// Where a volume's pack files live: the one seam between pack_store (the
// record format, the index, compaction; pack_store.h) and the disk or the
// object store that holds the packs. Two homes, beside this file:
//
// - local_pack_home: STORE/packs on this machine's disk. A pack is appended
//   in place and made durable with fdatasync, so an fsync through the mount
//   costs one flush of the pack appended to, not a new file per fsync.
// - object_pack_home: any object_store (S3, or a local directory through
//   directory_object_store), for a scale-out volume. A pack is appended in a
//   local staging directory and made durable by uploading it whole; after
//   that it is sealed (an object is written once). Records of packs with no
//   local copy come from the payload cache, else with ranged GETs.
//
// pack_store writes and reads records of local files by descriptor itself
// (through its batched reader, io_uring where there is one), whichever the
// home: a home hands out those descriptors and deals with everything else.
//
// Threading: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/hash.h"
#include "store/object/object_store.h"
#include "store/payload/batched_reader.h"
#include "store/payload/pack_format.h"

namespace densefs::store {

// A pack file on this machine's disk, open (read-write while it is being
// appended to, else read-only); closed with the last reference.
struct pack_file {
  pack_file(std::uint32_t id, int fd, std::filesystem::path path)
      : id(id), fd(fd), path(std::move(path)) {}
  ~pack_file();
  pack_file(const pack_file&) = delete;
  pack_file& operator=(const pack_file&) = delete;

  const std::uint32_t id;
  const int fd;
  const std::filesystem::path path;
};

// The open pack files of a home by id: each opened read-only at its first
// read and kept open, so that a read is one pread (or one io_uring entry).
class open_pack_files {
 public:
  // `path_of(id)`: where pack `id`'s local file would be.
  explicit open_pack_files(std::function<std::filesystem::path(std::uint32_t)> path_of)
      : path_of_(std::move(path_of)) {}
  // The open file of pack `id`, opened now if needed; null when there is none.
  std::shared_ptr<pack_file> get(std::uint32_t id);
  // Creates the file of new pack `id` at `path` (never over one that
  // exists: EEXIST), open read-write, writes its pack header and keeps it.
  // Throws store_error; a file whose header could not be written is
  // removed again.
  std::shared_ptr<pack_file> create(std::uint32_t id, std::filesystem::path path);
  // Closes pack `id` once its readers let go (deleted, or evicted from a cache).
  void forget(std::uint32_t id);

 private:
  const std::function<std::filesystem::path(std::uint32_t)> path_of_;
  std::mutex mutex_;
  std::map<std::uint32_t, std::shared_ptr<pack_file>> files_;
};

// Packs appended to since they were last made durable.
struct packs_to_make_durable {
  std::vector<std::shared_ptr<pack_file>> packs;
  bool created = false;  // a pack was created since (its directory entry too)
};

class pack_home {
 public:
  virtual ~pack_home() = default;

  // Names pack `id` in messages: "/store/packs/00000001.pack", or
  // "packs/00000001.pack in s3://bucket/prefix at http://host:port".
  virtual std::string location(std::uint32_t id) const = 0;

  // A new pack file, open read-write, holding only its pack header, under a
  // number no pack of the volume had. Throws store_error naming the file.
  virtual std::shared_ptr<pack_file> create() = 0;
  // Makes the packs in `p` durable: once it returns, an index entry may
  // name any record appended to them before the call. On a throw, `p` holds
  // what is still not durable (for the next call).
  virtual void make_durable(packs_to_make_durable& p) = 0;
  // True when make_durable() seals a pack (nothing may be appended to it
  // after): an object is written whole, once.
  virtual bool seals_when_durable() const = 0;

  // Pack `id`'s local file, open, or null when this machine has none.
  virtual std::shared_ptr<pack_file> local_file(std::uint32_t id) = 0;
  // A record of pack `id` was just read from its local file.
  virtual void read_locally(std::uint32_t id) { (void)id; }
  // Whole records (header and payload) of packs with no local file, in the
  // order of `refs`, each checked against `hashes` (record_problem) before
  // it is used or kept. Throws store_error(EIO) naming the chunk and the pack.
  virtual std::vector<std::string> fetch(std::span<const chunk_hash> hashes,
                                         std::span<const pack_ref> refs) = 0;

  // (id, bytes) of every pack, by id.
  virtual std::vector<std::pair<std::uint32_t, std::uint64_t>> sizes() const = 0;
  // The packs' bytes when known without I/O (object storage, once listed:
  // what df shows), else nullopt.
  virtual std::optional<std::uint64_t> known_bytes() const { return std::nullopt; }
  // Calls `use` with the bytes of pack `id`, which sizes() said has `size`
  // bytes (mapped or read; for fsck and index rebuilds). Throws store_error
  // saying why not, without naming the pack (the caller does).
  virtual void read_whole(std::uint32_t id, std::uint64_t size,
                          const std::function<void(std::string_view)>& use) = 0;
  // Deletes pack `id` (compaction emptied it). Throws store_error.
  virtual void remove(std::uint32_t id) = 0;
  // Throws store_error when pack `id` cannot be reached now: compaction
  // keeps a pack one of whose records did not read, but a home that is down
  // ends the compaction instead.
  virtual void check_reachable(std::uint32_t id) { (void)id; }

  // A scale-out volume's object store, its local cache directory and the
  // cache's bytes; null, empty and 0 for local packs.
  virtual const object_store* objects() const { return nullptr; }
  virtual std::filesystem::path cache_dir() const { return {}; }
  virtual std::uint64_t cache_bytes() const { return 0; }
  // Records read through the local cache (a cached record, a pack cached
  // or still staged whole) and records fetched from the object store: what
  // -o metrics= serves. Zero for local packs.
  struct cache_reads {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
  };
  virtual cache_reads cache_counts() const { return {}; }
};

// Creates directory `dir` (mode 0700: it holds file contents) unless it
// exists; true when it did. Throws store_error naming it.
bool make_private_directory(const std::filesystem::path& dir);

// The whole record `ref` of `hash` from local pack file `f` through
// `reader`, checked (record_problem); store_error(EIO) naming the chunk and
// `location` otherwise.
std::string read_checked_record(batched_reader& reader, const pack_file& f, const chunk_hash& hash,
                                const pack_ref& ref, const std::string& location);

// Throws store_error(EIO): "payload of chunk HASH in pack LOCATION: WHY".
[[noreturn]] void throw_pack_read_error(const chunk_hash& hash, const std::string& location,
                                        const std::string& why);

}  // namespace densefs::store
