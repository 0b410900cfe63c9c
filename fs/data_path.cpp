// The data path (data_path.h): staging, encoding, reads of staged and
// committed bytes, truncation planning; the group commit's steps are in
// group_commit.cpp.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "fs/committed_bytes.h"
#include "fs/data_path.h"
#include "fs/group_commit.h"
#include "store/log.h"

namespace densefs::fs {
namespace {

constexpr std::uint64_t k_slot = store::k_chunk_size;
// A file with more dirty (not yet submitted) slots than this has them all
// submitted: random writes over a huge file must not pin gigabytes.
constexpr std::size_t k_max_dirty_slots_per_file = 8;
// A write at least this large is taken as part of a sequential stream.
constexpr std::size_t k_stream_write_bytes = 128u << 10;

bool all_zero(std::string_view data) {
  // Compare 8 bytes at a time; holes are not stored.
  std::size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, data.data() + i, 8);
    if (w != 0) return false;
  }
  for (; i < data.size(); ++i)
    if (data[i] != 0) return false;
  return true;
}

// The type of a file whose first bytes are `head`: a magic number wins;
// otherwise the name it was created with (text formats have no magic);
// otherwise what the bytes look like.
codec::file_type classify_file(std::string_view head, codec::file_type name_type) {
  head = head.substr(0, codec::k_classify_head_bytes);
  const codec::file_type by_content = codec::classify(head, {});
  const bool guessed = by_content == codec::file_type::text ||
                       by_content == codec::file_type::other ||
                       by_content == codec::file_type::unknown;
  if (guessed && name_type != codec::file_type::unknown) return name_type;
  return by_content;
}

}  // namespace

data_path::data_path(const mount_options& options, store::store& store, worker_pool& encoders,
                     host& host, write_back::settle_fn settle)
    : options_(options),
      store_(store),
      encoders_(encoders),
      host_(host),
      // Also on a read-only mount: `mount -o remount,rw` may make it writable.
      committer_(std::make_unique<write_back>(
          options.commit_interval,
          [this](std::vector<encoded_slot>& group) { commit_group(group); }, std::move(settle))) {}

data_path::~data_path() = default;

bool data_path::encodes_fast(const codec::codec_options& options) {
  return options.preferred == codec::codec_id::raw ||
         (options.preferred == codec::codec_id::zstd && options.zstd_level <= 3);
}

data_path::chunk_encoding data_path::encoding_for(codec::file_type type, std::string_view plain,
                                                  bool small_file) const {
  chunk_encoding how;
  how.options = store_.policy().for_type(type);
  // Ingest fast, compress hard later: Lepton runs at a few MB/s per core,
  // so a JPEG is stored at once with fast zstd and queued for the
  // background re-encoder, which swaps the payload when Lepton is done.
  if (how.options.preferred == codec::codec_id::lepton && !options_.lepton_sync &&
      codec::starts_like_jpeg(plain)) {
    const double min_savings = how.options.min_savings;
    how.options = codec::codec_options{};
    how.options.preferred = codec::codec_id::zstd;
    how.options.zstd_level = 1;
    how.options.min_savings = min_savings;
    how.queue_recompress = true;
  } else if (how.options.preferred == codec::codec_id::deflate &&
             (codec::starts_like_gzip(plain) || plain.starts_with("\x89PNG\r\n\x1a\n") ||
              plain.starts_with("PK\x03\x04"))) {
    // The deflate codec is slower still (preflate analyses ~3 MB/s of
    // plain text per core) and always runs in the background. A gzip
    // file's or a PNG's bytes are deflate data that zstd cannot shrink:
    // stored raw until then, at no CPU cost.
    const double min_savings = how.options.min_savings;
    how.options = codec::codec_options{};
    how.options.preferred = codec::codec_id::raw;
    how.options.min_savings = min_savings;
    how.queue_recompress = true;
  } else if (options_.fast_ingest || small_file) {
    // The same for every slow codec (-o ingest=fast, or a small file with
    // -o ingest=auto). The queue is persisted: without re-encoder threads
    // (recompress_threads=0) the work waits for a later mount.
    if (auto fast = codec::fast_ingest_options(how.options)) {
      how.options = *fast;
      how.queue_recompress = true;
      how.fast_ingest = true;
    }
  }
  return how;
}

