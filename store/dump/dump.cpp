#include "store/dump/dump.h"

#include <unistd.h>
#include <cerrno>
#include <ctime>
#include <system_error>
#include <utility>

#include "store/crypto/volume_key.h"
#include "store/durable_file.h"
#include "store/error.h"
#include "store/metadata/metadata_engine.h"
#include "store/metadata/postgres_engine.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/object/directory_object_store.h"
#include "store/object/s3_object_store.h"
#include "store/payload/pack_format.h"
#include "store/records.h"
#include "store/snapshot/registry.h"
#include "store/store.h"
#include "store/store_internal.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;
using internal::format_marker;

constexpr table k_all_tables[] = {table::meta,   table::inodes,   table::dirents, table::extents,
                                  table::chunks, table::payloads, table::xattrs};
// A load writes its records in batches of about this size, unsynced, and
// syncs once before the settings record that makes the volume whole.
constexpr std::size_t k_batch_bytes = 4u << 20;
constexpr std::size_t k_batch_records = 20'000;
constexpr std::uint64_t k_progress_every = 4096;

// Rows of the meta table that are a running volume's state, not the file
// system's: who has it mounted, background leases, open-file holds, commit
// outcomes, and where packs are and what the next one is called (the
// target's own). A dump leaves them out; a load skips them too.
bool is_running_state(std::string_view key) {
  return key.starts_with(k_session_prefix) || key.starts_with(k_commit_outcome_prefix) ||
         key.starts_with(k_hold_prefix) || key.starts_with(k_lease_prefix) ||
         key.starts_with(k_lock_prefix) || key == k_payload_location_key || key == k_next_pack_key;
}

// Closes the store lock's fd (store::lock) when it goes.
struct lock_fd {
  int fd = -1;
  lock_fd() = default;
  lock_fd(lock_fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  lock_fd(const lock_fd&) = delete;
  lock_fd& operator=(const lock_fd&) = delete;
  ~lock_fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A volume's records, opened to be read only, and what FORMAT says of it.
struct source_records {
  format_marker marker;
  lock_fd lock;  // `alone` of an embedded store
  std::unique_ptr<metadata_engine> engine;
  store_settings settings;
};

// `alone`: the volume must have no writer meanwhile (migrate): an embedded
// store's lock (a mount holds it), or a PostgreSQL volume's advisory lock
// (EBUSY while a writer has it mounted), taken as a writer would.
source_records open_source(const fs::path& dir, bool alone = false) {
  store::check(dir);
  source_records s;
  s.marker = internal::read_format_marker(dir);
  if (s.marker.postgres.empty()) {
    if (alone) s.lock.fd = store::lock(dir);
    rocksdb_engine_options eo;
    eo.read_only = true;  // RocksDB's read-only open: the state at open, beside a mount
    eo.block_cache_bytes = 8u << 20;
    s.engine = rocksdb_engine::open(dir, eo);
  } else {
    postgres_engine_options po;
    po.conninfo = s.marker.postgres;
    po.read_only = !alone;
    po.lock_volume = alone;
    po.connections = 1;
    s.engine = postgres_engine::open(po);
  }
  const std::optional<std::string> value =
      s.engine->get(table::meta, k_settings_key, "the settings");
  if (!value)
    throw store_error(EIO, "store " + dir.string() + " has no settings record (damaged store)");
  s.settings = decode_settings(*value);
  if (!s.marker.postgres.empty() && s.settings.uuid != s.marker.uuid)
    throw store_error(EINVAL, "store " + dir.string() + " names a database (" + s.engine->where() +
                                  ") that holds store " + s.settings.uuid + ", not this one");
  return s;
}

dump_header header_of(const source_records& s) {
  dump_header h;
  h.store_format_version = s.settings.format_version;
  h.dumped_at = static_cast<std::int64_t>(std::time(nullptr));
  h.payloads = s.settings.payloads;
  h.from_postgres = !s.marker.postgres.empty();
  return h;
}

// Where a volume keeps its pack files, as objects named "packs/NNNNNNNN.pack".
std::unique_ptr<object_store> pack_home_of(const fs::path& dir, const std::string& data) {
  if (!data.empty()) return std::make_unique<s3_object_store>(parse_s3_url(data));
  return std::make_unique<directory_object_store>(dir);
}

// Builds a new volume from records given in table order.
// Whether the target may hold packs already: a load against the packs of a
// volume whose records are lost, or a migrate, which brings its own.
enum class existing_packs : std::uint8_t {
  refused,     // migrate: the target is empty
  local_only,  // load: STORE/packs may be there (moved in by the user)
  taken_over,  // load --take-over-packs: the --data location's too
};

class volume_loader {
 public:
  // Checks the target; changes nothing (open() does).
  volume_loader(const volume_target& target, const dump_header& header, existing_packs packs)
      : target_(target), header_(header), existing_(packs) {
    if (!target.postgres.empty() && header.payloads != payload_backend::pack)
      throw store_error(EINVAL,
                        "this dump is of a blob store (format 1), whose payloads are in its "
                        "records; it loads only into an embedded store (drop --meta)");
    internal::check_volume_target(target.postgres, target.data, header.payloads);
    check_directory();
  }

  // Makes the target's directory and database. What it made is removed (a
  // directory) or named in the error (a database's tables) if the load
  // does not finish.
  void open() {
    packs_ = pack_home_of(target_.dir, target_.data);
    if (auto* s3 = dynamic_cast<s3_object_store*>(packs_.get())) {
      s3->create_bucket();
      // Two volumes naming packs in one place would overwrite and collect
      // each other's: only the packs of a volume that is gone may be
      // taken over.
      if (!s3->list("packs/").empty() && existing_ != existing_packs::taken_over)
        throw store_error(
            EEXIST, s3->where() +
                        " already holds pack objects: give --data an empty location (`densefs "
                        "migrate` copies the packs there), or, if they are this dump's volume's "
                        "and that volume is gone for good, --take-over-packs");
    }
    opened_ = true;
    internal::make_private_directory(target_.dir, "store directory");
    if (target_.postgres.empty()) {
      rocksdb_engine_options eo;
      eo.create = true;
      eo.block_cache_bytes = 8u << 20;
      eo.blob_payloads = header_.payloads == payload_backend::blob;
      engine_ = rocksdb_engine::open(target_.dir, eo);
    } else {
      postgres_engine_options po;
      po.conninfo = target_.postgres;
      po.connections = 1;
      try {
        postgres_engine::create(po);
      } catch (const store_error& e) {
        if (e.error_number() != EEXIST) throw;
        throw store_error(EEXIST, std::string(e.what()) +
                                      "; give --meta an empty database (or drop those tables)");
      }
      created_tables_ = true;
      engine_ = postgres_engine::open(po);
    }
    batch_ = engine_->new_batch();
  }

  ~volume_loader() {
    if (finished_ || !opened_) return;
    // What an interrupted load made is no volume (no FORMAT): the embedded
    // database goes, packs that were there stay.
    engine_.reset();
    if (target_.postgres.empty()) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(target_.dir, ec))
        if (!(had_packs_ && entry.path().filename() == "packs")) fs::remove_all(entry.path(), ec);
    }
  }
  volume_loader(const volume_loader&) = delete;
  volume_loader& operator=(const volume_loader&) = delete;

