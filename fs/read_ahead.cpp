#include "fs/read_ahead.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "store/log.h"

namespace densefs::fs {
namespace {

// Streams remembered at once; the least recently read is forgotten first
// (a forgotten stream just starts again with a small window).
constexpr std::size_t k_max_streams = 256;
// How far before or after the previous end a read may start and still count
// as sequential: the kernel's readahead has several requests of up to 1 MiB
// in flight, and FUSE threads may deliver them in any order.
constexpr std::uint64_t k_slack = 4u << 20;

// Before `key` is added to `map` (entries with a `last_use`): forgets the
// least recently used entry when the map holds `capacity` already.
template <typename Map>
void make_room(Map& map, std::size_t capacity, std::uint64_t key) {
  if (map.size() < capacity || map.contains(key)) return;
  map.erase(std::min_element(map.begin(), map.end(), [](const auto& a, const auto& b) {
    return a.second.last_use < b.second.last_use;
  }));
}

}  // namespace

read_ahead::read_ahead(const store::store& st, std::size_t cache_bytes, unsigned threads,
                       std::uint64_t max_window)
    : store_(st),
      max_window_(
          std::max<std::uint64_t>(k_piece, std::min<std::uint64_t>(max_window, cache_bytes / 4))),
      pool_(std::make_unique<worker_pool>(std::max(1u, threads))) {}

read_ahead::~read_ahead() {
  {
    // Under the lock: a sibling prefetch's planning job queues pieces under
    // it, and must not reach pool_ once it is being destroyed.
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  pool_.reset();  // queued pieces return at once (stopping_)
}

void read_ahead::on_read(std::uint64_t ino, std::uint64_t offset, std::size_t size,
                         std::uint64_t file_size) {
  if (size == 0 || offset >= file_size) return;
  const std::uint64_t end = std::min<std::uint64_t>(offset + size, file_size);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pieces;
  {
    std::lock_guard lock(mutex_);
    make_room(streams_, k_max_streams, ino);
    stream& s = streams_[ino];
    s.last_use = ++clock_;
    const bool sequential =
        offset == 0 || (offset + k_slack >= s.next && offset <= s.next + k_slack);
    if (!sequential) {
      s = stream{end, 0, 0, s.last_use};
      return;
    }
    s.next = std::max(s.next, end);
    s.window = s.window == 0 ? k_initial_window : std::min(max_window_, s.window * 2);
    // Behind the reader is too late; past the window is too early.
    s.queued_to = std::max(s.queued_to, s.next);
    const std::uint64_t target = std::min(file_size, s.next + s.window);
    while (s.queued_to < target) {
      // Pieces end on piece boundaries so a stream's pieces never overlap.
      const std::uint64_t to = std::min(target, (s.queued_to / k_piece + 1) * k_piece);
      pieces.emplace_back(s.queued_to, to);
      s.queued_to = to;
    }
  }
  for (const auto& [from, to] : pieces) {
    ++pieces_queued_;
    pool_->submit([this, ino, from = from, to = to] { load_piece(ino, from, to); });
  }
}

void read_ahead::load_piece(std::uint64_t ino, std::uint64_t from, std::uint64_t to) {
  if (stopping_) return;
  try {
    std::vector<store::chunk_hash> hashes;
    for (const auto& [offset, extent] : store_.extents(ino, from, to))
      if (hashes.empty() || hashes.back() != extent.hash) hashes.push_back(extent.hash);
    store_.load_chunks(hashes, [this] { return !stopping_.load(); });
  } catch (const std::exception&) {
    // A prefetch is a hint: the read that needs these chunks reports errors.
  }
}

bool read_ahead::sibling_prefetch_running(std::uint64_t dir) {
  std::lock_guard lock(mutex_);
  return dir_streams_.contains(dir);
}

void read_ahead::remember_listing(std::uint64_t dir, listing_orders orders) {
  const std::size_t n = orders.listing.size();
  if (n < 2 || n > k_max_listed_files || orders.by_name.size() != n) return;
  remembered_listing l;
  l.by_ino.reserve(n);
  {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> name_index;
    name_index.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      name_index.emplace_back(orders.by_name[i], static_cast<std::uint32_t>(i));
    std::sort(name_index.begin(), name_index.end());
    for (std::size_t i = 0; i < n; ++i) l.by_ino.emplace_back(orders.listing[i], i, 0);
    std::sort(l.by_ino.begin(), l.by_ino.end());
    // Both sorted by inode: the same inodes (a hard link listed twice
    // keeps whichever place it pairs with).
    for (std::size_t i = 0; i < n; ++i) {
      if (name_index[i].first != std::get<0>(l.by_ino[i])) return;  // not one listing
      std::get<2>(l.by_ino[i]) = name_index[i].second;
    }
  }
  l.orders = std::move(orders);
  std::lock_guard lock(mutex_);
  if (const auto old = listings_.find(dir); old != listings_.end()) {
    listed_files_ -= old->second.orders.listing.size();
    listings_.erase(old);
  }
  while (!listings_.empty() &&
         (listings_.size() >= k_max_listings || listed_files_ + n > k_max_listed_files)) {
    const auto oldest = std::min_element(
        listings_.begin(), listings_.end(),
        [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    listed_files_ -= oldest->second.orders.listing.size();
    listings_.erase(oldest);
  }
  l.last_use = ++clock_;
  listed_files_ += n;
  listings_.emplace(dir, std::move(l));
}

std::optional<read_ahead::cold_start> read_ahead::place_of(const remembered_listing& l,
                                                           std::uint64_t file) {
  const auto at =
      std::lower_bound(l.by_ino.begin(), l.by_ino.end(),
                       std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>{file, 0, 0});
  if (at == l.by_ino.end() || std::get<0>(*at) != file) return std::nullopt;
  return cold_start{std::get<1>(*at), std::get<2>(*at), 0};
}

std::vector<std::uint64_t> read_ahead::note_cold_file(std::uint64_t dir, std::uint64_t file,
                                                      std::size_t max, const listing_scan& scan) {
  std::lock_guard lock(mutex_);
  const auto it = listings_.find(dir);
  if (it == listings_.end()) {
    // No orders for this directory: the second cold file of it reads them.
    make_room(unlisted_starts_, k_max_streams, dir);
    const auto [start, first] = unlisted_starts_.try_emplace(dir, unlisted_start{file, ++clock_});
    if (first || start->second.file == 0 || start->second.file == file || stopping_) return {};
    start->second.file = 0;  // scanning
    ++listing_scans_;
    pool_->submit([this, dir, file, scan] {
      std::optional<listing_orders> orders;
      if (!stopping_) {
        try {
          orders = scan();
        } catch (const std::exception&) {
          // A hint: without the orders the reader just gets no prefetch.
        }
      }
      if (orders) remember_listing(dir, std::move(*orders));
      std::lock_guard lock(mutex_);
      const auto l = listings_.find(dir);
      // A directory not remembered (too big, under two files) keeps its
      // entry at 0 and is not scanned again until that is forgotten.
      if (l != listings_.end()) {
        unlisted_starts_.erase(dir);
        // The file that asked counts as the reader's first cold read here.
        if (const auto place = place_of(l->second, file)) {
          make_room(cold_starts_, k_max_streams, dir);
          cold_starts_[dir] = cold_start{place->listing_index, place->name_index, ++clock_};
        }
      }
    });
    return {};
  }
  remembered_listing& l = it->second;
  const auto place = place_of(l, file);
  if (!place) return {};
  l.last_use = ++clock_;
  make_room(cold_starts_, k_max_streams, dir);
  const auto [start, first] = cold_starts_.try_emplace(dir);
  const cold_start previous = start->second;
  start->second = cold_start{place->listing_index, place->name_index, clock_};
  if (first || dir_streams_.contains(dir)) return {};
  const auto follows = [](std::size_t before, std::size_t now) {
    return now > before && now - before <= k_sibling_gap;
  };
  const std::vector<std::uint64_t>* order = nullptr;
  std::size_t index = 0;
  if (follows(previous.listing_index, place->listing_index)) {
    order = &l.orders.listing;
    index = place->listing_index;
  } else if (follows(previous.name_index, place->name_index)) {
    order = &l.orders.by_name;
    index = place->name_index;
  } else {
    return {};
  }
  const std::size_t from = index + 1;
  const std::size_t to = std::min(order->size(), from + max);
  if (from >= to) return {};
  return {order->begin() + static_cast<std::ptrdiff_t>(from),
          order->begin() + static_cast<std::ptrdiff_t>(to)};
}

void read_ahead::prefetch_siblings(std::uint64_t dir, std::vector<std::uint64_t> files) {
  if (files.empty()) return;
  std::shared_ptr<std::atomic<bool>> cancelled;
  {
    std::lock_guard lock(mutex_);
    if (dir_streams_.contains(dir)) return;  // running: it is ahead of this reader
    if (dir_streams_.size() >= k_max_dir_streams) {
      const auto oldest = std::min_element(
          dir_streams_.begin(), dir_streams_.end(),
          [](const auto& a, const auto& b) { return a.second.started < b.second.started; });
      oldest->second.cancelled->store(true);
      dir_streams_.erase(oldest);
    }
    cancelled = std::make_shared<std::atomic<bool>>(false);
    dir_streams_[dir] = dir_stream{cancelled, ++clock_};
  }
  ++sibling_prefetches_;
  auto run = std::make_shared<sibling_run>();
  run->dir = dir;
  run->cancelled = std::move(cancelled);
  pool_->submit([this, run, files = std::move(files)] {
    plan_siblings(run, files);
    sibling_job_done(*run);
  });
}

void read_ahead::plan_siblings(const std::shared_ptr<sibling_run>& run,
                               const std::vector<std::uint64_t>& files) {
  const auto keep_going = [this, &run] { return !stopping_.load() && !run->cancelled->load(); };
  std::vector<store::chunk_hash> batch;
  std::uint64_t batch_bytes = 0;
  std::uint64_t total = 0;
  // Pieces in listing order: the pool runs its jobs in order, so the
  // reader's next files are claimed first.
  const auto queue_piece = [&] {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    ++run->jobs;
    pool_->submit([this, run, hashes = std::move(batch)] {
      const auto still_wanted = [this, &run] {
        return !stopping_.load() && !run->cancelled->load();
      };
      try {
        if (still_wanted()) store_.load_chunks(hashes, still_wanted);
      } catch (const std::exception&) {
        // A prefetch is a hint: the read that needs these chunks reports errors.
      }
      sibling_job_done(*run);
    });
    total += batch_bytes;
    batch = {};
    batch_bytes = 0;
  };
  try {
    // Their extent lists in a few range scans, not one per file (a store
    // on PostgreSQL; nothing on the embedded one).
    store_.prefetch_extents(files);
    for (const std::uint64_t ino : files) {
      if (!keep_going() || total >= max_window_) break;
      for (const auto& [offset, extent] : store_.extents(ino, 0, k_sibling_file_bytes)) {
        if (batch.empty() || batch.back() != extent.hash) batch.push_back(extent.hash);
        batch_bytes += extent.length;
      }
      if (batch_bytes >= k_piece) queue_piece();
    }
    if (!batch.empty() && keep_going()) queue_piece();
  } catch (const std::exception&) {
    // As above: a lookup that fails ends the planning, not the reads.
  }
}

void read_ahead::sibling_job_done(sibling_run& run) {
  if (run.jobs.fetch_sub(1) != 1) return;
  std::lock_guard lock(mutex_);
  const auto it = dir_streams_.find(run.dir);
  if (it != dir_streams_.end() && it->second.cancelled == run.cancelled) dir_streams_.erase(it);
}

namespace {

std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto octal = [](char c) { return c >= '0' && c <= '7'; };
    if (s[i] == '\\' && s.size() - i >= 4 && octal(s[i + 1]) && octal(s[i + 2]) &&
        octal(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

}  // namespace

void raise_kernel_read_ahead(const std::string& mountpoint, unsigned kib) {
  // id parent major:minor root mountpoint options ... - fstype source super;
  // the newest mount on a path is listed last.
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line, device;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if (!(fields >> id >> parent >> dev >> root >> point)) continue;
    if (unescape_mountinfo(point) == mountpoint) device = dev;
  }
  if (device.empty()) {
    log_debug("read-ahead: " + mountpoint + " not found in /proc/self/mountinfo");
    return;
  }
  const std::string knob = "/sys/class/bdi/" + device + "/read_ahead_kb";
  std::ofstream out(knob);
  out << kib << '\n';
  out.flush();
  if (!out) log_debug("read-ahead: cannot write " + knob + " (not root?); kernel default kept");
}

}  // namespace densefs::fs
