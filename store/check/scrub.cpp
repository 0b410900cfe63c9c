#include "store/check/scrub.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <unordered_map>

#include "store/check/chunk_verifier.h"
#include "store/error.h"
#include "store/hash.h"
#include "store/records.h"
#include "store/store.h"

namespace densefs::store {

namespace {

bool stopping(const scrub_options& o) {
  return o.stop && o.stop();
}

// Asks `o.stop` every 4,096 records of a scan.
bool scan_goes_on(const scrub_options& o, std::uint64_t& seen) {
  return ++seen % 4096 != 0 || !stopping(o);
}

// Every chunk name, read first: a scan is one database snapshot, which a
// scrub of hours must not pin. (32 bytes a chunk: 320 MB for 10 million.)
std::vector<chunk_hash> chunk_names(const store& s, const scrub_options& o) {
  std::vector<chunk_hash> names;
  std::uint64_t seen = 0;
  s.scan_records(k_cf_chunks, {}, [&](std::string_view key, std::string_view) {
    if (key.size() == chunk_hash::k_size) names.push_back(chunk_hash::from_bytes(key));
    return scan_goes_on(o, seen);  // a bad key is fsck's to report
  });
  return names;
}

// The inodes whose extents name one of `damaged`: one scan of the extents.
std::set<std::uint64_t> files_using(const store& s, const std::set<chunk_hash>& damaged,
                                    const scrub_options& o) {
  std::set<std::uint64_t> inodes;
  std::uint64_t seen = 0;
  s.scan_records(k_cf_extents, {}, [&](std::string_view key, std::string_view value) {
    if (key.size() != 16) return true;
    try {
      if (damaged.count(decode_extent(value).hash)) inodes.insert(decode_u64_be(key.substr(0, 8)));
    } catch (const std::exception&) {
      // fsck reports records that do not decode
    }
    return scan_goes_on(o, seen);
  });
  return inodes;
}

// "/dir/name (inode N)" for each of `inodes` from one scan of the
// directory entries; "inode N" where a part of the path has no entry (an
// open file that was removed).
std::vector<std::string> paths_of(const store& s, const std::set<std::uint64_t>& inodes,
                                  const scrub_options& o) {
  const std::size_t max = o.max_files;
  std::uint64_t seen = 0;
  struct link {
    std::uint64_t parent = 0;
    std::string name;
  };
  std::unordered_map<std::uint64_t, link> links;  // the first entry of each inode
  s.scan_records(k_cf_dirents, {}, [&](std::string_view key, std::string_view value) {
    if (key.size() <= 8) return true;
    try {
      const dirent_record d = decode_dirent(value);
      links.try_emplace(d.ino, link{decode_u64_be(key.substr(0, 8)), std::string(key.substr(8))});
    } catch (const std::exception&) {
    }
    return scan_goes_on(o, seen);
  });
  std::vector<std::string> out;
  for (const std::uint64_t ino : inodes) {
    if (out.size() >= max) break;
    std::string path;
    bool named = true;
    std::size_t depth = 0;
    for (std::uint64_t at = ino; at != k_root_ino && named; ++depth) {
      const auto it = links.find(at);
      named = it != links.end() && depth < 4096;  // bounded: a loop of entries ends here
      if (named) {
        path = "/" + printable_name(it->second.name) + path;
        at = it->second.parent;
      }
    }
    const std::string number = "inode " + std::to_string(ino);
    out.push_back(named ? (path.empty() ? "/" : path) + " (" + number + ")" : number);
  }
  return out;
}

}  // namespace

scrub_report scrub(const store& s, const scrub_options& options) {
  scrub_report r;
  const std::vector<chunk_hash> names = chunk_names(s, options);
  chunk_verifier verifier(s);
  std::set<chunk_hash> damaged;
  for (const chunk_hash& hash : names) {
    if (stopping(options)) {
      r.stopped = true;
      break;
    }
    std::string why;
    try {
      const store::stored_chunk stored = s.read_stored_chunk(hash);
      r.stored_bytes += stored.bytes.size();
      why = verifier.problem(hash, stored);
      if (!why.empty())
        s.mark_damaged(hash, why);  // the store marks what read_stored_chunk refuses
    } catch (const chunk_missing&) {
      // Deleted since the names were read (a live mount removes files).
    } catch (const store_error& e) {
      // A chunk removed since the names were read is not damage.
      if (s.get_chunk(hash)) why = e.what();  // names the chunk
    }
    ++r.chunks;
    if (!why.empty()) {
      damaged.insert(hash);
      if (!why.starts_with("chunk ")) why = "chunk " + hash.hex() + ": " + why;
      if (r.problems.size() < options.max_files) r.problems.push_back(why);
    }
    if (options.progress) options.progress(r.chunks, names.size(), r.stored_bytes);
  }
  r.damaged = damaged.size();
  if (!damaged.empty()) {
    const std::set<std::uint64_t> inodes = files_using(s, damaged, options);
    r.damaged_files = inodes.size();
    r.files = paths_of(s, inodes, options);
  }
  return r;
}

std::string to_json(const scrub_report& r) {
  return nlohmann::json{{"chunks", r.chunks},   {"stored_bytes", r.stored_bytes},
                        {"damaged", r.damaged}, {"damaged_files", r.damaged_files},
                        {"stopped", r.stopped}, {"problems", r.problems},
                        {"files", r.files}}
      .dump(2);
}

scrub_report scrub_report_from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  scrub_report r;
  r.chunks = j.value("chunks", std::uint64_t{0});
  r.stored_bytes = j.value("stored_bytes", std::uint64_t{0});
  r.damaged = j.value("damaged", std::uint64_t{0});
  r.damaged_files = j.value("damaged_files", std::uint64_t{0});
  r.stopped = j.value("stopped", false);
  r.problems = j.value("problems", std::vector<std::string>{});
  r.files = j.value("files", std::vector<std::string>{});
  return r;
}

std::string to_text(const scrub_report& r) {
  std::string out = std::to_string(r.chunks) + " chunks (" + std::to_string(r.stored_bytes) +
                    " stored bytes) checked" + (r.stopped ? ", stopped before the end" : "") + ": ";
  if (r.damaged == 0) return out + "no damage\n";
  out += std::to_string(r.damaged) + " damaged, used by " + std::to_string(r.damaged_files) +
         " file(s):\n";
  for (const std::string& f : r.files) out += "  " + f + "\n";
  if (r.damaged_files > r.files.size())
    out += "  and " + std::to_string(r.damaged_files - r.files.size()) + " more\n";
  out += "damaged chunks:\n";
  for (const std::string& p : r.problems) out += "  " + p + "\n";
  out +=
      "Copy each file in again from its source (or `densefs fsck --repair-from DIR` on the "
      "unmounted store): the damaged chunks are marked, so the new copy stores them afresh and "
      "every file using them is whole again.\n";
  return out;
}

}  // namespace densefs::store