std::uint64_t data_path::drop_extents(store::transaction& txn, std::uint64_t ino,
                                      const store::extent_list& extents) const {
  std::vector<store::chunk_hash> hashes;
  for (const auto& [off, ext] : extents) hashes.push_back(ext.hash);
  const store::chunk_records records = store_.get_chunks(hashes);
  std::uint64_t stored = 0;
  for (const auto& [off, ext] : extents) {
    if (const auto& chunk = *records.find(ext.hash)) stored += chunk->stored_size;
    txn.delete_extent(ino, off);
    txn.unref_chunk(ext.hash);
  }
  return stored;
}

std::uint64_t data_path::drop_extents(store::transaction& txn, std::uint64_t ino,
                                      std::uint64_t begin, std::uint64_t end) const {
  store::extent_list ours = store_.extents(ino, begin, end);
  // One that starts before the range is not ours to drop.
  std::erase_if(ours, [&](const auto& e) { return e.first < begin; });
  return drop_extents(txn, ino, ours);
}

namespace {

// Zeros for holes and for bytes past an extent's end, pointed to by replies.
const char* zeros_for_reply() {
  static const std::string zeros(1u << 20, '\0');
  return zeros.data();
}
constexpr std::size_t k_zeros_for_reply = 1u << 20;

void add_zeros(read_gather& out, std::size_t n) {
  while (n > 0) {
    const std::size_t take = std::min(n, k_zeros_for_reply);
    out.iov.push_back({const_cast<char*>(zeros_for_reply()), take});
    n -= take;
  }
}

}  // namespace

bool data_path::gather_data(node& n, std::uint64_t offset, std::size_t length, read_gather& out,
                            bool cached_only) {
  const std::uint64_t end = offset + length;
  std::uint64_t pos = offset;
  while (pos < end) {
    const std::uint64_t index = pos / k_slot;
    const std::uint64_t in_slot = pos % k_slot;
    const std::size_t take = static_cast<std::size_t>(std::min(k_slot - in_slot, end - pos));
    std::shared_ptr<const std::string> staged;
    std::size_t staged_from = in_slot;  // where this read's bytes start in `staged`
    if (auto it = n.slots.find(index); it != n.slots.end()) {
      if (const auto& dirty = it->second.dirty) {
        // Changes in place after the lock goes: a copy of the bytes this read
        // takes only, not of the whole 4 MiB slot.
        const std::size_t have =
            in_slot < dirty->size() ? std::min<std::size_t>(take, dirty->size() - in_slot) : 0;
        staged = std::make_shared<const std::string>(
            dirty->substr(std::min<std::size_t>(in_slot, dirty->size()), have));
        staged_from = 0;
      } else if (!it->second.in_flight.empty()) {
        staged = it->second.in_flight.rbegin()->second;  // immutable
      }
    }
    if (staged) {
      const std::size_t have = staged_from < staged->size()
                                   ? std::min<std::size_t>(take, staged->size() - staged_from)
                                   : 0;
      if (have) out.iov.push_back({const_cast<char*>(staged->data() + staged_from), have});
      add_zeros(out, take - have);
      out.hold.push_back(std::move(staged));
    } else {
      // Committed bytes: the chunks themselves, zeros between extents.
      std::uint64_t cursor = pos;
      const std::uint64_t stop = pos + take;
      for (const auto& [ext_offset, extent] : store_.extents(n.ino, pos, stop)) {
        auto chunk =
            cached_only ? store_.cached_chunk(extent.hash) : store_.read_chunk(extent.hash);
        if (!chunk) return false;
        if (std::uint64_t{extent.chunk_offset} + extent.length > chunk->size()) {
          throw store::store_error(EIO, "inode " + std::to_string(n.ino) + ": extent at " +
                                            std::to_string(ext_offset) + " exceeds chunk " +
                                            extent.hash.hex());
        }
        const std::uint64_t from = std::max(cursor, ext_offset);
        const std::uint64_t to = std::min(stop, ext_offset + extent.length);
        if (from >= to) continue;
        add_zeros(out, static_cast<std::size_t>(from - cursor));
        out.iov.push_back(
            {const_cast<char*>(chunk->data() + extent.chunk_offset + (from - ext_offset)),
             static_cast<std::size_t>(to - from)});
        out.hold.push_back(std::move(chunk));
        cursor = to;
      }
      add_zeros(out, static_cast<std::size_t>(stop - cursor));
    }
    pos += take;
  }
  return true;
}

