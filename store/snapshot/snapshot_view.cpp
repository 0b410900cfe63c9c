#include "store/snapshot/snapshot_view.h"

#include <cerrno>
#include <optional>
#include <utility>
#include <vector>

#include "store/error.h"
#include "store/snapshot/pre_image.h"
#include "store/snapshot/registry.h"

namespace densefs::store {
namespace {

// Rows fetched per page of a cursor.
constexpr std::size_t k_page_rows = 256;

// A pull cursor over one engine scan, fetched in pages: the engines' scans
// push, and a merge of two needs to pull.
class paged_cursor {
 public:
  paged_cursor(const metadata_engine& e, table t, key_range range, bool backward, std::string start,
               std::string_view what)
      : e_(e),
        t_(t),
        range_(std::move(range)),
        backward_(backward),
        resume_(std::move(start)),
        what_(what) {
    fill();
  }
  bool valid() const { return pos_ < page_.size(); }
  const std::string& key() const { return page_[pos_].first; }
  const std::string& value() const { return page_[pos_].second; }
  void next() {
    if (++pos_ == page_.size() && !exhausted_) fill();
  }
  // Pages fetched so far.
  std::uint64_t fills() const { return fills_; }

 private:
  void fill() {
    page_.clear();
    pos_ = 0;
    scan_options o;
    o.start = resume_;
    o.order = backward_ ? scan_order::backward : scan_order::forward;
    o.fill_cache = true;
    o.expected_rows = k_page_rows + 1;
    const bool skip_resume = started_;
    e_.scan(t_, range_, o, what_, [&](std::string_view k, std::string_view v) {
      // A later page starts at the last key of the one before: skip it.
      if (skip_resume && k == resume_) return true;
      page_.emplace_back(k, v);
      return page_.size() < k_page_rows;
    });
    exhausted_ = page_.size() < k_page_rows;
    started_ = true;
    ++fills_;
    if (!page_.empty()) resume_ = page_.back().first;
  }

  const metadata_engine& e_;
  table t_;
  key_range range_;
  bool backward_;
  std::string resume_;
  std::string_view what_;
  std::vector<std::pair<std::string, std::string>> page_;
  std::size_t pos_ = 0;
  bool exhausted_ = false;
  bool started_ = false;
  std::uint64_t fills_ = 0;
};

// What snapshot S sees of a record that has pre-image rows: its value, or
// nullopt inside when it did not exist then.
struct pre_decision {
  std::string key;
  std::optional<std::string> value;
};

// The pre-image rows of a table in key order, each record's rows taken
// together: yields the records some row of which (id >= S) decides.
class pre_image_cursor {
 public:
  pre_image_cursor(const metadata_engine& e, table t, const key_range& range,
                   std::string_view start, bool backward, std::uint64_t snapshot,
                   std::string_view what)
      : rows_(e, table::meta, pre_image_range(t, range), backward,
              start_row(t, range, start, backward), what),
        snapshot_(snapshot),
        what_(what) {
    advance();
  }
  bool valid() const { return current_.has_value(); }
  const pre_decision& current() const { return *current_; }
  void next() { advance(); }

 private:
  static std::string start_row(table t, const key_range& range, std::string_view start,
                               bool backward) {
    if (start.empty()) return backward ? std::string() : pre_image_range(t, range).lower;
    // Backward: the last row of the record at `start`; forward: its first.
    return backward ? pre_image_key(t, start, UINT64_MAX) : pre_image_key(t, start, 0);
  }
  void advance() {
    current_.reset();
    while (rows_.valid()) {
      const auto row = parse_pre_image_key(rows_.key());
      if (!row) throw store_error(EIO, "a damaged pre-image row key (" + std::string(what_) + ")");
      std::string key = row->key;
      // Every row of this record: the one that decides is the smallest id >= S.
      std::optional<std::uint64_t> best;
      std::optional<std::string> value;
      while (rows_.valid()) {
        const auto r = parse_pre_image_key(rows_.key());
        if (!r) throw store_error(EIO, "a damaged pre-image row key (" + std::string(what_) + ")");
        if (r->key != key) break;
        if (r->snapshot >= snapshot_ && (!best || r->snapshot < *best)) {
          best = r->snapshot;
          value = decode_pre_image(rows_.value(), what_);
        }
        rows_.next();
      }
      if (best) {
        current_ = pre_decision{std::move(key), std::move(value)};
        return;
      }
    }
  }