  // Whether a failed load left part of a volume in the target's database.
  bool left_tables() const { return created_tables_ && !finished_; }

  void add(table t, std::string_view key, std::string_view value) {
    ++records_;
    if (t == table::meta) {
      if (is_running_state(key)) return;
      if (key == k_settings_key) {
        settings_ = decode_settings(value);
        return;
      }
      // Carried over as it is: the same secret opens the loaded volume.
      if (key == k_volume_key_key) {
        (void)decode_wrapped_key(value);  // a damaged record refuses the dump
        encrypted_ = true;
      }
      // Snapshots come with their pre-images: the loaded volume must keep
      // them (format 8), or an older build would change them.
      if (key.starts_with(k_snapshot_prefix) || key == k_snapshot_counter_key)
        has_snapshots_ = true;
    }
    if (t == table::payloads && header_.payloads == payload_backend::pack) {
      // Every payload value decodes (inline or a pack reference), and a
      // reference's end is where the pack must reach.
      if (key.size() != chunk_hash::k_size)
        throw store_error(EINVAL, "a payload record's key is not a chunk name (" +
                                      std::to_string(key.size()) + " bytes)");
      const payload_value v = decode_payload_value(chunk_hash::from_bytes(key), value);
      if (!v.inline_bytes) {
        if (v.ref.offset > UINT64_MAX - v.ref.length)
          throw store_error(EINVAL, "a payload record names a pack offset past any file");
        std::uint64_t& end = named_packs_[v.ref.pack];
        end = std::max(end, v.ref.offset + v.ref.length);
      }
    }
    if (t == table::inodes && key == inode_key(k_root_ino)) has_root_ = true;
    batch_->put(t, key, value);
    batch_bytes_ += key.size() + value.size();
    if (++batch_records_ >= k_batch_records || batch_bytes_ >= k_batch_bytes) flush();
  }