bool data_path::read_data(node& n, std::uint64_t offset, std::size_t length, char* out,
                          bool cached_only) {
  // The pieces a reply would point to, copied out (copy_file_range).
  read_gather pieces;
  if (!gather_data(n, offset, length, pieces, cached_only)) return false;
  for (const auto& piece : pieces.iov) {
    std::memcpy(out, piece.iov_base, piece.iov_len);
    out += piece.iov_len;
  }
  return true;
}

void data_path::stage_write(std::unique_lock<std::mutex>& lock, node& n, std::uint64_t offset,
                            std::string_view data) {
  const std::uint64_t end = offset + data.size();
  if (offset == 0 && !data.empty()) n.type = classify_file(data, n.name_type);
  std::uint64_t pos = offset;
  while (pos < end) {
    const std::uint64_t index = pos / k_slot;
    const std::uint64_t slot_start = index * k_slot;
    const std::uint64_t in_slot = pos - slot_start;
    const std::size_t take = static_cast<std::size_t>(std::min(k_slot - in_slot, end - pos));
    staged_slot& s = n.slots[index];
    if (!s.dirty) {
      auto buffer = std::make_shared<std::string>();
      if (!s.in_flight.empty()) {
        *buffer = *s.in_flight.rbegin()->second;
      } else {
        // Committed bytes of this slot, unless this write replaces all of them.
        std::uint64_t committed_end = 0;
        for (const auto& [off, ext] : store_.extents(n.ino, slot_start, slot_start + k_slot))
          committed_end = std::max(committed_end, off + ext.length - slot_start);
        committed_end = std::min({committed_end, k_slot, n.size - std::min(n.size, slot_start)});
        if (committed_end > 0 && !(in_slot == 0 && take >= committed_end)) {
          buffer->resize(committed_end);
          read_committed(store_, n.ino, slot_start, committed_end, buffer->data());
        }
      }
      // A large write streams into this slot: give the buffer its full size
      // once, or growing 1 -> 2 -> 4 MiB copies 3 MiB per slot (measured:
      // 3% of the daemon's CPU on a 1 GiB write in 1 MiB writes).
      if (take >= k_stream_write_bytes) buffer->reserve(k_slot);
      s.dirty = std::move(buffer);
      s.dirty_gen = n.next_gen++;
      ++n.dirty_slots;
    }
    std::string& b = *s.dirty;
    if (b.size() < in_slot + take) b.resize(in_slot + take, '\0');
    std::memcpy(b.data() + in_slot, data.data() + (pos - offset), take);
    pos += take;
    // A write that fills a slot to its end goes to the encoder now, so a
    // long sequential write is encoded while it streams in and never sits
    // whole in memory. (Not "the buffer is 4 MiB": an overwrite inside a
    // loaded slot would then re-encode 4 MiB on every write.)
    if (in_slot + take == k_slot) submit_slot(n, index);
  }
  if (end > n.size) {
    n.size = end;
    std::lock_guard meta(host_.meta_mutex());
    n.record.size = end;
  }
  // After the bytes are staged: a READ served before this saw older bytes,
  // and the next open drops what the kernel cached from it.
  n.bytes_changed();
  if (n.dirty_slots > k_max_dirty_slots_per_file) {
    for (auto& [index, s] : n.slots)
      if (s.dirty) submit_slot(n, index);
  }
}

// The last bytes of slot index - 1 that the chunker looks at before slot
// `index` (codec::chunk_context_bytes), if that slot is staged: a copy, as
// its buffer may change. Null when it is not staged (the job reads what is
// committed) or when the chunker needs no context.
std::shared_ptr<const std::string> data_path::staged_context(node& n, std::uint64_t index) const {
  const std::size_t want = codec::chunk_context_bytes(store_.policy().chunker_for(n.type));
  if (index == 0 || want == 0) return nullptr;
  const auto it = n.slots.find(index - 1);
  if (it == n.slots.end()) return nullptr;
  const std::string* prev = it->second.dirty.get();
  if (!prev && !it->second.in_flight.empty()) prev = it->second.in_flight.rbegin()->second.get();
  if (!prev) return nullptr;
  // Bytes past the staged buffer and below this slot are zeros.
  auto out = std::make_shared<std::string>(want, '\0');
  const std::uint64_t from = k_slot - want;
  if (prev->size() > from) {
    std::memcpy(out->data(), prev->data() + from, std::min<std::size_t>(prev->size() - from, want));
  }
  return out;
}

void data_path::submit_slot(node& n, std::uint64_t index) {
  encoders_.submit(take_slot(n, index), &n);
}

