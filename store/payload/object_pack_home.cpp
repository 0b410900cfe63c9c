#include "store/payload/object_pack_home.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>
#include <tuple>

#include "store/error.h"
#include "store/log.h"
#include "store/records.h"

namespace densefs::store {
namespace fs = std::filesystem;

namespace {

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

object_pack_home::object_pack_home(metadata_engine& engine, batched_reader& reader, options o)
    : engine_(engine),
      reader_(reader),
      options_(std::move(o)),
      objects_(options_.objects),
      staging_dir_(options_.cache_dir / "staging"),
      files_([this](std::uint32_t id) { return cache_->pack_path(id); }) {
  // Packs left in staging by a run that stopped were never uploaded, so no
  // index entry names them (a commit naming a pack waits for its upload):
  // they are only dead bytes. (Not by a read-only open: the volume may be
  // mounted.)
  std::error_code ec;
  if (!options_.read_only) fs::remove_all(staging_dir_, ec);
  cache_ = std::make_unique<payload_cache>(
      options_.cache_dir, options_.cache_bytes, [this](std::uint32_t id) { files_.forget(id); },
      options_.read_only && !options_.fill_cache);
}

std::string object_pack_home::location(std::uint32_t id) const {
  return pack_object_name(id) + " in " + objects_->where();
}

std::uint32_t object_pack_home::allocate_pack_id() {
  // Read and written in one locked transaction: writers beside each other
  // on one volume take numbers from the same counter. The number is durable
  // before any pack of that name is uploaded.
  std::uint64_t next = 1;
  engine_.write_locked(
      k_counters_section,
      [&](locked_reads& reads, metadata_batch& batch) {
        const std::optional<std::string> v =
            reads.get(table::meta, k_next_pack_key, "the pack counter");
        next = 1;
        if (v) {
          if (v->size() != 8)
            throw store_error(EIO, "the pack counter of the volume is corrupt (" +
                                       std::to_string(v->size()) + " bytes, expected 8)");
          next = get_le(v->data(), 8);
        }
        if (next == 0 || next > 99'999'999)
          throw store_error(EIO, "the pack counter of the volume is " + std::to_string(next) +
                                     ", outside 1..99999999");
        std::string value(8, '\0');
        put_le(value.data(), next + 1, 8);
        batch.put(table::meta, k_next_pack_key, value);
      },
      true);
  return static_cast<std::uint32_t>(next);
}

std::shared_ptr<pack_file> object_pack_home::create() {
  make_private_directory(staging_dir_);
  const std::uint32_t id = allocate_pack_id();
  return files_.create(id, staging_dir_ / pack_file_name(id));
}

void object_pack_home::make_durable(packs_to_make_durable& p) {
  // Uploaded in order; one that fails stays (with the later ones) for the
  // next call, and the commit waiting for this one fails.
  while (!p.packs.empty()) {
    upload(*p.packs.front());
    p.packs.erase(p.packs.begin());
  }
  p.created = false;
}

void object_pack_home::upload(const pack_file& f) {
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0)
    throw store_error(errno, "uploading pack " + f.path.string() + ": " + errno_text(errno));
  std::string bytes;
  if (const int e = reader_.read_one(f.fd, 0, static_cast<std::uint32_t>(sb.st_size), bytes);
      e != 0)
    throw store_error(e, "uploading pack " + f.path.string() + ": " + errno_text(e));
  try {
    objects_->put(pack_object_name(f.id), bytes);
  } catch (const store_error& e) {
    throw store_error(EIO, "uploading pack " + pack_file_name(f.id) + ": " + e.what());
  }
  // Uploaded: the local file becomes a cache entry (the open descriptor
  // stays valid across the rename).
  const fs::path cached = cache_->pack_path(f.id);
  if (::rename(f.path.c_str(), cached.c_str()) == 0) {
    cache_->add_pack(f.id, bytes.size());
  } else {
    ::unlink(f.path.c_str());
    files_.forget(f.id);
  }
  std::lock_guard lock(sizes_mutex_);
  if (sizes_)
    (*sizes_)[f.id] = bytes.size();
  else
    changed_before_listing_[f.id] = bytes.size();
}

void object_pack_home::fail_read(const chunk_hash& hash, std::uint32_t pack,
                                 const std::string& why) const {
  throw_pack_read_error(hash, location(pack), why);
}

std::optional<std::string> object_pack_home::cached_record(const chunk_hash& hash,
                                                           const pack_ref& ref) {
  std::optional<std::string> cached = cache_->get_record(ref.pack, ref.offset);
  if (!cached) return std::nullopt;
  if (record_problem(hash, ref, *cached).empty()) return cached;
  // Damaged on the local disk: fetched again.
  log_error("payload cache: the cached record of chunk " + hash.hex() + " (pack " +
            pack_file_name(ref.pack) + ", offset " + std::to_string(ref.offset) +
            ") is damaged; fetching it again");
  cache_->drop_record(ref.pack, ref.offset);
  return std::nullopt;
}

std::vector<std::string> object_pack_home::fetch_run(std::span<const chunk_hash> hashes,
                                                     std::span<const pack_ref> refs) {
  const pack_ref& first = refs.front();
  // While the service is known to be down, fail at once: a read would
  // otherwise wait out the retries for each of its records, and the kernel
  // and the read-ahead ask again for the same ones.
  if (steady_ms() < down_until_.load()) {
    std::lock_guard lock(down_mutex_);
    fail_read(hashes.front(), first.pack, "not fetched: " + down_why_);
  }
  const std::uint64_t bytes = refs.back().offset + refs.back().length - first.offset;
  std::string run;
  try {
    run = objects_->get_range(pack_object_name(first.pack), first.offset,
                              static_cast<std::uint32_t>(bytes));
  } catch (const store_error& e) {
    if (e.error_number() == EIO) {
      std::lock_guard lock(down_mutex_);
      down_why_ =
          std::string(e.what()) + " (within the last " + std::to_string(k_down_ms / 1000) + " s)";
      down_until_ = steady_ms() + k_down_ms;
    }
    fail_read(hashes.front(), first.pack, e.what());
  }
  std::vector<std::string> records;
  records.reserve(refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    std::string record = run.substr(refs[i].offset - first.offset, refs[i].length);
    // Checked before it is used or cached: what the object store returns
    // is untrusted like any stored byte.
    if (const std::string why = record_problem(hashes[i], refs[i], record); !why.empty())
      fail_read(hashes[i], refs[i].pack, why);
    cache_->put_record(refs[i].pack, refs[i].offset, record);
    records.push_back(std::move(record));
  }
  return records;
}

bool object_pack_home::fetch_whole_pack(std::uint32_t id) {
  {
    std::lock_guard lock(reads_mutex_);
    if (reads_[id]++ == 0) return false;  // the first read of it: its records only
  }
  std::lock_guard lock(whole_pack_fetch_mutex_);
  if (files_.get(id)) return true;  // another read fetched it meanwhile
  if (steady_ms() < down_until_.load()) return false;
  try {
    const std::optional<std::uint64_t> size = objects_->size(pack_object_name(id));
    if (!size || *size > k_whole_pack_bytes || 4 * *size > cache_->capacity() ||
        cache_->read_only())
      return false;
    const std::string bytes =
        objects_->get_range(pack_object_name(id), 0, static_cast<std::uint32_t>(*size));
    // Written aside, then renamed: a file in packs/ is always whole. Not
    // synced: the cache is never authoritative, and every record read from
    // it is checked like any other.
    const fs::path path = cache_->pack_path(id);
    const fs::path part = path.string() + ".part";
    const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw store_error(errno, part.string() + ": " + errno_text(errno));
    std::string_view rest = bytes;
    while (!rest.empty()) {
      const ssize_t n = ::write(fd, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::close(fd);
        ::unlink(part.c_str());
        throw store_error(e, part.string() + ": " + errno_text(e));
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (::rename(part.c_str(), path.c_str()) != 0) {
      const int e = errno;
      ::unlink(part.c_str());
      throw store_error(e, path.string() + ": " + errno_text(e));
    }
    cache_->add_pack(id, bytes.size());
  } catch (const store_error& e) {
    // Its records come with ranged GETs, which report a service that is down.
    log_debug("payload cache: pack " + pack_file_name(id) + " not fetched whole: " + e.what());
    return false;
  }
  return files_.get(id) != nullptr;
}

std::vector<std::string> object_pack_home::fetch(std::span<const chunk_hash> hashes,
                                                 std::span<const pack_ref> refs) {
  // Records from the cache, else from the object store: records that follow
  // each other in a pack (small files written together) in one ranged GET
  // of at most k_max_fetch_bytes, several GETs at once (a GET's time is
  // mostly waiting for the service).
  std::vector<std::string> out(refs.size());
  std::vector<std::size_t> missing;
  for (std::size_t k = 0; k < refs.size(); ++k) {
    if (std::optional<std::string> record = cached_record(hashes[k], refs[k]))
      out[k] = std::move(*record);
    else
      missing.push_back(k);
  }
  std::sort(missing.begin(), missing.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(refs[a].pack, refs[a].offset) < std::tie(refs[b].pack, refs[b].offset);
  });
  // Packs read from before come whole (fetch_whole_pack): their records
  // from the local copy, the rest with ranged GETs.
  {
    std::vector<std::size_t> ranged;
    std::map<std::uint32_t, std::shared_ptr<pack_file>> whole;
    for (const std::size_t k : missing) {
      auto [it, fresh] = whole.try_emplace(refs[k].pack);
      if (fresh && fetch_whole_pack(refs[k].pack)) it->second = files_.get(refs[k].pack);
      if (!it->second) {
        ranged.push_back(k);
        continue;
      }
      out[k] =
          read_checked_record(reader_, *it->second, hashes[k], refs[k], location(refs[k].pack));
    }
    missing = std::move(ranged);
  }
  cache_hits_.fetch_add(refs.size() - missing.size(), std::memory_order_relaxed);
  cache_misses_.fetch_add(missing.size(), std::memory_order_relaxed);
  std::vector<std::vector<std::size_t>> runs;
  std::uint64_t run_bytes = 0;
  for (const std::size_t k : missing) {
    const pack_ref& r = refs[k];
    const pack_ref* last = runs.empty() ? nullptr : &refs[runs.back().back()];
    if (last && last->pack == r.pack && last->offset + last->length == r.offset &&
        run_bytes + r.length <= k_max_fetch_bytes) {
      runs.back().push_back(k);
      run_bytes += r.length;
    } else if (!last || last->pack != r.pack || last->offset != r.offset) {
      runs.push_back({k});
      run_bytes = r.length;
    } else {
      runs.back().push_back(k);  // the same record twice in one read
    }
  }
  // The first failure ends the read: the runs not yet asked for are not
  // (each would wait out its own retries when the service is down).
  std::vector<std::exception_ptr> failures(runs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (std::size_t n; !failed.load() && (n = next.fetch_add(1)) < runs.size();) {
      try {
        std::vector<chunk_hash> run_hashes;
        std::vector<pack_ref> run_refs;
        for (const std::size_t k : runs[n]) {
          if (!run_refs.empty() && run_refs.back() == refs[k]) continue;
          run_hashes.push_back(hashes[k]);
          run_refs.push_back(refs[k]);
        }
        std::vector<std::string> records = fetch_run(run_hashes, run_refs);
        std::size_t r = 0;
        for (std::size_t i = 0; i < runs[n].size(); ++i) {
          const std::size_t k = runs[n][i];
          if (i > 0 && refs[runs[n][i - 1]] == refs[k]) {
            out[k] = out[runs[n][i - 1]];
            continue;
          }
          out[k] = std::move(records[r++]);
        }
      } catch (...) {
        failures[n] = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> helpers;
  const std::size_t extra =
      runs.empty() ? 0 : std::min<std::size_t>(runs.size(), k_parallel_fetches) - 1;
  for (std::size_t t = 0; t < extra; ++t) helpers.emplace_back(work);
  if (!runs.empty()) work();
  for (std::thread& t : helpers) t.join();
  for (const std::exception_ptr& e : failures)
    if (e) std::rethrow_exception(e);
  return out;
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> object_pack_home::sizes() const {
  {
    std::lock_guard lock(sizes_mutex_);
    if (sizes_) return {sizes_->begin(), sizes_->end()};
  }
  std::map<std::uint32_t, std::uint64_t> sizes;
  try {
    for (const object_store::object_info& o : objects_->list("packs/"))
      if (const std::optional<std::uint32_t> id = pack_id_of_object(o.name)) sizes[*id] = o.size;
  } catch (const store_error& e) {
    throw store_error(EIO, std::string("listing the volume's packs: ") + e.what());
  }
  std::lock_guard lock(sizes_mutex_);
  if (!sizes_) {  // else another listing finished first
    for (const auto& [id, size] : changed_before_listing_) {
      if (size)
        sizes[id] = *size;
      else
        sizes.erase(id);
    }
    changed_before_listing_.clear();
    sizes_ = std::move(sizes);
  }
  return {sizes_->begin(), sizes_->end()};
}

std::optional<std::uint64_t> object_pack_home::known_bytes() const {
  std::lock_guard lock(sizes_mutex_);
  if (!sizes_) return std::nullopt;
  std::uint64_t bytes = 0;
  for (const auto& [id, size] : *sizes_) bytes += size;
  return bytes;
}

void object_pack_home::read_whole(std::uint32_t id, std::uint64_t size,
                                  const std::function<void(std::string_view)>& use) {
  // Read into memory, so bounded: a pack is at most its cap plus one record.
  const std::uint64_t max_bytes =
      options_.pack_size_cap + k_pack_record_header_size + k_max_lepton_file_pack_payload;
  if (size > max_bytes)
    throw store_error(EIO, std::to_string(size) + " bytes, more than a pack can hold");
  // The cached copy of a pack this client uploaded, else the object.
  std::string bytes;
  if (std::error_code ec; fs::file_size(cache_->pack_path(id), ec) == size && !ec) {
    const int fd = ::open(cache_->pack_path(id).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (reader_.read_one(fd, 0, static_cast<std::uint32_t>(size), bytes) != 0) bytes.clear();
      ::close(fd);
    }
  }
  if (bytes.empty() && size > 0)
    bytes = objects_->get_range(pack_object_name(id), 0, static_cast<std::uint32_t>(size));
  use(bytes);
}

void object_pack_home::remove(std::uint32_t id) {
  try {
    objects_->remove(pack_object_name(id));
  } catch (const store_error& e) {
    throw store_error(EIO, std::string("gc: deleting pack ") + location(id) + ": " + e.what());
  }
  // The cached copy first: a read between the two would open it again.
  cache_->forget_pack(id);
  files_.forget(id);
  std::lock_guard lock(sizes_mutex_);
  if (sizes_)
    sizes_->erase(id);
  else
    changed_before_listing_[id] = std::nullopt;
}

void object_pack_home::check_reachable(std::uint32_t id) {
  (void)objects_->size(pack_object_name(id));
}

}  // namespace densefs::store
