// Healing damaged chunks from a source tree (`densefs fsck --repair-from
// DIR`, docs/fsck.md): every regular file under DIR is cut into chunks as
// the store cuts a file (each distinct chunker of its codec policy), and a
// chunk whose SHA-256 names a damaged chunk (store/check/damaged_chunks.h) gets a
// fresh payload encoded from those bytes, under the same record
// (transaction::replace_payload), which clears its mark. Files match by
// content, not by name: a renamed or moved source heals as well.
//
// A Lepton file's first chunk (codec/lepton_file.h) holds its members'
// content too and is not swapped: a re-copy of the JPEG heals that file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace densefs::store {

class store;

struct repair_from_report {
  std::uint64_t damaged = 0;     // damaged chunks before
  std::uint64_t healed = 0;      // given a fresh payload
  std::uint64_t files_read = 0;  // source files read
  std::uint64_t bytes_read = 0;
  std::vector<std::string> healed_from;  // "chunk X from PATH", at most max_examples
  std::vector<std::string> not_found;    // damaged chunks no source file holds
};

struct repair_from_options {
  std::size_t max_examples = 100;
  // Called after each source file (files, bytes read so far).
  std::function<void(std::uint64_t files, std::uint64_t bytes)> progress;
};

// The store is open read-write and not mounted (fsck holds its lock).
// Unreadable source files are skipped; the walk ends early once every
// damaged chunk is healed.
repair_from_report repair_from(store& s, const std::filesystem::path& source,
                               const repair_from_options& options = {});

}  // namespace densefs::store
