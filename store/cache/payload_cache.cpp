#include "store/cache/payload_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "store/error.h"
#include "store/log.h"

namespace densefs::store {
namespace fs = std::filesystem;

namespace {

// "00000012" and "4096": the names the cache gives packs and offsets.
std::optional<std::uint64_t> parse_number(const std::string& name, std::size_t max_digits) {
  if (name.empty() || name.size() > max_digits ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoull(name);
}

std::string pack_number(std::uint32_t pack) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08u", pack);
  return buf;
}

void make_private_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw store_error(ec.value(), "cannot create " + dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
}

}  // namespace

payload_cache::payload_cache(fs::path dir, std::uint64_t capacity, pack_evicted on_evict,
                             bool read_only)
    : dir_(std::move(dir)),
      capacity_(capacity),
      on_evict_(std::move(on_evict)),
      read_only_(read_only) {
  if (read_only_) return;
  make_private_dir(dir_);
  make_private_dir(dir_ / "packs");
  make_private_dir(dir_ / "records");
  struct found {
    entry e;
    std::int64_t mtime_ns;
  };
  std::vector<found> entries;
  const auto mtime_of = [](const struct stat& sb) {
    return static_cast<std::int64_t>(sb.st_mtim.tv_sec) * 1'000'000'000 + sb.st_mtim.tv_nsec;
  };
  std::error_code ec;
  for (fs::directory_iterator it(dir_ / "packs", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    const auto id =
        name.ends_with(".pack") ? parse_number(name.substr(0, name.size() - 5), 8) : std::nullopt;
    if (!id) {
      fs::remove(it->path(), ec);  // a temporary file of a run that stopped
      ec.clear();
      continue;
    }
    entries.push_back(
        {{static_cast<std::uint32_t>(*id), k_whole_pack, static_cast<std::uint64_t>(sb.st_size)},
         mtime_of(sb)});
  }
  ec.clear();
  for (fs::directory_iterator it(dir_ / "records", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string pack_name = it->path().filename().string();
    const auto id = parse_number(pack_name, 8);
    if (!id || !it->is_directory()) {
      fs::remove_all(it->path(), ec);  // a temporary file of a run that stopped
      ec.clear();
      continue;
    }
    std::error_code ec2;
    for (fs::directory_iterator r(it->path(), ec2), rend; !ec2 && r != rend; r.increment(ec2)) {
      struct stat sb {};
      const auto offset = parse_number(r->path().filename().string(), 20);
      if (!offset || ::lstat(r->path().c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fs::remove(r->path(), ec2);
        ec2.clear();
        continue;
      }
      entries.push_back(
          {{static_cast<std::uint32_t>(*id), *offset, static_cast<std::uint64_t>(sb.st_size)},
           mtime_of(sb)});
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const found& a, const found& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<std::uint32_t> evicted;
  {
    std::lock_guard lock(mutex_);
    for (const found& f : entries) insert_locked(f.e);
    evicted = evict_locked();
  }
  report(evicted);
}

fs::path payload_cache::pack_path(std::uint32_t pack) const {
  return dir_ / "packs" / (pack_number(pack) + ".pack");
}

fs::path payload_cache::record_path(std::uint32_t pack, std::uint64_t offset) const {
  return dir_ / "records" / pack_number(pack) / std::to_string(offset);
}

fs::path payload_cache::file_of(const entry& e) const {
  return e.offset == k_whole_pack ? pack_path(e.pack) : record_path(e.pack, e.offset);
}

void payload_cache::insert_locked(const entry& e) {
  erase_locked({e.pack, e.offset});
  lru_.push_back(e);
  index_[{e.pack, e.offset}] = std::prev(lru_.end());
  bytes_ += e.size;
}

void payload_cache::erase_locked(const key& k) {
  const auto it = index_.find(k);
  if (it == index_.end()) return;
  bytes_ -= it->second->size;
  lru_.erase(it->second);
  index_.erase(it);
}

std::vector<std::uint32_t> payload_cache::evict_locked() {
  std::vector<std::uint32_t> packs;
  while (bytes_ > capacity_ && !lru_.empty()) {
    const entry e = lru_.front();
    std::error_code ec;
    fs::remove(file_of(e), ec);
    erase_locked({e.pack, e.offset});
    if (e.offset == k_whole_pack) packs.push_back(e.pack);
  }
  return packs;
}

void payload_cache::report(const std::vector<std::uint32_t>& packs) const {
  if (on_evict_)
    for (const std::uint32_t p : packs) on_evict_(p);
}

std::optional<std::string> payload_cache::get_record(std::uint32_t pack, std::uint64_t offset) {
  if (!read_only_) {
    std::lock_guard lock(mutex_);
    const auto it = index_.find({pack, offset});
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.end(), lru_, it->second);
  }
  const fs::path path = record_path(pack, offset);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // evicted meanwhile
  struct stat sb {};
  std::string out;
  if (::fstat(fd, &sb) == 0 && sb.st_size > 0 && sb.st_size <= (256 << 20)) {
    out.resize(static_cast<std::size_t>(sb.st_size));
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    out.resize(done);
  }
  ::close(fd);
  if (out.empty()) return std::nullopt;
  return out;
}

void payload_cache::put_record(std::uint32_t pack, std::uint64_t offset, std::string_view record) {
  if (read_only_ || record.size() > capacity_) return;
  static std::atomic<std::uint64_t> counter{0};
  const fs::path final_path = record_path(pack, offset);
  const fs::path tmp =
      dir_ / "records" /
      ("tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)));
  try {
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw store_error(errno, std::strerror(errno));
    std::size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::write(fd, record.data() + done, record.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : ENOSPC;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw store_error(e, std::strerror(e));
      }
      done += static_cast<std::size_t>(n);
    }
    // No fsync: a record torn by a power loss fails its check when read and
    // is fetched again.
    ::close(fd);
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      throw store_error(e, std::strerror(e));
    }
  } catch (const store_error& e) {
    log_error("payload cache: cannot keep " + final_path.string() + ": " + e.what());
    return;
  }
  std::vector<std::uint32_t> evicted;
  {
    std::lock_guard lock(mutex_);
    insert_locked({pack, offset, record.size()});
    evicted = evict_locked();
  }
  report(evicted);
}

void payload_cache::drop_record(std::uint32_t pack, std::uint64_t offset) {
  if (read_only_) return;
  std::lock_guard lock(mutex_);
  std::error_code ec;
  fs::remove(record_path(pack, offset), ec);
  erase_locked({pack, offset});
}

void payload_cache::add_pack(std::uint32_t pack, std::uint64_t size) {
  if (read_only_) return;
  std::vector<std::uint32_t> evicted;
  {
    std::lock_guard lock(mutex_);
    insert_locked({pack, k_whole_pack, size});
    evicted = evict_locked();
  }
  report(evicted);
}

void payload_cache::touch_pack(std::uint32_t pack) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find({pack, k_whole_pack});
  if (it != index_.end()) lru_.splice(lru_.end(), lru_, it->second);
}

void payload_cache::forget_pack(std::uint32_t pack) {
  if (read_only_) return;
  std::lock_guard lock(mutex_);
  std::error_code ec;
  fs::remove(pack_path(pack), ec);
  erase_locked({pack, k_whole_pack});
  fs::remove_all(dir_ / "records" / pack_number(pack), ec);
  for (auto it = index_.lower_bound({pack, 0}); it != index_.end() && it->first.first == pack;) {
    bytes_ -= it->second->size;
    lru_.erase(it->second);
    it = index_.erase(it);
  }
}

std::uint64_t payload_cache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace densefs::store
