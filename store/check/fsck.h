// fsck: checks a store's internal consistency (refcounts against extents,
// payload checksums, optionally decoded content, directory links) and
// repairs what can be repaired without guessing. docs/fsck.md describes
// every check and why the rest is only reported.
//
// The store must not be mounted: the caller holds store::lock() (and opens
// the store read-write when repairing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::store {

class store;

// Kinds of problem, in report order. Names (fsck_problem_name) are the JSON
// keys and are stable.
enum class fsck_problem : std::size_t {
  corrupt_record,         // a key or value that does not decode
  dangling_extent,        // an extent names a chunk that does not exist (file damaged)
  extent_without_inode,   // extents of an inode that does not exist
  bad_extent,             // overlaps the previous extent, crosses a 4 MiB slot, or passes its chunk
  wrong_refcount,         // stored refcount != number of extents naming the chunk
  leaked_chunk,           // a chunk no extent references
  bad_payload,            // payload missing, wrong size or wrong XXH3 (file damaged)
  bad_content,            // --deep: payload does not decode to content with the chunk's SHA-256
  dangling_dirent,        // a directory entry names an inode that does not exist
  dirent_outside_dir,     // an entry whose parent is missing or not a directory
  dirent_type_mismatch,   // an entry's type differs from its inode's
  wrong_nlink,            // nlink != dirents naming it (files) or 2 + subdirectories (dirs)
  unreachable_inode,      // no directory entry, not the root, not an orphan
  dangling_orphan,        // an orphan entry for an inode that does not exist
  dangling_queue_entry,   // a recompress/ entry for a chunk that does not exist
  stored_bytes_mismatch,  // warning: inode stored_bytes != sum over its extents
  count,
};
inline constexpr std::size_t k_fsck_problem_count = static_cast<std::size_t>(fsck_problem::count);

std::string_view fsck_problem_name(fsck_problem p);
// Warnings (accounting) are reported and repaired but do not make a store
// unclean.
bool fsck_problem_is_warning(fsck_problem p);
// Whether --repair fixes this kind.
bool fsck_problem_is_repairable(fsck_problem p);

struct fsck_options {
  bool repair = false;  // the store must be open read-write
  bool deep = false;    // decode every chunk and check its SHA-256
  // Pack stores: before checking, point every pack payload's index entry at
  // its newest good record found by a scan of the packs
  // (store::rebuild_pack_index). Writes to the store, like repair.
  bool rebuild_index = false;
  // The database was just salvaged (store::salvage_metadata) and some of its
  // tables may be gone: with `repair`, a file whose extents no longer
  // account for its stored bytes gets its uncovered ranges marked lost, so
  // that reading them fails instead of returning zeros.
  bool after_salvage = false;
  std::size_t max_examples = 10;  // per problem kind
  // Called now and then during long phases ("payloads", done, total).
  std::function<void(std::string_view phase, std::uint64_t done, std::uint64_t total)> progress;
};

struct fsck_report {
  struct kind {
    std::uint64_t found = 0;
    std::uint64_t repaired = 0;
    std::vector<std::string> examples;  // the first max_examples, one line each
  };
  kind problems[k_fsck_problem_count];

  // What was walked.
  std::uint64_t inodes = 0;
  std::uint64_t dirents = 0;
  std::uint64_t extents = 0;
  std::uint64_t chunks = 0;
  std::uint64_t queued = 0;  // recompress/ entries
  std::uint64_t orphans = 0;
  std::uint64_t pack_index_rebuilt = 0;  // index entries rebuild_index (or repair) wrote
  // Chunk records --repair made again from pack record headers (lost with
  // a damaged table): a second run then checks the counts they bring.
  std::uint64_t chunk_records_rebuilt = 0;
  bool deep = false;
  bool repair = false;

  const kind& operator[](fsck_problem p) const { return problems[static_cast<std::size_t>(p)]; }
  kind& operator[](fsck_problem p) { return problems[static_cast<std::size_t>(p)]; }
  // Errors (not warnings) found and not repaired.
  std::uint64_t remaining_errors() const;
  bool clean() const { return remaining_errors() == 0; }
};

fsck_report fsck(store& s, const fsck_options& options = {});

// For a check run again after repairs (fsck --repair-from, chunk records
// made again): `later` also reports what `earlier` found and repaired, so
// that the report says everything that was changed. What `earlier` found
// and did not repair, `later` finds again.
void add_earlier_repairs(fsck_report& later, const fsck_report& earlier);

// {"clean": bool, "deep": bool, "repair": bool, "counts": {"inodes": N, ...},
//  "problems": {"wrong_refcount": {"found": N, "repaired": N, "warning": bool,
//  "repairable": bool, "examples": [...]}, ...}} (kinds with found > 0).
std::string to_json(const fsck_report& r);
// The human report: one line per kind found, its examples indented.
std::string to_text(const fsck_report& r);

}  // namespace densefs::store