std::function<void()> data_path::take_slot(node& n, std::uint64_t index) {
  staged_slot& s = n.slots.at(index);
  std::shared_ptr<const std::string> data = std::move(s.dirty);
  s.dirty.reset();
  const std::uint64_t gen = s.dirty_gen;
  s.in_flight.emplace(gen, data);
  ++s.jobs;
  n.running_jobs.insert(gen);
  --n.dirty_slots;
  ++n.in_flight_slots;
  {
    std::lock_guard lock(staging_mutex_);
    in_flight_bytes_ += data->size();
  }
  // A small file, complete when its only slot is submitted (at close):
  // -o ingest=auto ingests it fast.
  const bool small_file =
      index == 0 && n.size <= options_.fast_ingest_small_bytes && n.size <= data->size();
  return [this, np = n.shared_from_this(), index, gen, data, type = n.type,
          before = staged_context(n, index),
          small_file] { encode_slot(np, index, gen, data, type, before, small_file); };
}

void data_path::encode_slot_chunk(slot_chunk& c, const std::string& data, codec::file_type type,
                                  bool small_file) const {
  const std::string_view plain = std::string_view(data).substr(c.offset, c.length);
  const chunk_encoding how = encoding_for(type, plain, small_file);
  c.queue_recompress = how.queue_recompress;
  store_.encode_into(*c.prepared, plain, how.options);
  // What zstd -1 left raw, a stronger codec would hardly shrink: not
  // queued. (A JPEG zstd left raw is: Lepton saves ~20% on it.)
  if (how.fast_ingest && c.prepared->encoded && c.prepared->encoded->codec == codec::codec_id::raw)
    c.queue_recompress = false;
}

void data_path::encode_slot(std::shared_ptr<node> n, std::uint64_t index, std::uint64_t gen,
                            std::shared_ptr<const std::string> data, codec::file_type type,
                            std::shared_ptr<const std::string> before, bool small_file) {
  // CPU work, with no lock held: cut the slot into chunks (the policy's
  // chunker for this type), hash them, and encode those the store does not
  // have yet. A rewritten slot is cut again whole; chunks away from the
  // change come out the same and are found, not stored again. The commit
  // comes later, in a group (commit_group).
  encoded_slot e;
  e.n = std::move(n);
  e.index = index;
  e.gen = gen;
  e.type = type;
  e.small_file = small_file;
  const codec::chunker_spec& chunker = store_.policy().chunker_for(type);
  if (!before && index > 0 && codec::chunk_context_bytes(chunker) > 0) {
    // The previous slot as committed. Only where cuts fall depends on it,
    // never what is stored, so a read that fails just goes without.
    try {
      auto context = std::make_shared<std::string>(codec::chunk_context_bytes(chunker), '\0');
      read_committed(store_, e.n->ino, index * k_slot - context->size(), context->size(),
                     context->data());
      before = std::move(context);
    } catch (const std::exception&) {
    }
  }
  try {
    std::size_t begin = 0;
    std::vector<store::chunk_hash> hashes;
    for (const std::size_t end : codec::chunk_ends(
             *data, chunker, before ? std::string_view(*before) : std::string_view())) {
      slot_chunk c;
      c.offset = static_cast<std::uint32_t>(begin);
      c.length = static_cast<std::uint32_t>(end - begin);
      const std::string_view plain = std::string_view(*data).substr(begin, end - begin);
      if (!all_zero(plain)) {
        c.prepared = store_.name_chunk(plain);
        // Dedup before encoding: a chunk the store has costs a hash and
        // its share of one read for the slot instead of a compression. Not
        // asked for a small file's chunk (at most 1 MiB, -o ingest=auto)
        // where a read is a round trip to a server and its encoding is
        // fast (zstd, raw; not Lepton with -o lepton_sync): that costs less
        // than the wait, and the group's commit finds a chunk stored all
        // the same (only the encoding is wasted).
        if (!small_file || !store_.reads_are_round_trips() ||
            !encodes_fast(encoding_for(type, plain, small_file).options))
          hashes.push_back(c.prepared->hash);
      }
      e.chunks.push_back(std::move(c));
      begin = end;
    }
    const store::chunk_records stored = store_.get_chunks(hashes);
    for (slot_chunk& c : e.chunks) {
      if (!c.prepared) continue;
      const std::optional<store::chunk_record>* rec = stored.find(c.prepared->hash);
      if (!rec || !*rec) encode_slot_chunk(c, *data, type, small_file);
    }
  } catch (const std::exception& ex) {
    log_error("inode " + std::to_string(e.n->ino) + ": encoding failed: " + ex.what());
    e.error = EIO;
  }
  e.data = std::move(data);
  if (committer_) {
    committer_->add(std::move(e));
  } else {
    // At unmount, after the committer stopped (nothing should be left to
    // encode then, but a version is never dropped).
    std::vector<encoded_slot> alone;
    alone.push_back(std::move(e));
    commit_group(alone);
  }
}

