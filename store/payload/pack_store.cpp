#include "store/payload/pack_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>
#include <utility>

#include "store/durable_file.h"
#include "store/error.h"
#include "store/log.h"
#include "store/records.h"

namespace densefs::store {
namespace fs = std::filesystem;

namespace {

constexpr char k_pack_magic[8] = {'D', 'F', 'S', 'P', 'A', 'C', 'K', '\0'};
constexpr std::uint32_t k_pack_version = 1;
constexpr char k_record_magic[4] = {'D', 'F', 'P', 'R'};
constexpr std::uint8_t k_record_version = 1;
// Tags of payloads column family values in a pack store.
constexpr std::uint8_t k_value_inline = 1;
constexpr std::uint8_t k_value_pack_ref = 2;
constexpr std::size_t k_pack_ref_value_size = 1 + 4 + 8 + 4;
// codec ids a record may name (codec::codec_id): every id this build knows.
constexpr std::uint8_t k_max_codec_id = codec::k_codec_count - 1;

void put_le(char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string_view key_of(const chunk_hash& hash) {
  return hash.view();
}

std::string pack_header(std::uint32_t id) {
  std::string h(k_pack_header_size, '\0');
  std::memcpy(h.data(), k_pack_magic, 8);
  put_le(h.data() + 8, k_pack_version, 4);
  put_le(h.data() + 12, id, 4);
  // 16..23 reserved (zero)
  put_le(h.data() + 24, stored_checksum(std::string_view(h.data(), 24)), 8);
  return h;
}

void record_header(char* h, const chunk_hash& hash, const payload_meta& meta,
                   std::string_view stored) {
  std::memset(h, 0, k_pack_record_header_size);
  std::memcpy(h, k_record_magic, 4);
  h[4] = static_cast<char>(k_record_version);
  h[5] = static_cast<char>(meta.codec);
  // 6..7 reserved (zero)
  std::memcpy(h + 8, hash.bytes.data(), chunk_hash::k_size);
  put_le(h + 40, meta.plain_size, 4);
  put_le(h + 44, stored.size(), 4);
  put_le(h + 48, stored_checksum(stored), 8);
  put_le(h + 56, stored_checksum(std::string_view(h, 56)), 8);
}

// Why a record header is not valid, or empty. `length` is the record's
// length as the index (or the scan) expects it; 0 to skip that check.
std::string header_problem(const char* h, std::uint64_t length) {
  if (std::memcmp(h, k_record_magic, 4) != 0) return "no record magic";
  if (get_le(h + 56, 8) != stored_checksum(std::string_view(h, 56)))
    return "record header checksum mismatch";
  if (static_cast<std::uint8_t>(h[4]) != k_record_version)
    return "unknown record version " + std::to_string(static_cast<std::uint8_t>(h[4]));
  if (static_cast<std::uint8_t>(h[5]) > k_max_codec_id)
    return "unknown codec id " + std::to_string(static_cast<std::uint8_t>(h[5]));
  const std::uint64_t stored = get_le(h + 44, 4);
  if (stored > max_pack_payload(static_cast<codec::codec_id>(static_cast<std::uint8_t>(h[5]))))
    return "stored size " + std::to_string(stored) + " too large";
  if (length != 0 && stored + k_pack_record_header_size != length)
    return "record holds " + std::to_string(stored) + " payload bytes, the index says " +
           std::to_string(length - k_pack_record_header_size);
  return {};
}

void write_all(int fd, const struct iovec* iov, int count, std::uint64_t offset,
               const fs::path& path) {
  std::vector<struct iovec> v(iov, iov + count);
  std::size_t first = 0;
  while (first < v.size()) {
    const ssize_t n = ::pwritev(fd, v.data() + first, static_cast<int>(v.size() - first),
                                static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw store_error(e, "writing pack " + path.string() + ": " + errno_text(e));
    }
    offset += static_cast<std::uint64_t>(n);
    auto left = static_cast<std::size_t>(n);
    while (first < v.size() && left >= v[first].iov_len) left -= v[first++].iov_len;
    if (first < v.size()) {
      v[first].iov_base = static_cast<char*>(v[first].iov_base) + left;
      v[first].iov_len -= left;
    }
  }
}

// Pack ids of the files in `dir` named like pack_file_name().
std::vector<std::uint32_t> list_packs(const fs::path& dir) {
  std::vector<std::uint32_t> ids;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 13 || !name.ends_with(".pack")) continue;
    if (!std::all_of(name.begin(), name.begin() + 8, [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    ids.push_back(static_cast<std::uint32_t>(std::stoul(name.substr(0, 8))));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string object_name(std::uint32_t id) {
  return "packs/" + pack_file_name(id);
}

// The pack id of an object named like object_name(), or nullopt.
std::optional<std::uint32_t> pack_id_of_object(std::string_view name) {
  if (name.size() != 19 || !name.starts_with("packs/") || !name.ends_with(".pack"))
    return std::nullopt;
  const std::string_view digits = name.substr(6, 8);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return static_cast<std::uint32_t>(std::stoul(std::string(digits)));
}

// Parses one pack's bytes (the whole file or object): every record to `fn`,
// everything that does not parse to `bad`, naming `label`.
void scan_pack_bytes(std::uint32_t id, const std::string& label, const char* base,
                     std::uint64_t size, const std::function<void(const pack_record_info&)>& fn,
                     const std::function<void(const std::string&)>& bad) {
  if (size < k_pack_header_size) {
    bad(label + ": shorter than a pack header");
    return;
  }
  if (std::memcmp(base, k_pack_magic, 8) != 0 ||
      get_le(base + 24, 8) != stored_checksum(std::string_view(base, 24)) ||
      get_le(base + 8, 4) != k_pack_version || get_le(base + 12, 4) != id)
    bad(label + ": bad pack header (magic, checksum, version or id)");
  std::uint64_t pos = k_pack_header_size;
  while (pos + k_pack_record_header_size <= size) {
    const char* h = base + pos;
    std::string why = header_problem(h, 0);
    const std::uint64_t stored = get_le(h + 44, 4);
    if (why.empty() && pos + k_pack_record_header_size + stored > size)
      why = "record passes the end of the pack (torn append)";
    if (why.empty()) {
      pack_record_info r;
      r.hash = chunk_hash::from_bytes(std::string_view(h + 8, chunk_hash::k_size));
      r.codec = static_cast<codec::codec_id>(static_cast<std::uint8_t>(h[5]));
      r.plain_size = static_cast<std::uint32_t>(get_le(h + 40, 4));
      r.stored_size = static_cast<std::uint32_t>(stored);
      r.checksum = get_le(h + 48, 8);
      r.payload_ok =
          stored_checksum(std::string_view(h + k_pack_record_header_size, stored)) == r.checksum;
      r.where = {id, pos, static_cast<std::uint32_t>(k_pack_record_header_size + stored)};
      fn(r);
      pos += r.where.length;
      continue;
    }
    bad(label + " at offset " + std::to_string(pos) + ": " + why);
    // Resynchronise on the next record magic.
    const void* next = ::memmem(h + 1, size - pos - 1, k_record_magic, sizeof(k_record_magic));
    if (!next) break;
    pos = static_cast<std::uint64_t>(static_cast<const char*>(next) - base);
  }
}

}  // namespace

std::string pack_file_name(std::uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08u.pack", id);
  return buf;
}

std::string encode_inline_payload(std::string_view stored) {
  std::string v;
  v.reserve(stored.size() + 1);
  v.push_back(static_cast<char>(k_value_inline));
  v.append(stored);
  return v;
}

std::string encode_pack_ref(const pack_ref& ref) {
  std::string v(k_pack_ref_value_size, '\0');
  v[0] = static_cast<char>(k_value_pack_ref);
  put_le(v.data() + 1, ref.pack, 4);
  put_le(v.data() + 5, ref.offset, 8);
  put_le(v.data() + 13, ref.length, 4);
  return v;
}

payload_value decode_payload_value(const chunk_hash& hash, std::string_view value) {
  payload_value out;
  const auto bad = [&](const std::string& why) {
    return store_error(EIO, "payload index entry of chunk " + hash.hex() + " is corrupt: " + why);
  };
  if (value.empty()) throw bad("empty value");
  const auto tag = static_cast<std::uint8_t>(value[0]);
  if (tag == k_value_inline) {
    out.inline_bytes = value.substr(1);
    return out;
  }
  if (tag != k_value_pack_ref) throw bad("unknown kind " + std::to_string(tag));
  if (value.size() != k_pack_ref_value_size)
    throw bad(std::to_string(value.size()) + " bytes, expected " +
              std::to_string(k_pack_ref_value_size));
  out.ref.pack = static_cast<std::uint32_t>(get_le(value.data() + 1, 4));
  out.ref.offset = get_le(value.data() + 5, 8);
  out.ref.length = static_cast<std::uint32_t>(get_le(value.data() + 13, 4));
  if (out.ref.length <= k_pack_record_header_size ||
      out.ref.length > k_pack_record_header_size + k_max_lepton_file_pack_payload ||
      out.ref.offset < k_pack_header_size)
    throw bad("record length " + std::to_string(out.ref.length) + " at offset " +
              std::to_string(out.ref.offset) + " is impossible");
  return out;
}

struct pack_store::pack_file {
  std::uint32_t id = 0;
  int fd = -1;
  fs::path path;
  ~pack_file() {
    if (fd >= 0) ::close(fd);
  }
};

pack_store::pack_store(metadata_engine& engine, fs::path store_dir, options o)
    : engine_(engine),
      remote_(o.remote),
      pack_dir_(store_dir / "packs"),
      options_(o),
      reader_(make_batched_reader(o.io)) {
  if (remote_) {
    cache_dir_ = o.cache_dir.empty() ? store_dir / "cache" : o.cache_dir;
    staging_dir_ = cache_dir_ / "staging";
    pack_dir_ = cache_dir_ / "packs";
    // Packs left in staging by a run that stopped were never uploaded, so
    // no index entry names them (a commit naming a pack waits for its
    // upload): they are only dead bytes. (Not by a read-only open: the
    // volume may be mounted.)
    std::error_code ec;
    if (!o.read_only) fs::remove_all(staging_dir_, ec);
    cache_ = std::make_unique<payload_cache>(
        cache_dir_, o.cache_bytes,
        [this](std::uint32_t id) {
          std::lock_guard lock(files_mutex_);
          files_.erase(id);
        },
        o.read_only && !o.fill_cache);
    return;
  }
  // New records always go to a new pack: the last pack of an earlier run
  // may end in a torn record (a crash mid-append), and appending after it
  // would hide the records behind it from a scan that stops there.
  const std::vector<std::uint32_t> ids = list_packs(pack_dir_);
  next_id_ = ids.empty() ? 1 : ids.back() + 1;
}

std::string pack_store::pack_location(std::uint32_t id) const {
  if (remote_) return object_name(id) + " in " + remote_->where();
  return (pack_dir_ / pack_file_name(id)).string();
}

std::uint32_t pack_store::allocate_remote_pack_id() {
  // Read and written in one locked transaction: writers beside each other
  // on one volume take numbers from the same counter. The number is durable
  // before any pack of that name is uploaded.
  std::uint64_t next = 1;
  engine_.write_locked(
      k_counters_section,
      [&](locked_reads& reads, metadata_batch& batch) {
        const std::optional<std::string> v =
            reads.get(table::meta, k_next_pack_key, "the pack counter");
        next = 1;
        if (v) {
          if (v->size() != 8)
            throw store_error(EIO, "the pack counter of the volume is corrupt (" +
                                       std::to_string(v->size()) + " bytes, expected 8)");
          next = get_le(v->data(), 8);
        }
        if (next == 0 || next > 99'999'999)
          throw store_error(EIO, "the pack counter of the volume is " + std::to_string(next) +
                                     ", outside 1..99999999");
        std::string value(8, '\0');
        put_le(value.data(), next + 1, 8);
        batch.put(table::meta, k_next_pack_key, value);
      },
      true);
  return static_cast<std::uint32_t>(next);
}

pack_store::~pack_store() = default;

std::shared_ptr<pack_store::pack_file> pack_store::file(std::uint32_t id) {
  std::lock_guard lock(files_mutex_);
  if (auto it = files_.find(id); it != files_.end()) return it->second;
  auto f = std::make_shared<pack_file>();
  f->id = id;
  f->path = pack_dir_ / pack_file_name(id);
  f->fd = ::open(f->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return nullptr;
  files_[id] = f;
  return f;
}

void pack_store::roll_locked() {
  if (options_.read_only) throw store_error(EROFS, "pack store is read-only");
  const fs::path& dir = remote_ ? staging_dir_ : pack_dir_;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directory(dir, ec);
    if (ec) throw store_error(ec.value(), "cannot create " + dir.string() + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);  // file contents, like the store directory
    if (!remote_) fsync_directory(dir.parent_path());
  }
  auto f = std::make_shared<pack_file>();
  if (remote_) next_id_ = allocate_remote_pack_id();
  f->id = next_id_;
  f->path = dir / pack_file_name(f->id);
  f->fd = ::open(f->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (f->fd < 0) {
    const int e = errno;
    // Left by a run that crashed mid-roll, or made meanwhile: skip its id.
    if (e == EEXIST) ++next_id_;
    throw store_error(e, "cannot create pack " + f->path.string() + ": " + errno_text(e));
  }
  ++next_id_;
  const std::string header = pack_header(f->id);
  struct iovec iov {
    const_cast<char*>(header.data()), header.size()
  };
  write_all(f->fd, &iov, 1, 0, f->path);
  {
    std::lock_guard lock(files_mutex_);
    files_[f->id] = f;
  }
  current_ = f;
  current_size_ = k_pack_header_size;
  writeback_from_ = 0;
  unsynced_.push_back(f);
  dir_unsynced_ = true;
}

void pack_store::put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
                     const payload_meta& meta) {
  if (stored.size() < k_min_pack_payload) {
    batch.put(table::payloads, key_of(hash), encode_inline_payload(stored));
    return;
  }
  if (stored.size() > max_pack_payload(meta.codec))
    throw store_error(EIO, "chunk " + hash.hex() + ": stored size " +
                               std::to_string(stored.size()) + " too large for a pack record");
  char header[k_pack_record_header_size];
  record_header(header, hash, meta, stored);
  pack_ref ref;
  {
    std::lock_guard lock(append_mutex_);
    if (!current_ || current_size_ >= options_.pack_size_cap) roll_locked();
    struct iovec iov[2] = {{header, sizeof(header)},
                           {const_cast<char*>(stored.data()), stored.size()}};
    try {
      write_all(current_->fd, iov, 2, current_size_, current_->path);
    } catch (const store_error&) {
      // Part of the record may be on disk: the next record starts a new
      // pack, so a scan of this one never runs into bytes after a torn one.
      current_.reset();
      throw;
    }
    ref.pack = current_->id;
    ref.offset = current_size_;
    ref.length = static_cast<std::uint32_t>(sizeof(header) + stored.size());
    current_size_ += ref.length;
    if (unsynced_.empty() || unsynced_.back() != current_) unsynced_.push_back(current_);
    start_writeback_locked();
  }
  batch.put(table::payloads, key_of(hash), encode_pack_ref(ref));
}

// Starts the write-back of what was appended since the last call once there
// is enough of it, without waiting (RocksDB's bytes_per_sync): otherwise a
// big write leaves it all to the fdatasync of the next fsync, which then
// waits for the whole file (write-big: 14.9 s instead of 9.5 s with blob
// files, whose flushes write back while the data streams in).
void pack_store::start_writeback_locked() {
  if (current_size_ < writeback_from_ + k_writeback_step) return;
  ::sync_file_range(current_->fd, static_cast<off_t>(writeback_from_),
                    static_cast<off_t>(current_size_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
  writeback_from_ = current_size_;
}

void pack_store::remove(metadata_batch& batch, const chunk_hash& hash) {
  // The record stays in its pack as dead bytes until compaction.
  batch.erase(table::payloads, key_of(hash));
}

void pack_store::upload(const pack_file& f) {
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0)
    throw store_error(errno, "uploading pack " + f.path.string() + ": " + errno_text(errno));
  std::string bytes;
  if (const int e = read_bytes(f.fd, 0, static_cast<std::uint32_t>(sb.st_size), bytes); e != 0)
    throw store_error(e, "uploading pack " + f.path.string() + ": " + errno_text(e));
  try {
    remote_->put(object_name(f.id), bytes);
  } catch (const store_error& e) {
    throw store_error(EIO, "uploading pack " + pack_file_name(f.id) + ": " + e.what());
  }
  // Uploaded: the local file becomes a cache entry (the open descriptor
  // stays valid across the rename).
  const fs::path cached = cache_->pack_path(f.id);
  if (::rename(f.path.c_str(), cached.c_str()) == 0) {
    cache_->add_pack(f.id, bytes.size());
  } else {
    ::unlink(f.path.c_str());
    std::lock_guard lock(files_mutex_);
    files_.erase(f.id);
  }
  std::lock_guard lock(remote_sizes_mutex_);
  if (remote_sizes_) (*remote_sizes_)[f.id] = bytes.size();
}

void pack_store::sync() {
  std::lock_guard serial(sync_mutex_);
  std::vector<std::shared_ptr<pack_file>> files;
  bool dir = false;
  {
    std::lock_guard lock(append_mutex_);
    files.swap(unsynced_);
    dir = std::exchange(dir_unsynced_, false);
    // A scale-out volume's pack is sealed when it is made durable: objects
    // are written whole, once. The next record starts a new pack.
    if (remote_ && current_ && std::find(files.begin(), files.end(), current_) != files.end())
      current_.reset();
  }
  if (remote_) {
    // Uploaded in order; one that fails stays (with the later ones) for the
    // next sync, and the commit waiting for this one fails.
    for (std::size_t i = 0; i < files.size(); ++i) {
      try {
        upload(*files[i]);
      } catch (const store_error&) {
        std::lock_guard lock(append_mutex_);
        unsynced_.insert(unsynced_.begin(), files.begin() + static_cast<std::ptrdiff_t>(i),
                         files.end());
        throw;
      }
    }
    return;
  }
  try {
    for (const auto& f : files) {
      if (::fdatasync(f->fd) != 0) {
        const int e = errno;
        throw store_error(e, "syncing pack " + f->path.string() + ": " + errno_text(e));
      }
    }
    if (dir) fsync_directory(pack_dir_);
  } catch (const store_error&) {
    // Synced again next time (a failed fdatasync may have dropped the dirty
    // pages, but the commit that needed them fails now with this error).
    std::lock_guard lock(append_mutex_);
    unsynced_.insert(unsynced_.end(), files.begin(), files.end());
    dir_unsynced_ = dir_unsynced_ || dir;
    throw;
  }
}

void pack_store::fail_read(const chunk_hash& hash, std::uint32_t pack,
                           const std::string& why) const {
  throw store_error(
      EIO, "payload of chunk " + hash.hex() + " in pack " + pack_location(pack) + ": " + why);
}

void pack_store::check_header(const chunk_hash& hash, const pack_ref& ref,
                              std::string_view header) const {
  if (header.size() != k_pack_record_header_size)
    fail_read(hash, ref.pack, "short read at offset " + std::to_string(ref.offset));
  const std::string why = header_problem(header.data(), ref.length);
  if (!why.empty()) fail_read(hash, ref.pack, why + " at offset " + std::to_string(ref.offset));
  if (std::memcmp(header.data() + 8, hash.bytes.data(), chunk_hash::k_size) != 0)
    fail_read(hash, ref.pack,
              "the record at offset " + std::to_string(ref.offset) + " is of another chunk");
}

namespace {

// Why `record` (header and payload) is not the record of `hash` that `ref`
// names, with a payload matching its checksum; empty when it is.
std::string record_problem(const chunk_hash& hash, const pack_ref& ref, std::string_view record) {
  if (record.size() != ref.length)
    return std::to_string(record.size()) + " bytes where the record at offset " +
           std::to_string(ref.offset) + " has " + std::to_string(ref.length);
  std::string why = header_problem(record.data(), ref.length);
  if (!why.empty()) return why + " at offset " + std::to_string(ref.offset);
  if (std::memcmp(record.data() + 8, hash.bytes.data(), chunk_hash::k_size) != 0)
    return "the record at offset " + std::to_string(ref.offset) + " is of another chunk";
  if (get_le(record.data() + 48, 8) != stored_checksum(record.substr(k_pack_record_header_size)))
    return "the payload at offset " + std::to_string(ref.offset) +
           " does not match its record's checksum";
  return {};
}

}  // namespace

std::optional<std::string> pack_store::cached_record(const chunk_hash& hash, const pack_ref& ref) {
  std::optional<std::string> cached = cache_->get_record(ref.pack, ref.offset);
  if (!cached) return std::nullopt;
  if (record_problem(hash, ref, *cached).empty()) return cached;
  // Damaged on the local disk: fetched again.
  log_error("payload cache: the cached record of chunk " + hash.hex() + " (pack " +
            pack_file_name(ref.pack) + ", offset " + std::to_string(ref.offset) +
            ") is damaged; fetching it again");
  cache_->drop_record(ref.pack, ref.offset);
  return std::nullopt;
}

std::vector<std::string> pack_store::fetch_run(std::span<const chunk_hash> hashes,
                                               std::span<const pack_ref> refs) {
  const pack_ref& first = refs.front();
  // While the service is known to be down, fail at once: a read would
  // otherwise wait out the retries for each of its records, and the kernel
  // and the read-ahead ask again for the same ones.
  if (steady_ms() < remote_down_until_.load()) {
    std::lock_guard lock(remote_down_mutex_);
    fail_read(hashes.front(), first.pack, "not fetched: " + remote_down_why_);
  }
  const std::uint64_t bytes = refs.back().offset + refs.back().length - first.offset;
  std::string run;
  try {
    run = remote_->get_range(object_name(first.pack), first.offset,
                             static_cast<std::uint32_t>(bytes));
  } catch (const store_error& e) {
    if (e.error_number() == EIO) {
      std::lock_guard lock(remote_down_mutex_);
      remote_down_why_ = std::string(e.what()) + " (within the last " +
                         std::to_string(k_remote_down_ms / 1000) + " s)";
      remote_down_until_ = steady_ms() + k_remote_down_ms;
    }
    fail_read(hashes.front(), first.pack, e.what());
  }
  std::vector<std::string> records;
  records.reserve(refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    std::string record = run.substr(refs[i].offset - first.offset, refs[i].length);
    // Checked before it is used or cached: what the object store returns
    // is untrusted like any stored byte.
    if (const std::string why = record_problem(hashes[i], refs[i], record); !why.empty())
      fail_read(hashes[i], refs[i].pack, why);
    cache_->put_record(refs[i].pack, refs[i].offset, record);
    records.push_back(std::move(record));
  }
  return records;
}

std::string pack_store::fetch_remote_record(const chunk_hash& hash, const pack_ref& ref) {
  if (std::optional<std::string> cached = cached_record(hash, ref)) return std::move(*cached);
  if (fetch_whole_pack(ref.pack))
    if (const std::shared_ptr<pack_file> f = file(ref.pack))
      return read_local_record(*f, hash, ref);
  return std::move(fetch_run(std::span(&hash, 1), std::span(&ref, 1)).front());
}

bool pack_store::fetch_whole_pack(std::uint32_t id) {
  {
    std::lock_guard lock(remote_reads_mutex_);
    if (remote_reads_[id]++ == 0) return false;  // the first read of it: its records only
  }
  std::lock_guard lock(whole_pack_fetch_mutex_);
  if (file(id)) return true;  // another read fetched it meanwhile
  if (steady_ms() < remote_down_until_.load()) return false;
  try {
    const std::optional<std::uint64_t> size = remote_->size(object_name(id));
    if (!size || *size > k_whole_pack_bytes || 4 * *size > cache_->capacity() ||
        cache_->read_only())
      return false;
    const std::string bytes =
        remote_->get_range(object_name(id), 0, static_cast<std::uint32_t>(*size));
    // Written aside, then renamed: a file in packs/ is always whole. Not
    // synced: the cache is never authoritative, and every record read from
    // it is checked like any other.
    const fs::path path = cache_->pack_path(id);
    const fs::path part = path.string() + ".part";
    const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw store_error(errno, part.string() + ": " + errno_text(errno));
    std::string_view rest = bytes;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::close(fd);
        ::unlink(part.c_str());
        throw store_error(e, part.string() + ": " + errno_text(e));
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (::rename(part.c_str(), path.c_str()) != 0) {
      const int e = errno;
      ::unlink(part.c_str());
      throw store_error(e, path.string() + ": " + errno_text(e));
    }
    cache_->add_pack(id, bytes.size());
  } catch (const store_error& e) {
    // Its records come with ranged GETs, which report a service that is down.
    log_debug("payload cache: pack " + pack_file_name(id) + " not fetched whole: " + e.what());
    return false;
  }
  return file(id) != nullptr;
}

std::string pack_store::read_local_record(const pack_file& f, const chunk_hash& hash,
                                          const pack_ref& ref) {
  std::string record;
  if (const int e = read_bytes(f.fd, ref.offset, ref.length, record); e != 0)
    fail_read(hash, ref.pack, errno_text(e));
  if (const std::string why = record_problem(hash, ref, record); !why.empty())
    fail_read(hash, ref.pack, why);
  return record;
}

int pack_store::read_bytes(int fd, std::uint64_t offset, std::uint32_t length,
                           std::string& out) const {
  const read_range range{fd, offset, length};
  int error = 0;
  reader_->read_all(std::span(&range, 1), [&](std::size_t, std::string&& bytes, int e) {
    out = std::move(bytes);
    error = e;
  });
  return error;
}

std::string pack_store::read_whole_record(const chunk_hash& hash, const pack_ref& ref) {
  std::shared_ptr<pack_file> f = file(ref.pack);
  if (!f) {
    if (remote_) return fetch_remote_record(hash, ref);
    fail_read(hash, ref.pack, "the pack file is missing");
  }
  return read_local_record(*f, hash, ref);
}

std::string pack_store::read_record(const chunk_hash& hash, const pack_ref& ref) {
  std::shared_ptr<pack_file> f = file(ref.pack);
  if (!f && remote_) {
    std::string record = fetch_remote_record(hash, ref);
    record.erase(0, k_pack_record_header_size);
    return record;
  }
  if (!f) fail_read(hash, ref.pack, "the pack file is missing");
  if (cache_) cache_->touch_pack(ref.pack);
  std::string out;
  const int error = read_bytes(f->fd, ref.offset, ref.length, out);
  if (error == EIO)
    fail_read(hash, ref.pack,
              "the record at offset " + std::to_string(ref.offset) + " (" +
                  std::to_string(ref.length) +
                  " bytes) passes the end of the pack, or the disk failed");
  if (error != 0) fail_read(hash, ref.pack, errno_text(error));
  check_header(hash, ref,
               std::string_view(out).substr(
                   0, std::min<std::size_t>(out.size(), k_pack_record_header_size)));
  out.erase(0, k_pack_record_header_size);
  return out;
}

std::string pack_store::get(const chunk_hash& hash) {
  std::vector<std::string> v = get_many(std::span(&hash, 1));
  return std::move(v[0]);
}

std::vector<std::string> pack_store::get_many(std::span<const chunk_hash> hashes) {
  if (hashes.empty()) return {};
  std::shared_lock lock(index_lock_);
  const std::vector<std::optional<std::string>> values = payload_values(engine_, hashes, false);

  std::vector<std::string> out(hashes.size());
  // Two ranges per record, header and payload, so the payload lands in its
  // own string without a copy (a 4 MiB memmove per chunk otherwise).
  std::vector<read_range> ranges;
  std::vector<std::size_t> which;  // record k is the payload of hashes[which[k]]
  std::vector<pack_ref> refs;
  std::vector<std::shared_ptr<pack_file>> held;
  std::vector<std::size_t> fetched;  // scale-out: in no local pack
  std::vector<pack_ref> fetched_refs;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!values[i])
      throw store_error(EIO, "payload of chunk " + hashes[i].hex() + " is missing from the store");
    const payload_value v = decode_payload_value(hashes[i], *values[i]);
    if (v.inline_bytes) {
      out[i] = std::string(*v.inline_bytes);
      continue;
    }
    std::shared_ptr<pack_file> f = file(v.ref.pack);
    if (!f && remote_) {
      fetched.push_back(i);
      fetched_refs.push_back(v.ref);
      continue;
    }
    if (!f) fail_read(hashes[i], v.ref.pack, "the pack file is missing");
    if (cache_) cache_->touch_pack(v.ref.pack);
    ranges.push_back({f->fd, v.ref.offset, static_cast<std::uint32_t>(k_pack_record_header_size)});
    ranges.push_back({f->fd, v.ref.offset + k_pack_record_header_size,
                      static_cast<std::uint32_t>(v.ref.length - k_pack_record_header_size)});
    which.push_back(i);
    refs.push_back(v.ref);
    held.push_back(std::move(f));
  }
  std::vector<std::string> headers(refs.size());
  std::vector<int> errors(refs.size(), 0);
  reader_->read_all(ranges, [&](std::size_t r, std::string&& bytes, int error) {
    const std::size_t k = r / 2;
    if (error != 0 && errors[k] == 0) errors[k] = error;
    if (error != 0) return;
    if (r % 2 == 0) {
      headers[k] = std::move(bytes);
    } else {
      out[which[k]] = std::move(bytes);
    }
  });
  for (std::size_t k = 0; k < refs.size(); ++k) {
    const chunk_hash& hash = hashes[which[k]];
    if (errors[k] == EIO)
      fail_read(hash, refs[k].pack,
                "the record at offset " + std::to_string(refs[k].offset) + " (" +
                    std::to_string(refs[k].length) +
                    " bytes) passes the end of the pack, or the disk failed");
    if (errors[k] != 0) fail_read(hash, refs[k].pack, errno_text(errors[k]));
    check_header(hash, refs[k], headers[k]);
  }
  if (!fetched.empty()) {
    // Records from the cache, else from the object store: records that
    // follow each other in a pack (small files written together) in one
    // ranged GET of at most k_max_fetch_bytes, several GETs at once (a GET's
    // time is mostly waiting for the service).
    std::vector<std::size_t> missing;  // into fetched
    for (std::size_t k = 0; k < fetched.size(); ++k) {
      if (std::optional<std::string> record = cached_record(hashes[fetched[k]], fetched_refs[k])) {
        record->erase(0, k_pack_record_header_size);
        out[fetched[k]] = std::move(*record);
      } else {
        missing.push_back(k);
      }
    }
    std::sort(missing.begin(), missing.end(), [&](std::size_t a, std::size_t b) {
      const pack_ref &x = fetched_refs[a], &y = fetched_refs[b];
      return std::tie(x.pack, x.offset) < std::tie(y.pack, y.offset);
    });
    // Packs read from before come whole (fetch_whole_pack): their records
    // from the local copy, the rest with ranged GETs.
    {
      std::vector<std::size_t> ranged;
      std::map<std::uint32_t, std::shared_ptr<pack_file>> whole;
      for (const std::size_t k : missing) {
        const pack_ref& r = fetched_refs[k];
        auto [it, fresh] = whole.try_emplace(r.pack);
        if (fresh && fetch_whole_pack(r.pack)) it->second = file(r.pack);
        if (!it->second) {
          ranged.push_back(k);
          continue;
        }
        std::string record = read_local_record(*it->second, hashes[fetched[k]], r);
        record.erase(0, k_pack_record_header_size);
        out[fetched[k]] = std::move(record);
      }
      missing = std::move(ranged);
    }
    std::vector<std::vector<std::size_t>> runs;
    std::uint64_t run_bytes = 0;
    for (const std::size_t k : missing) {
      const pack_ref& r = fetched_refs[k];
      const pack_ref* last = runs.empty() ? nullptr : &fetched_refs[runs.back().back()];
      if (last && last->pack == r.pack && last->offset + last->length == r.offset &&
          run_bytes + r.length <= k_max_fetch_bytes) {
        runs.back().push_back(k);
        run_bytes += r.length;
      } else if (!last || last->pack != r.pack || last->offset != r.offset) {
        runs.push_back({k});
        run_bytes = r.length;
      } else {
        runs.back().push_back(k);  // the same record twice in one read
      }
    }
    // The first failure ends the read: the runs not yet asked for are not
    // (each would wait out its own retries when the service is down).
    std::vector<std::exception_ptr> failures(runs.size());
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    const auto work = [&] {
      for (std::size_t n; !failed.load() && (n = next.fetch_add(1)) < runs.size();) {
        try {
          std::vector<chunk_hash> run_hashes;
          std::vector<pack_ref> run_refs;
          for (const std::size_t k : runs[n]) {
            if (!run_refs.empty() && run_refs.back() == fetched_refs[k]) continue;
            run_hashes.push_back(hashes[fetched[k]]);
            run_refs.push_back(fetched_refs[k]);
          }
          std::vector<std::string> records = fetch_run(run_hashes, run_refs);
          std::size_t r = 0;
          for (std::size_t i = 0; i < runs[n].size(); ++i) {
            const std::size_t k = runs[n][i];
            if (i > 0 && fetched_refs[runs[n][i - 1]] == fetched_refs[k]) {
              out[fetched[k]] = out[fetched[runs[n][i - 1]]];
              continue;
            }
            records[r].erase(0, k_pack_record_header_size);
            out[fetched[k]] = std::move(records[r++]);
          }
        } catch (...) {
          failures[n] = std::current_exception();
          failed = true;
        }
      }
    };
    std::vector<std::thread> helpers;
    const std::size_t extra =
        runs.empty() ? 0 : std::min<std::size_t>(runs.size(), k_parallel_fetches) - 1;
    for (std::size_t t = 0; t < extra; ++t) helpers.emplace_back(work);
    if (!runs.empty()) work();
    for (std::thread& t : helpers) t.join();
    for (const std::exception_ptr& e : failures)
      if (e) std::rethrow_exception(e);
  }
  return out;
}

std::vector<pack_store::pack_usage> pack_store::usage(const std::atomic<bool>* cancel) const {
  std::map<std::uint32_t, pack_usage> by_id;
  scan_options o;
  o.fill_cache = false;
  engine_.scan(table::payloads, {}, o, "scanning the pack index",
               [&](std::string_view k, std::string_view value) {
                 if (cancel && cancel->load(std::memory_order_relaxed))
                   throw store_error(ECANCELED,
                                     "scanning the pack index: canceled (the store is closing)");
                 if (k.size() != chunk_hash::k_size) return true;
                 payload_value v;
                 try {
                   v = decode_payload_value(chunk_hash::from_bytes(k), value);
                 } catch (const store_error&) {
                   return true;  // fsck reports it (the chunk's payload is unreadable)
                 }
                 if (v.inline_bytes) return true;
                 pack_usage& u = by_id[v.ref.pack];
                 u.id = v.ref.pack;
                 u.live_bytes += v.ref.length;
                 ++u.live_records;
                 return true;
               });
  for (const auto& [id, bytes] : pack_sizes()) {
    pack_usage& u = by_id[id];
    u.id = id;
    u.file_bytes = bytes;
  }
  std::vector<pack_usage> out;
  for (auto& [id, u] : by_id) out.push_back(u);
  return out;
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> pack_store::pack_sizes() const {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  if (!remote_) {
    for (const std::uint32_t id : list_packs(pack_dir_)) {
      struct stat sb {};
      if (::stat((pack_dir_ / pack_file_name(id)).c_str(), &sb) == 0)
        out.emplace_back(id, static_cast<std::uint64_t>(sb.st_size));
    }
    return out;
  }
  std::lock_guard lock(remote_sizes_mutex_);
  if (!remote_sizes_) {
    std::map<std::uint32_t, std::uint64_t> sizes;
    try {
      for (const object_store::object_info& o : remote_->list("packs/"))
        if (const std::optional<std::uint32_t> id = pack_id_of_object(o.name)) sizes[*id] = o.size;
    } catch (const store_error& e) {
      throw store_error(EIO, std::string("listing the volume's packs: ") + e.what());
    }
    remote_sizes_ = std::move(sizes);
  }
  out.assign(remote_sizes_->begin(), remote_sizes_->end());
  return out;
}

std::vector<std::uint64_t> pack_store::file_sizes() const {
  std::vector<std::uint64_t> sizes;
  for (const auto& [id, bytes] : pack_sizes()) sizes.push_back(bytes);
  return sizes;
}

void pack_store::delete_pack(std::uint32_t id) {
  if (!remote_) {
    const fs::path path = pack_dir_ / pack_file_name(id);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw store_error(errno, "gc: deleting " + path.string() + ": " + errno_text(errno));
    fsync_directory(pack_dir_);
    return;
  }
  try {
    remote_->remove(object_name(id));
  } catch (const store_error& e) {
    throw store_error(EIO, std::string("gc: deleting pack ") + pack_location(id) + ": " + e.what());
  }
  cache_->forget_pack(id);
  std::lock_guard lock(remote_sizes_mutex_);
  if (remote_sizes_) remote_sizes_->erase(id);
}

std::uint64_t pack_store::file_bytes() const {
  std::uint64_t bytes = 0;
  for (const std::uint64_t size : file_sizes()) bytes += size;
  return bytes;
}

pack_store::compaction pack_store::compact(double dead_share, std::shared_mutex& ahead_gate,
                                           std::mutex& commit_mutex,
                                           const std::atomic<bool>& cancel,
                                           const std::function<void(std::string_view)>& progress) {
  if (options_.read_only) throw store_error(EROFS, "pack store is read-only");
  compaction result;
  const std::chrono::seconds grace = delete_grace_ ? delete_grace_() : std::chrono::seconds(0);
  // Packs emptied earlier whose grace has passed go first; the others
  // wait (and are not planned again).
  std::set<std::uint32_t> waiting;
  {
    std::vector<std::uint32_t> due;
    {
      std::lock_guard lock(files_mutex_);
      const auto now = std::chrono::steady_clock::now();
      for (const auto& [id, when] : emptied_) {
        if (now - when >= grace)
          due.push_back(id);
        else
          waiting.insert(id);
      }
    }
    for (const std::uint32_t id : due) {
      delete_pack(id);
      std::lock_guard lock(files_mutex_);
      emptied_.erase(id);
      ++result.packs_deleted;
    }
  }
  // Plan under the commit mutex: a commit whose record went to a pack that
  // has been closed since has committed by then, so the scan sees its entry.
  // And with no payload written ahead of its commit outstanding: those that
  // come later go to the current pack or a newer one, never one planned here.
  std::map<std::uint32_t, std::vector<std::pair<chunk_hash, pack_ref>>> moves;
  {
    std::unique_lock ahead(ahead_gate);
    std::lock_guard commit(commit_mutex);
    for (const pack_usage& u : usage(&cancel)) {
      if (u.file_bytes == 0 || waiting.contains(u.id)) continue;
      const double share = static_cast<double>(u.dead_bytes()) / static_cast<double>(u.file_bytes);
      if (u.live_records == 0 || share >= dead_share) moves[u.id];
    }
    if (moves.empty()) return result;
    {
      // The pack being appended to is closed if it is rewritten: no commit
      // is in flight (we hold the commit mutex), so nothing else lands in it.
      std::lock_guard lock(append_mutex_);
      if (current_ && moves.count(current_->id)) current_.reset();
    }
    engine_.scan(table::payloads, {}, {}, "scanning the pack index",
                 [&](std::string_view k, std::string_view value) {
                   if (k.size() != chunk_hash::k_size) return true;
                   const chunk_hash hash = chunk_hash::from_bytes(k);
                   payload_value v;
                   try {
                     v = decode_payload_value(hash, value);
                   } catch (const store_error&) {
                     return true;
                   }
                   if (v.inline_bytes) return true;
                   if (auto m = moves.find(v.ref.pack); m != moves.end())
                     m->second.emplace_back(hash, v.ref);
                   return true;
                 });
  }

  for (auto& [id, entries] : moves) {
    if (cancel) throw store_error(ECANCELED, "pack compaction canceled (the store is closing)");
    if (progress) progress("compacting pack " + pack_file_name(id));
    // 1. Copy the live records, verbatim (a record does not say where it is).
    struct moved {
      chunk_hash hash;
      pack_ref from, to;
    };
    std::vector<moved> copies;
    bool all_copied = true;
    for (const auto& [hash, ref] : entries) {
      if (cancel) throw store_error(ECANCELED, "pack compaction canceled (the store is closing)");
      // Header and payload checked before a copy spreads damage.
      std::string record;
      try {
        record = read_whole_record(hash, ref);
      } catch (const store_error& e) {
        // An object store that does not answer ends the compaction (the
        // probe throws); a damaged record is left where it is for fsck to
        // report, and its pack stays.
        if (remote_) (void)remote_->size(object_name(id));
        log_error(std::string("gc: keeping pack ") + pack_file_name(id) + ": " + e.what());
        all_copied = false;
        continue;
      }
      std::lock_guard lock(append_mutex_);
      if (!current_ || current_size_ >= options_.pack_size_cap) roll_locked();
      struct iovec iov[1] = {{record.data(), record.size()}};
      try {
        write_all(current_->fd, iov, 1, current_size_, current_->path);
      } catch (const store_error&) {
        current_.reset();
        throw;
      }
      copies.push_back({hash, ref, {current_->id, current_size_, ref.length}});
      current_size_ += ref.length;
      if (unsynced_.empty() || unsynced_.back() != current_) unsynced_.push_back(current_);
      start_writeback_locked();
      result.bytes_moved += ref.length;
    }
    // 2. The copies durable before an index entry names them.
    sync();
    // 3. The entries moved in one synced commit; an entry a commit changed
    //    since the plan keeps its new value.
    //    Read and written in one locked transaction: another writer of a
    //    shared volume may change an entry meanwhile too.
    {
      std::lock_guard commit(commit_mutex);
      std::unique_lock readers(index_lock_);
      std::uint64_t moved_now = 0;
      try {
        engine_.write_locked(
            k_commit_section,
            [&](locked_reads& reads, metadata_batch& batch) {
              moved_now = 0;
              std::vector<std::string> keys;
              keys.reserve(copies.size());
              for (const moved& m : copies) keys.emplace_back(key_of(m.hash));
              const std::vector<std::optional<std::string>> values =
                  reads.get_many(table::payloads, keys, "the pack index entries being moved");
              for (std::size_t i = 0; i < copies.size(); ++i) {
                if (values[i] != encode_pack_ref(copies[i].from)) continue;
                batch.put(table::payloads, keys[i], encode_pack_ref(copies[i].to));
                ++moved_now;
              }
            },
            true);
      } catch (const store_error& e) {
        throw store_error(e.error_number(),
                          "gc: committing moved pack records: " + std::string(e.what()));
      }
      result.records_moved += moved_now;
      if (all_copied) {
        std::lock_guard lock(files_mutex_);
        files_.erase(id);
      }
    }
    // 4. Nothing names the old pack any more (readers that looked it up have
    //    finished: they hold index_lock_ shared).
    //    Other clients do not hold that lock: while one may be reading, the
    //    object outlives the grace first.
    if (all_copied && grace.count() > 0) {
      std::lock_guard lock(files_mutex_);
      emptied_.emplace(id, std::chrono::steady_clock::now());
      ++result.packs_deferred;
    } else if (all_copied) {
      delete_pack(id);
      ++result.packs_deleted;
    }
  }
  return result;
}

void pack_store::scan_packs(const std::function<void(const pack_record_info&)>& fn,
                            const std::function<void(const std::string&)>& bad) const {
  for (const auto& [id, object_bytes] : pack_sizes()) {
    const std::string label = pack_location(id);
    if (remote_) {
      // The cached copy of a pack this client uploaded, else the object
      // (bounded: a pack is at most its cap plus one record).
      const std::uint64_t max_bytes =
          options_.pack_size_cap + k_pack_record_header_size + k_max_lepton_file_pack_payload;
      if (object_bytes > max_bytes) {
        bad(label + ": " + std::to_string(object_bytes) + " bytes, more than a pack can hold");
        continue;
      }
      std::string bytes;
      if (std::error_code ec; fs::file_size(cache_->pack_path(id), ec) == object_bytes && !ec) {
        const int fd = ::open(cache_->pack_path(id).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          if (read_bytes(fd, 0, static_cast<std::uint32_t>(object_bytes), bytes) != 0)
            bytes.clear();
          ::close(fd);
        }
      }
      if (bytes.empty() && object_bytes > 0) {
        try {
          bytes = remote_->get_range(object_name(id), 0, static_cast<std::uint32_t>(object_bytes));
        } catch (const store_error& e) {
          bad(label + ": " + e.what());
          continue;
        }
      }
      scan_pack_bytes(id, label, bytes.data(), bytes.size(), fn, bad);
      continue;
    }
    const int fd = ::open(label.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      bad(label + ": cannot open: " + errno_text(errno));
      continue;
    }
    struct stat sb {};
    if (::fstat(fd, &sb) != 0 || sb.st_size < static_cast<off_t>(k_pack_header_size)) {
      ::close(fd);
      bad(label + ": shorter than a pack header");
      continue;
    }
    const auto size = static_cast<std::uint64_t>(sb.st_size);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) {
      bad(label + ": cannot map: " + errno_text(errno));
      continue;
    }
    scan_pack_bytes(id, label, static_cast<const char*>(map), size, fn, bad);
    ::munmap(map, size);
  }
}

}  // namespace densefs::store
