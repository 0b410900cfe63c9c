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
  stopping_ = true;
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

bool read_ahead::note_cold_file(std::uint64_t dir, std::size_t index) {
  std::lock_guard lock(mutex_);
  make_room(cold_starts_, k_max_streams, dir);
  const auto [it, first] = cold_starts_.try_emplace(dir);
  const std::size_t previous = it->second.index;
  it->second = cold_start{index, ++clock_};
  return !first && index > previous && index - previous <= k_sibling_gap &&
         !dir_streams_.contains(dir);
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
  pool_->submit([this, dir, files = std::move(files), cancelled] {
    load_files(files, *cancelled);
    std::lock_guard lock(mutex_);
    const auto it = dir_streams_.find(dir);
    if (it != dir_streams_.end() && it->second.cancelled == cancelled) dir_streams_.erase(it);
  });
}

void read_ahead::load_files(const std::vector<std::uint64_t>& files,
                            const std::atomic<bool>& cancelled) {
  const auto keep_going = [&] { return !stopping_.load() && !cancelled.load(); };
  std::vector<store::chunk_hash> batch;
  std::uint64_t batch_bytes = 0;
  std::uint64_t total = 0;
  try {
    for (const std::uint64_t ino : files) {
      if (!keep_going() || total >= max_window_) break;
      for (const auto& [offset, extent] : store_.extents(ino, 0, k_sibling_file_bytes)) {
        if (batch.empty() || batch.back() != extent.hash) batch.push_back(extent.hash);
        batch_bytes += extent.length;
      }
      // A piece at a time, so the reader's next files arrive first.
      if (batch_bytes >= k_piece) {
        store_.load_chunks(batch, keep_going);
        total += batch_bytes;
        batch.clear();
        batch_bytes = 0;
      }
    }
    if (!batch.empty() && keep_going()) store_.load_chunks(batch, keep_going);
  } catch (const std::exception&) {
    // A prefetch is a hint: the read that needs these chunks reports errors.
  }
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