store::payloads_ahead data_path::write_payloads_ahead(const std::vector<encoded_slot>& group,
                                                      const store::chunk_records* known) {
  // The payloads a group's commit may store go to the packs first, with no
  // lock held: every lookup and getattr waits on the metadata mutex, and none may
  // wait behind a pack write. Left out: versions that cannot commit (a
  // newer one of the slot later in the group, a failed encoding, a file
  // deleted before its data landed), whose payloads would be dead bytes.
  // What this misses, the commit writes itself.
  std::set<const node*> gone;
  {
    std::lock_guard meta(host_.meta_mutex());
    for (const encoded_slot& e : group)
      if (e.n->purged || (e.n->record.nlink == 0 && e.n->opens == 0)) gone.insert(e.n.get());
  }
  std::vector<const store::prepared_chunk*> chunks;
  for (std::size_t i = 0; i < group.size(); ++i) {
    const encoded_slot& e = group[i];
    const bool newer_here =
        i + 1 < group.size() && group[i + 1].n == e.n && group[i + 1].index == e.index;
    if (newer_here || e.error != 0 || gone.contains(e.n.get())) continue;
    for (const slot_chunk& c : e.chunks)
      if (c.prepared && c.prepared->encoded) chunks.push_back(&*c.prepared);
  }
  try {
    return store_.write_payloads_ahead(chunks, known);
  } catch (const std::exception& ex) {
    // The disk is full, say: the commit writes them under its lock and
    // reports what it meets.
    log_debug(std::string("writing a group's payloads ahead of its commit: ") + ex.what());
    return {};
  }
}

void data_path::commit_group(std::vector<encoded_slot>& group) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t slots = group.size();
  group_commit(*this, group).run();
  group_commits_.add(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count()));
  group_slots_.fetch_add(slots, std::memory_order_relaxed);
}

std::size_t data_path::staged_bytes() const {
  std::lock_guard staging(staging_mutex_);
  return in_flight_bytes_;
}

void data_path::release_in_flight(std::size_t bytes) {
  {
    std::lock_guard staging(staging_mutex_);
    in_flight_bytes_ -= bytes;
  }
  staging_cv_.notify_all();
}

void data_path::wait_for_staging_room(std::unique_lock<std::mutex>& lock, node& n) {
  {
    std::lock_guard staging(staging_mutex_);
    if (in_flight_bytes_ <= options_.max_staged_bytes) return;
  }
  // Wait without holding the file's lock: the commits we wait for need it.
  // Room comes back only as groups commit: they go at once meanwhile.
  lock.unlock();
  {
    write_back::urgent hurry(committer_.get());
    std::unique_lock staging(staging_mutex_);
    staging_cv_.wait(staging, [this] { return in_flight_bytes_ <= options_.max_staged_bytes; });
  }
  lock.lock();
}

void data_path::wait_in_flight(std::unique_lock<std::mutex>& lock, node& n) {
  if (n.in_flight_slots == 0) return;
  write_back::urgent hurry(committer_.get());
  n.data_cv.wait(lock, [&] { return n.in_flight_slots == 0; });
}

int data_path::flush_data(std::unique_lock<std::mutex>& lock, node& n, bool take_error) {
  submit_dirty_slots(n);
  const std::uint64_t staged_so_far = n.next_gen - 1;
  const auto landed = [&] {
    return n.running_jobs.empty() || *n.running_jobs.begin() > staged_so_far;
  };
  if (!landed()) {
    // Do the work here rather than hand it off and wait to be woken: the
    // file's last queued slot encoding (a small file has just the one),
    // then the group commit holding it. Each hand-off to another thread
    // and back costs a wake-up, tens of microseconds on a busy 2-core
    // machine, and rsync renames every file it writes right after closing
    // it (docs/design.md, "Write-behind").
    lock.unlock();
    encoders_.run_one_queued(&n);
    if (committer_) committer_->commit_queued(&n);
    lock.lock();
  }
  if (!landed()) {
    write_back::urgent hurry(committer_.get());
    n.data_cv.wait(lock, landed);
  }
  // A failed commit keeps the data staged; once a retry stored it there is
  // nothing left to report.
  if (!n.has_staged()) n.write_error = 0;
  store_record_if_settled(n);
  return take_error ? std::exchange(n.write_error, 0) : n.write_error;
}