  // Pack id -> the end of its last record that a record names.
  const std::map<std::uint32_t, std::uint64_t>& named_packs() const { return named_packs_; }
  object_store& packs() { return *packs_; }
  std::uint64_t records() const { return records_; }

  load_result finish() {
    flush();
    if (!settings_)
      throw store_error(EINVAL, "the dump holds no settings record: it is not a whole volume");
    if (!has_root_)
      throw store_error(EINVAL, "the dump holds no root directory: it is not a whole volume");
    if (settings_->payloads != header_.payloads)
      throw store_error(EINVAL, "the dump's settings name another payload backend than its header");
    check_packs();

    store_settings settings = *settings_;
    settings.uuid = internal::new_uuid();
    settings.format_version = encrypted_              ? k_encrypted_format_version
                              : !target_.data.empty() ? k_object_format_version
                              : !target_.postgres.empty()
                                  ? k_postgres_format_version
                                  : std::min(settings.format_version, k_lepton_file_format_version);
    if (has_snapshots_) settings.format_version = k_snapshot_format_version;
    const std::unique_ptr<metadata_batch> last = engine_->new_batch();
    last->put(table::meta, k_settings_key, encode_settings(settings));
    if (!target_.data.empty()) {
      last->put(table::meta, k_payload_location_key, target_.data);
      // Past every pack there, named or not: a new pack never takes the
      // name of an old one.
      std::uint64_t next = 1;
      for (const auto& o : packs_->list("packs/"))
        if (const auto id = pack_id_of_object(o.name))
          next = std::max<std::uint64_t>(next, *id + 1);
      std::string value(8, '\0');
      put_le(value.data(), next, 8);
      last->put(table::meta, k_next_pack_key, value);
    }
    engine_->sync();
    engine_->write(*last, true);
    engine_.reset();
    // FORMAT last: until it is there, the directory is no store.
    write_file_durably(target_.dir / internal::k_format_file,
                       internal::format_marker_text({settings.format_version, settings.uuid,
                                                     target_.postgres, target_.data, encrypted_}));
    finished_ = true;
    load_result r;
    r.uuid = settings.uuid;
    r.format_version = settings.format_version;
    r.records = records_;
    r.packs = named_packs_.size();
    return r;
  }

 private:
  void check_directory() {
    const fs::path& dir = target_.dir;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir, ec))) return;
    if (!fs::is_directory(fs::status(dir, ec)))
      throw store_error(ENOTDIR, dir.string() + " exists and is not a directory");
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      // The packs of the volume whose records are being given back.
      if (entry.path().filename() == "packs" && entry.is_directory() && target_.data.empty() &&
          header_.payloads == payload_backend::pack && existing_ != existing_packs::refused) {
        had_packs_ = true;
        continue;
      }
      throw store_error(
          EEXIST, dir.string() + (existing_ == existing_packs::refused
                                      ? " is not empty; give a new or empty directory"
                                      : " is not empty; a load needs a new or empty directory "
                                        "(or one holding only the volume's packs/)"));
    }
    if (ec) throw store_error(ec.value(), "cannot read " + dir.string() + ": " + ec.message());
  }

  void flush() {
    if (batch_->empty()) return;
    engine_->write(*batch_, false);
    batch_ = engine_->new_batch();
    batch_bytes_ = 0;
    batch_records_ = 0;
  }

  // Every pack a record names is where the target keeps packs, and long
  // enough: otherwise the volume would load and then fail its reads.
  void check_packs() {
    if (named_packs_.empty()) return;
    std::map<std::uint32_t, std::uint64_t> present;
    for (const auto& o : packs_->list("packs/"))
      if (const auto id = pack_id_of_object(o.name)) present[*id] = o.size;
    std::uint64_t missing = 0;
    std::string first;
    for (const auto& [id, end] : named_packs_) {
      const auto it = present.find(id);
      if (it != present.end() && it->second >= end) continue;
      if (missing++ == 0)
        first = pack_object_name(id) + (it == present.end() ? " is missing" : " is too short");
    }
    if (missing > 0)
      throw store_error(ENOENT, "the records name " + std::to_string(missing) + " of " +
                                    std::to_string(named_packs_.size()) + " pack files that " +
                                    packs_->where() + " lacks (" + first +
                                    "): copy the volume's packs/ there, or use `densefs migrate`");
  }

  volume_target target_;
  dump_header header_;
  std::unique_ptr<metadata_engine> engine_;
  std::unique_ptr<object_store> packs_;
  std::unique_ptr<metadata_batch> batch_;
  std::size_t batch_bytes_ = 0;
  std::size_t batch_records_ = 0;
  std::uint64_t records_ = 0;
  std::optional<store_settings> settings_;
  bool encrypted_ = false;      // the dump holds a volume key
  bool has_snapshots_ = false;  // the dump holds snapshots (format 8)
  std::map<std::uint32_t, std::uint64_t> named_packs_;
  existing_packs existing_;
  bool opened_ = false;
  bool has_root_ = false;
  bool had_packs_ = false;
  bool created_tables_ = false;
  bool finished_ = false;
};

