// Reading records: inodes, directory entries, xattrs, and extents with
// their cache.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include "store/cache/entry_cache.h"
#include "store/log.h"
#include "store/metadata/metadata_engine.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/payload/pack_store.h"
#include "store/record_reads.h"
#include "store/records_detail.h"
#include "store/store_internal.h"
#include "store/text.h"

namespace densefs::store {

using namespace internal;

namespace {

using record_reads::extent_offset;
using record_reads::extent_what;
using record_reads::u64_prefix;

}  // namespace

std::optional<inode_record> store::get_inode(std::uint64_t ino) const {
  return record_reads::inode(*engine_, ino);
}

std::vector<std::optional<inode_record>> store::get_inodes(
    const std::vector<std::uint64_t>& inos) const {
  std::vector<std::optional<inode_record>> out(inos.size());
  if (inos.empty()) return out;
  std::vector<std::string> keys;
  keys.reserve(inos.size());
  for (std::uint64_t ino : inos) keys.push_back(inode_key(ino));
  const std::vector<std::optional<std::string>> values = engine_->get_many(
      table::inodes, keys,
      inos.size() == 1 ? "inode " + std::to_string(inos[0])
                       : std::to_string(inos.size()) + " inodes from " + std::to_string(inos[0]));
  for (std::size_t i = 0; i < inos.size(); ++i)
    if (values[i]) out[i] = decode_inode(inos[i], *values[i]);
  return out;
}

std::optional<dirent_record> store::get_dirent(std::uint64_t parent, std::string_view name) const {
  if (!entry_cache_) return record_reads::dirent(*engine_, parent, name);
  if (auto known = entry_cache_->find(parent, name)) return std::move(*known);
  const std::uint64_t gen = entry_cache_->generation();
  std::optional<dirent_record> found = record_reads::dirent(*engine_, parent, name);
  entry_cache_->keep(gen, parent, name, found);
  return found;
}

void store::list_dir(std::uint64_t parent, std::optional<std::string_view> after,
                     const std::function<bool(std::string_view, const dirent_record&)>& fn) const {
  record_reads::list_dir(*engine_, parent, after, fn);
}

bool store::dir_is_empty(std::uint64_t parent) const {
  if (entry_cache_)
    if (const std::optional<bool> known = entry_cache_->empty(parent)) return *known;
  bool empty = true;
  engine_->scan(table::dirents, u64_prefix(parent), {},
                "listing directory " + std::to_string(parent),
                [&](std::string_view, std::string_view) { return empty = false; });
  return empty;
}

std::vector<std::pair<std::uint64_t, extent_record>> store::extents(std::uint64_t ino,
                                                                    std::uint64_t begin,
                                                                    std::uint64_t end,
                                                                    std::size_t limit) const {
  std::vector<std::pair<std::uint64_t, extent_record>> out;
  if (begin >= end || limit == 0) return out;
  // Appends what `all` (sorted, from the floor of `begin` on) has of the answer.
  const auto pick = [&](const extent_list& all) {
    for (const auto& [offset, r] : all) {
      if (offset >= end || out.size() >= limit) break;
      if (offset + r.length > begin) out.emplace_back(offset, r);
    }
  };
  // After pick(w.list) of a window starting at or before `begin`: whether
  // out is the whole answer (every extent the range needs, or `limit`).
  const auto whole_answer = [&](const extent_window& w) {
    return w.to_end || end - 1 <= w.last || out.size() >= limit;
  };
  // Where the ranged scan below starts: the floor of `begin`, or right
  // after a window that holds the start of the answer.
  std::uint64_t scan_from = begin;
  bool from_floor = true;
  if (caches_extents()) {
    std::uint64_t gen = 0;
    bool known_big = false;
    {
      std::lock_guard lock(extent_cache_mutex_);
      if (const auto it = extent_windows_.find(ino); it != extent_windows_.end()) {
        for (const extent_window& w : it->second) {
          if (w.first > begin) continue;
          pick(w.list);
          if (whole_answer(w)) return out;
          out.clear();
        }
        known_big = true;
      }
      if (const auto it = extent_cache_.find(ino); it != extent_cache_.end()) {
        if (!it->second.too_many) {
          pick(it->second.list);
          return out;
        }
        known_big = true;
      }
      gen = extents_gen_;
    }
    if (!known_big) {
      // The whole list in the scan's first page (one round trip) when the
      // file has few extents; a marker sends later reads of a file with
      // more straight to the ranged scan below.
      cached_extents whole;
      scan_options o;
      engine_->scan(table::extents, u64_prefix(ino), o,
                    "reading extents of inode " + std::to_string(ino),
                    [&](std::string_view key, std::string_view value) {
                      return add_cached_extent(whole, ino, key, value);
                    });
      cache_extents(gen, {{ino, whole}});
      if (!whole.too_many) {
        pick(whole.list);
        return out;
      }
    }
    // A window read now starts at the floor of `begin`.
    const extent_window w = read_extent_window(ino, begin, gen);
    pick(w.list);
    if (whole_answer(w)) return out;
    // The window has every extent up to w.last: the rest comes after it
    // (in a snapshot of its own: a commit in between changes extents
    // after w.last only as a scan after it would see them, one extent per
    // offset either way).
    scan_from = w.last + 1;
    from_floor = false;
  }
  record_reads::append_extents(*engine_, ino, scan_from, from_floor, begin, end, limit, out);
  return out;
}

store::extent_window store::read_extent_window(std::uint64_t ino, std::uint64_t begin,
                                               std::uint64_t gen) const {
  extent_window w;
  scan_options o;
  const std::string start = extent_key(ino, begin);
  o.start = start;
  o.order = scan_order::forward_from_floor;
  o.expected_rows = k_window_extents;
  bool full = false;
  engine_->scan(
      table::extents, u64_prefix(ino), o, "reading extents of inode " + std::to_string(ino),
      [&](std::string_view key, std::string_view value) {
        const std::uint64_t offset = extent_offset(ino, key);
        w.list.emplace_back(offset, detail::decode_extent(value, extent_what(ino, offset)));
        return !(full = w.list.size() == k_window_extents);
      });
  // The first row is the floor (the last extent at or before `begin`);
  // without one no extent starts at or before `begin`, so none comes before
  // the list at all.
  w.first = !w.list.empty() && w.list.front().first <= begin ? w.list.front().first : 0;
  w.to_end = !full;
  w.last = w.list.empty() ? begin : w.list.back().first;
  std::lock_guard lock(extent_cache_mutex_);
  if (gen != extents_gen_) return w;  // a commit came in between: it may be stale
  if (extent_windows_.size() >= k_extent_windows && !extent_windows_.contains(ino))
    extent_windows_.erase(extent_windows_.begin());  // another file's, any
  std::deque<extent_window>& kept = extent_windows_[ino];
  // Two readers of one file that missed together read the same window.
  for (const extent_window& k : kept)
    if (k.first == w.first && k.last == w.last) return w;
  if (kept.size() == k_windows_per_file) kept.pop_front();
  kept.push_back(w);
  return w;
}

void store::drop_cached_extents(std::span<const std::uint64_t> inodes, bool all) const {
  if (!caches_extents()) return;
  std::lock_guard lock(extent_cache_mutex_);
  ++extents_gen_;
  if (all) {
    extent_cache_.clear();
    extent_windows_.clear();
    return;
  }
  for (const std::uint64_t ino : inodes) {
    extent_cache_.erase(ino);
    extent_windows_.erase(ino);
  }
}

void store::prefetch_extents(std::span<const std::uint64_t> inodes) const {
  if (!caches_extents() || inodes.empty()) return;
  // Inodes made together (cp, tar, rsync) have nearby numbers: one range
  // scan covers a run whose neighbours are at most k_gap apart, up to
  // k_max_rows extents (files outside the list in the range cost a row
  // each; a big file's extents end the run early).
  constexpr std::uint64_t k_gap = 16;
  constexpr std::size_t k_max_rows = 4096;
  constexpr std::size_t k_max_inodes = 1024;
  std::vector<std::uint64_t> wanted;
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(extent_cache_mutex_);
    for (const std::uint64_t ino : inodes.first(std::min(inodes.size(), k_max_inodes)))
      if (!extent_cache_.contains(ino)) wanted.push_back(ino);
    gen = extents_gen_;
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::unordered_map<std::uint64_t, cached_extents> found;
  for (std::size_t i = 0; i < wanted.size();) {
    std::size_t j = i + 1;
    while (j < wanted.size() && wanted[j] - wanted[j - 1] <= k_gap) ++j;
    const std::uint64_t first = wanted[i], last = wanted[j - 1];
    std::set<std::uint64_t> run(wanted.begin() + static_cast<std::ptrdiff_t>(i),
                                wanted.begin() + static_cast<std::ptrdiff_t>(j));
    i = j;
    if (last == std::numeric_limits<std::uint64_t>::max()) continue;
    key_range range{inode_key(first), inode_key(last + 1)};
    std::size_t rows = 0;
    // Every inode of the run below `done` has its whole list (or is marked).
    std::uint64_t done = first;
    std::unordered_map<std::uint64_t, cached_extents> seen;
    try {
      scan_options o;
      engine_->scan(table::extents, range, o, "prefetching extents",
                    [&](std::string_view key, std::string_view value) {
                      const std::uint64_t ino = decode_u64_be(key.substr(0, 8));
                      done = ino;
                      if (++rows > k_max_rows) return false;
                      if (!run.contains(ino)) return true;
                      add_cached_extent(seen[ino], ino, key, value);
                      return true;
                    });
      if (rows <= k_max_rows) done = last + 1;  // the whole range was read
    } catch (const store_error&) {
      continue;  // the reads that need them scan again and say why
    }
    for (const std::uint64_t ino : run)
      if (ino < done) found[ino] = seen.contains(ino) ? std::move(seen[ino]) : cached_extents{};
  }
  cache_extents(gen, std::move(found));
}

bool store::add_cached_extent(cached_extents& c, std::uint64_t ino, std::string_view key,
                              std::string_view value) {
  if (c.too_many) return false;
  if (c.list.size() == k_cached_extents) {
    c.too_many = true;
    c.list.clear();
    return false;
  }
  const std::uint64_t offset = extent_offset(ino, key);
  c.list.emplace_back(offset, detail::decode_extent(value, extent_what(ino, offset)));
  return true;
}

void store::cache_extents(std::uint64_t gen,
                          std::unordered_map<std::uint64_t, cached_extents> found) const {
  std::lock_guard lock(extent_cache_mutex_);
  if (gen != extents_gen_) return;  // a commit came in between: they may be stale
  if (extent_cache_.size() + found.size() > k_extent_cache_files) extent_cache_.clear();
  for (auto& [ino, c] : found) extent_cache_.insert_or_assign(ino, std::move(c));
}

void store::has_no_extents_yet(std::uint64_t ino) const {
  if (!caches_extents()) return;
  // No gen check (cache_extents): nothing can have committed extents of a
  // number nobody was given yet, and the commit that gives it some drops
  // this (after_commit).
  std::lock_guard lock(extent_cache_mutex_);
  if (extent_cache_.size() >= k_extent_cache_files) extent_cache_.clear();
  extent_cache_.insert_or_assign(ino, cached_extents{});
}

void store::has_no_entries_yet(std::uint64_t dir) const {
  // Exact: nothing can have committed entries under a number nobody was
  // given yet; the commit that makes the directory says the same again.
  if (entry_cache_) entry_cache_->committed({}, std::span(&dir, 1));
}

void store::forget_extents(std::uint64_t ino) const {
  drop_cached_extents(std::span(&ino, 1), false);
}

std::vector<std::pair<std::uint64_t, extent_record>> store::last_extents(std::uint64_t ino,
                                                                         std::uint64_t begin,
                                                                         std::size_t limit) const {
  std::vector<std::pair<std::uint64_t, extent_record>> out;
  if (limit == 0) return out;
  scan_options o;
  o.order = scan_order::backward;
  engine_->scan(table::extents, u64_prefix(ino), o,
                "reading extents of inode " + std::to_string(ino),
                [&](std::string_view key, std::string_view value) {
                  const std::uint64_t offset = extent_offset(ino, key);
                  if (offset < begin) return false;
                  out.emplace_back(offset, detail::decode_extent(value, extent_what(ino, offset)));
                  return out.size() < limit;
                });
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<std::string> store::get_xattr(std::uint64_t ino, std::string_view name) const {
  return record_reads::xattr(*engine_, ino, name);
}

std::vector<std::string> store::list_xattrs(std::uint64_t ino) const {
  return record_reads::xattr_names(*engine_, ino);
}

std::optional<chunk_record> store::get_chunk(const chunk_hash& hash) const {
  const std::string what = "chunk " + hash.hex();
  const auto v = engine_->get(table::chunks, hash.view(), what);
  if (!v) return std::nullopt;
  return detail::decode_chunk(*v, what);
}

const std::optional<chunk_record>* chunk_records::find(const chunk_hash& hash) const {
  const auto it = of.find(hash);
  return it == of.end() ? nullptr : &it->second;
}

chunk_records store::get_chunks(std::span<const chunk_hash> hashes) const {
  chunk_records out;
  // Before the read: a commit that lands during it moves the count after.
  out.as_of = chunk_record_changes_.load();
  out.retakes_as_of = engine_->lock_retakes();
  for (const chunk_hash& h : hashes) out.of.try_emplace(h);
  if (out.of.empty()) return out;
  std::vector<std::string> keys;
  keys.reserve(out.of.size());
  for (const auto& [hash, rec] : out.of) keys.emplace_back(hash.view());
  const std::vector<std::optional<std::string>> values =
      engine_->get_many(table::chunks, keys, "chunk records");
  auto value = values.begin();
  for (auto& [hash, rec] : out.of) {
    if (*value) rec = detail::decode_chunk(**value, "chunk " + hash.hex());
    ++value;
  }
  return out;
}

void store::scan_prefix(
    table t, std::string_view prefix, std::string_view start, const char* what,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  scan_options o;
  o.start = start;
  o.fill_cache = false;  // scans pass once over records nobody reads again soon
  engine_->scan(t, prefix_range(prefix), o, what, fn);
}

std::vector<new_file_record> store::new_files() const {
  std::vector<new_file_record> out;
  scan_prefix(table::meta, k_new_file_prefix, k_new_file_prefix, "listing new files",
              [&](std::string_view key, std::string_view value) {
                // A damaged row must not stop a mount: it is left alone (and
                // its file, if any, kept).
                try {
                  out.push_back(decode_new_file(key, value));
                } catch (const store_error& e) {
                  log_error("store " + dir_.string() + ": " + e.what() + "; ignored");
                }
                return true;
              });
  return out;
}

std::vector<std::uint64_t> store::orphans() const {
  std::vector<std::uint64_t> out;
  scan_prefix(table::meta, k_orphan_prefix, k_orphan_prefix, "listing orphans",
              [&](std::string_view key, std::string_view value) {
                if (key.size() != k_orphan_prefix.size() + 8)
                  throw store_error(EIO, "corrupt orphan key in store " + dir_.string());
                const std::uint64_t ino = decode_u64_be(key.substr(k_orphan_prefix.size()));
                check_orphan(ino, value);
                out.push_back(ino);
                return true;
              });
  return out;
}

std::vector<recompress_item> store::pending_recompress(
    std::size_t limit, const std::optional<chunk_hash>& after) const {
  std::vector<recompress_item> out;
  std::string start(k_recompress_prefix);
  if (after) start.append(after->view());
  scan_prefix(table::meta, k_recompress_prefix, start, "listing queued re-encodings",
              [&](std::string_view key, std::string_view value) {
                if (key.size() != k_recompress_prefix.size() + chunk_hash::k_size)
                  throw store_error(EIO, "corrupt recompress key in store " + dir_.string());
                const chunk_hash hash =
                    chunk_hash::from_bytes(key.substr(k_recompress_prefix.size()));
                if (!after || hash != *after) out.push_back({hash, decode_recompress(hash, value)});
                return out.size() < limit;
              });
  return out;
}

void store::for_each_inode(const std::function<bool(const inode_record&)>& fn) const {
  scan_prefix(table::inodes, {}, {}, "scanning inodes",
              [&](std::string_view key, std::string_view value) {
                return fn(decode_inode(decode_u64_be(key), value));
              });
}

std::uint64_t store::payload_file_bytes() const {
  if (packs_) return packs_->file_bytes();
  return rocksdb_ ? rocksdb_->blob_file_bytes() : 0;
}

}  // namespace densefs::store
