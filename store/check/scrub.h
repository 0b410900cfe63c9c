// scrub: reads every chunk of a store and checks that its payload decodes
// to the content its name promises (store/check/chunk_verifier.h, the check of
// `fsck --deep`). A chunk that fails is marked damaged
// (store/check/damaged_chunks.h), so the next write of the same content stores a
// fresh payload and every file using it is whole again; the report names
// those files by path.
//
// Unlike fsck, scrub changes nothing but those marks and needs no exclusive
// lock: `densefs scrub MNT` runs it inside the daemon of a live mount (its
// control socket, fs/control_handlers.cpp) at low CPU and I/O priority,
// `densefs scrub STORE` on an unmounted store. docs/fsck.md, "Scrub".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::store {

class store;

struct scrub_options {
  // Called after each chunk (done, total, stored bytes read so far).
  std::function<void(std::uint64_t done, std::uint64_t total, std::uint64_t bytes)> progress;
  // Asked between chunks and during the scans: true ends the scrub early
  // (the report says so).
  std::function<bool()> stop;
  std::size_t max_files = 100;  // paths kept in the report
};

struct scrub_report {
  std::uint64_t chunks = 0;           // checked
  std::uint64_t stored_bytes = 0;     // read
  std::uint64_t damaged = 0;          // chunks found damaged (and marked)
  std::uint64_t damaged_files = 0;    // files using them
  bool stopped = false;               // ended early by options.stop
  std::vector<std::string> problems;  // one line per damaged chunk (at most max_files)
  std::vector<std::string> files;     // "/dir/name (inode N)", at most max_files
};

scrub_report scrub(const store& s, const scrub_options& options = {});

// {"chunks":N,"stored_bytes":N,"damaged":N,"damaged_files":N,"stopped":b,
//  "problems":[...],"files":[...]}
std::string to_json(const scrub_report& r);
// The report back from to_json's text (a daemon's answer to `densefs
// scrub`); fields it lacks stay at their defaults. Throws
// nlohmann::json::parse_error on text that is not JSON.
scrub_report scrub_report_from_json(std::string_view text);
// The human report: a summary line, then each damaged file.
std::string to_text(const scrub_report& r);

}  // namespace densefs::store