  paged_cursor rows_;
  std::uint64_t snapshot_;
  std::string_view what_;
  std::optional<pre_decision> current_;
};

}  // namespace

snapshot_view::snapshot_view(const metadata_engine& live, std::uint64_t snapshot)
    : live_(live),
      snapshot_(snapshot),
      where_(live.where() + ", snapshot " + std::to_string(snapshot)) {
  if (const auto row = live.get(table::meta, snapshot_key(snapshot), "a snapshot"))
    next_ino_ = decode_snapshot(snapshot, *row, where_).next_ino;
}

bool snapshot_view::born_after(table t, std::string_view key) const {
  if (!is_pre_imaged(t)) return false;
  const auto ino = owner_ino(key);
  return ino && *ino >= next_ino_;
}

std::optional<std::string> snapshot_view::get(table t, std::string_view key,
                                              std::string_view what) const {
  if (!is_pre_imaged(t)) return live_.get(t, key, what);
  if (born_after(t, key)) return std::nullopt;
  // The live value first: a commit landing between the two reads files its
  // pre-image under the latest snapshot in the same batch, so the second
  // read finds it and it decides (read the other way round, the commit
  // would show).
  std::optional<std::string> live = live_.get(t, key, what);
  std::optional<std::optional<std::string>> decided;
  key_range rows;
  rows.lower = pre_image_key(t, key, snapshot_);
  rows.upper = pre_image_key(t, key, UINT64_MAX);
  rows.upper += '\0';  // past the row of id UINT64_MAX too
  scan_options o;
  live_.scan(table::meta, rows, o, what, [&](std::string_view, std::string_view v) {
    decided = decode_pre_image(v, what);
    return false;
  });
  if (decided) return std::move(*decided);
  return live;
}

std::vector<std::optional<std::string>> snapshot_view::get_many(table t,
                                                                std::span<const std::string> keys,
                                                                std::string_view what) const {
  if (!is_pre_imaged(t)) return live_.get_many(t, keys, what);
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(get(t, k, what));
  return out;
}

void snapshot_view::merge(table t, const key_range& range, std::string_view start, bool backward,
                          std::string_view what,
                          const std::function<bool(std::string_view, std::string_view)>& fn) const {
  // Exact beside a writer: the pre-image rows of every key are read after
  // its live page. A commit between the two reads then shows in neither
  // (its changes keep their old values in pre-images the second read
  // finds); read the other way round, a record a commit removed in
  // between would be in neither. So the pre-image rows are read again
  // after each live page, from the last key passed.
  paged_cursor live(live_, t, range, backward, std::string(start), what);
  std::optional<pre_image_cursor> pre;
  pre.emplace(live_, t, range, start, backward, snapshot_, what);
  std::uint64_t live_pages = live.fills();
  std::optional<std::string> passed;  // the last key emitted or skipped
  const auto before = [&](const std::string& a, const std::string& b) {
    return backward ? a > b : a < b;
  };
  const auto next_live = [&] {
    passed = live.key();
    live.next();
    if (live.fills() == live_pages) return;
    live_pages = live.fills();
    pre.emplace(live_, t, range, *passed, backward, snapshot_, what);
    while (pre->valid() && !before(*passed, pre->current().key)) pre->next();
  };
  while (live.valid() || pre->valid()) {
    if (pre->valid() && (!live.valid() || !before(live.key(), pre->current().key))) {
      const pre_decision d = pre->current();
      pre->next();
      if (live.valid() && live.key() == d.key) next_live();
      // A record whose inode came after S has no pre-image of S; a later
      // snapshot's says nothing of S.
      if (d.value && !born_after(t, d.key) && !fn(d.key, *d.value)) return;
      passed = d.key;
      continue;
    }
    if (!born_after(t, live.key()) && !fn(live.key(), live.value())) return;
    next_live();
  }
}

void snapshot_view::scan(
    table t, const key_range& range, const scan_options& options, std::string_view what,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  if (!is_pre_imaged(t)) return live_.scan(t, range, options, what, fn);
  std::string start = options.start.empty() || options.start < std::string_view(range.lower)
                          ? range.lower
                          : std::string(options.start);
  const bool past_end = !range.upper.empty() && start >= range.upper;
  switch (options.order) {
    case scan_order::forward:
      if (past_end) return;
      merge(t, range, start, false, what, fn);
      return;
    case scan_order::backward:
      merge(t, range, options.start.empty() || past_end ? std::string() : start, true, what, fn);
      return;
    case scan_order::forward_from_floor: {
      // The floor among the keys this snapshot sees: the last visible key
      // <= start; without one, from the first key >= start.
      // (An empty start has no key at or below it: a backward merge would
      // read it as "from the end".)
      std::optional<std::string> floor;
      if (!start.empty() || past_end)
        merge(t, range, past_end ? std::string() : start, true, what,
              [&](std::string_view k, std::string_view) {
                floor = std::string(k);
                return false;
              });
      if (!floor && past_end) return;
      merge(t, range, floor ? *floor : start, false, what, fn);
      return;
    }
  }
}

void snapshot_view::scan_consistent(
    std::span<const table>, std::string_view what,
    const std::function<void(table, std::string_view, std::string_view)>&) const {
  throw store_error(ENOTSUP, std::string(what) + ": a dump of a snapshot is not built yet");
}

std::unique_ptr<metadata_batch> snapshot_view::new_batch() const {
  return live_.new_batch();
}

void snapshot_view::write(metadata_batch&, bool) {
  throw store_error(EROFS, where_ + " is a snapshot: read-only");
}

}  // namespace densefs::store