// A failed load into PostgreSQL leaves its tables: say so in the one line.
[[noreturn]] void throw_naming_leftovers(const store_error& e, const volume_target& target) {
  throw store_error(e.error_number(),
                    std::string(e.what()) + " (the database " + target.postgres +
                        " now holds part of a volume: drop its densefs_ tables before loading "
                        "again)");
}

}  // namespace

dump_totals dump_volume(const fs::path& store_dir, std::ostream& out, const std::string& name,
                        const dump_progress_fn& progress) {
  const source_records source = open_source(store_dir);
  dump_writer writer(out, name, header_of(source));
  std::uint64_t records = 0;
  source.engine->scan_consistent(k_all_tables, "dumping the records",
                                 [&](table t, std::string_view key, std::string_view value) {
                                   if (t == table::meta && is_running_state(key)) return;
                                   writer.add(t, key, value);
                                   if (progress && ++records % k_progress_every == 0)
                                     progress({records, writer.bytes_written(), "records"});
                                 });
  const dump_totals totals = writer.finish();
  if (progress) progress({records, totals.bytes, "records"});
  return totals;
}

load_result load_volume(dump_reader& in, const volume_target& target, bool take_over_packs,
                        const dump_progress_fn& progress) {
  std::unique_ptr<volume_loader> loader;
  try {
    loader = std::make_unique<volume_loader>(
        target, in.header(),
        take_over_packs ? existing_packs::taken_over : existing_packs::local_only);
    loader->open();
    while (const auto r = in.next()) {
      loader->add(r->t, r->key, r->value);
      if (progress && loader->records() % k_progress_every == 0)
        progress({loader->records(), in.bytes_read(), "records"});
    }
    load_result result = loader->finish();
    if (progress) progress({result.records, in.bytes_read(), "records"});
    return result;
  } catch (const store_error& e) {
    const bool left = loader && loader->left_tables();
    loader.reset();  // an embedded target is emptied first
    if (left) throw_naming_leftovers(e, target);
    throw;
  }
}

load_result migrate_volume(const fs::path& source_dir, const volume_target& target,
                           const dump_progress_fn& progress) {
  // The volume must not change under the copy.
  const source_records source = open_source(source_dir, true);
  std::unique_ptr<volume_loader> loader;
  try {
    loader = std::make_unique<volume_loader>(target, header_of(source), existing_packs::refused);
    loader->open();
    source.engine->scan_consistent(k_all_tables, "reading the records",
                                   [&](table t, std::string_view key, std::string_view value) {
                                     if (t == table::meta && is_running_state(key)) return;
                                     loader->add(t, key, value);
                                     if (progress && loader->records() % k_progress_every == 0)
                                       progress({loader->records(), 0, "records"});
                                   });
    // The packs the records name, whole, from the source's home to the
    // target's (one pack in memory at a time: at most 64 MiB and a record).
    std::uint64_t copied = 0;
    {
      const std::unique_ptr<object_store> from = pack_home_of(source_dir, source.marker.data);
      object_store& to = loader->packs();
      for (const auto& [id, end] : loader->named_packs()) {
        const std::string name = pack_object_name(id);
        const std::optional<std::uint64_t> size = from->size(name);
        if (!size || *size < end)
          throw store_error(ENOENT, from->where() + " lacks " + name +
                                        ", which the volume's records name (run `densefs fsck " +
                                        source_dir.string() + "`)");
        if (*size > 0xffffffffu) throw store_error(EFBIG, name + " is too large for a pack");
        to.put(name, from->get_range(name, 0, static_cast<std::uint32_t>(*size)));
        copied += *size;
        if (progress) progress({loader->records(), copied, "packs"});
      }
    }
    load_result result = loader->finish();
    result.pack_bytes = copied;
    return result;
  } catch (const store_error& e) {
    const bool left = loader && loader->left_tables();
    loader.reset();
    if (left) throw_naming_leftovers(e, target);
    throw;
  }
}

}  // namespace densefs::store
