// A volume's records out to one stream and back (`densefs dump`, `densefs
// load`, `densefs migrate`; docs/backup.md, the stream's bytes in
// docs/format.md "Metadata dumps").
//
// A dump holds every record of the file system (inodes, directory entries,
// extents, xattrs and ACLs, chunk records with their refcounts, payload
// values: small payloads inline, larger ones as references into pack
// files) and none of a volume's running state (sessions, leases, holds,
// commit outcomes, counters of pack names), read from one state of the
// volume (metadata_engine::scan_consistent) even while it is mounted. The
// pack files themselves are not in it: a load rebuilds the records against
// packs that are where the target keeps them, and checks that every pack a
// record names is there before it finishes.
//
// A loaded volume is a new volume: a UUID of its own (two volumes with one
// UUID would share a client's cache directory), the store format of where
// it now lives (embedded: the dump's, or 4 from PostgreSQL; PostgreSQL: 5,
// or 6 with packs in object storage). FORMAT is written last, so an
// interrupted load leaves no store: the command says how to start over.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "store/dump/dump_stream.h"

namespace densefs::store {

class metadata_engine;
class metadata_batch;
class object_store;

// Where a volume is loaded or migrated to: as `densefs mkfs` takes it.
struct volume_target {
  std::filesystem::path dir;
  std::string postgres;  // empty: the embedded database in `dir`
  std::string data;      // s3:// location of the packs (needs `postgres`)
};

struct dump_progress {
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;  // of the stream (dump, load) or of packs copied (migrate)
  std::string_view phase;   // "records", "packs"
};
using dump_progress_fn = std::function<void(const dump_progress&)>;

// Writes every record of the volume in `store_dir` (mounted or not; its
// records are only read) to `out`. `name` names `out` in errors.
dump_totals dump_volume(const std::filesystem::path& store_dir, std::ostream& out,
                        const std::string& name, const dump_progress_fn& progress = {});

struct load_result {
  std::string uuid;  // the new volume's
  std::uint32_t format_version = 0;
  std::uint64_t records = 0;
  std::uint64_t packs = 0;       // pack files the records name (all present)
  std::uint64_t pack_bytes = 0;  // bytes of packs copied (migrate only)
};

// Makes a volume at `target` from the records `in` holds. The target is
// new: an empty or missing directory (or one that holds only the packs/
// the dump's records name, for a volume whose database was lost), an
// empty database, and for `data` a location without pack objects, or,
// with `take_over_packs`, one whose packs are the dumped volume's and that
// volume is gone (two volumes must never share packs: their numbers would
// collide and each one's gc would delete the other's). Throws store_error
// with one line.
load_result load_volume(dump_reader& in, const volume_target& target, bool take_over_packs,
                        const dump_progress_fn& progress = {});

// Copies the volume in `source_dir` (no writer mounted: EBUSY) to a new
// `target` (empty: no packs there either): its records
// read once from one state, written as load_volume writes them, and the
// pack files those records name copied from where the source keeps them
// (its directory or its object storage) to where the target keeps them.
// No file is read through a mount, and packs no record names stay behind.
load_result migrate_volume(const std::filesystem::path& source_dir, const volume_target& target,
                           const dump_progress_fn& progress = {});

}  // namespace densefs::store