int data_path::write_behind(node& n, bool take_error) {
  // Write-behind: nothing here waits for an encode or a commit. The slots
  // go to the workers; their commit comes with a group (write_back.h).
  std::unique_lock lock(n.data_mutex);
  // Unless another client has the volume mounted: then close commits, so
  // that an open there sees the file whole (close-to-open, as NFS).
  if (store_.membership().others_mounted()) return flush_data(lock, n, take_error);
  submit_dirty_slots(n);
  store_record_if_settled(n);
  return take_error ? std::exchange(n.write_error, 0) : n.write_error;
}

std::optional<int> data_path::write_behind_here(node& n, bool take_error) {
  if (store_.membership().others_mounted() || record_unsettled(n)) return std::nullopt;
  submit_dirty_slots(n);
  return take_error ? std::exchange(n.write_error, 0) : n.write_error;
}

void data_path::submit_dirty_slots(node& n) {
  for (auto& [index, s] : n.slots)
    if (s.dirty) submit_slot(n, index);
}

void data_path::store_record_if_settled(node& n) {
  {
    // Most closes have nothing to store: they need not wait as a writer
    // for a commit on its way (a reader only looks).
    std::lock_guard meta(host_.meta_mutex().reading());
    if (!record_unsettled(n)) return;
  }
  std::lock_guard meta(host_.meta_mutex());
  store_record_if_settled_locked(n, while_committing::readers_pass);
}

bool data_path::record_unsettled(const node& n) const {
  if (n.write_error != 0 || n.has_staged() || n.purged) return false;
  return n.persisted_size != n.size || n.record_dirty || host_.new_file_ends(n, true);
}

void data_path::store_record_if_settled_locked(node& n, while_committing others) {
  if (n.write_error != 0 || n.has_staged() || n.purged) return;
  const bool record = n.persisted_size != n.size || n.record_dirty;
  // A new file whose last versions were obsolete here (a newer one landed
  // earlier) ends its being new now, once closed.
  const bool ends_new_file = host_.new_file_ends(n, true);
  if (!record && !ends_new_file) return;
  store::transaction txn;
  if (ends_new_file) txn.clear_new_file(n.ino);
  // An open file stays in the table (no reader loads its record from the
  // store meanwhile): readers may pass the round trip.
  if (n.opens == 0) others = while_committing::all_wait;
  host_.commit(
      txn, false,
      [&](store::transaction& txn) {
        if (!record) return;
        // Everything is committed: the persisted size may now be the real
        // one (a truncate that extended the file, an mtime from a write).
        store::inode_record r = host_.record_to_edit(n);
        r.size = n.size;
        txn.put_inode(r);
      },
      nullptr, others);
  if (record) {
    n.persisted_size = n.size;
    n.record_dirty = false;
  }
  if (ends_new_file) n.new_file = false;
}

std::uint64_t data_path::plan_truncate(node& n, std::uint64_t stored_bytes, std::uint64_t new_size,
                                       store::transaction& txn) {
  constexpr std::uint64_t k_end = std::numeric_limits<std::uint64_t>::max();
  for (const auto& [off, ext] : store_.extents(n.ino, new_size, k_end)) {
    if (off < new_size) {
      // The extent that straddles the new end shrinks; its chunk stays as is.
      store::extent_record shorter = ext;
      shorter.length = static_cast<std::uint32_t>(new_size - off);
      txn.put_extent(n.ino, off, shorter);
    }
  }
  const std::uint64_t dropped = drop_extents(txn, n.ino, new_size, k_end);
  return stored_bytes - std::min(stored_bytes, dropped);
}

void data_path::apply_truncate(node& n, std::uint64_t new_size) {
  for (auto it = n.slots.begin(); it != n.slots.end();) {
    const std::uint64_t slot_start = it->first * k_slot;
    staged_slot& s = it->second;
    if (s.dirty && slot_start >= new_size) {
      s.dirty.reset();
      --n.dirty_slots;
    } else if (s.dirty && s.dirty->size() > new_size - slot_start) {
      s.dirty->resize(new_size - slot_start);
    }
    if (s.empty())
      it = n.slots.erase(it);
    else
      ++it;
  }
  n.size = new_size;
  n.bytes_changed();
}

}  // namespace densefs::fs
