// densefs analyze DIR [--json] [--codec SPEC] [--sample-bytes N | --full]
//                     [--threads N] [--cross-file-systems]
//
// A dry run: what densefs would store for an existing directory tree, per
// file type and per codec, without creating a store. Every file is
// classified by codec::classify on its first 4096 bytes and its name, and
// cut as a mount cuts it (docs/design.md): into 4 MiB slots, each slot into
// chunks by the policy's chunker for the file's type (codec::chunk_ends,
// with the end of the previous slot as its context). Every slot is read
// once: an all-zero chunk is a hole and costs nothing, a chunk whose
// SHA-256 was seen before is a duplicate and costs nothing. The remaining
// (unique) chunks are encoded with codec::encode_chunk under the policy,
// fallbacks and the raw guard included; or, to stay fast on large trees,
// those of a sample of the slots are (see plan_sample) and each type's
// ratio is extrapolated to its unsampled bytes.
//
// The figures do not depend on the number of threads or on timing: threads
// only read, hash and encode; which copy of a duplicate counts, and every
// sum, is decided afterwards in walk order.
//
// Not counted: metadata (the RocksDB records of inodes, extents and
// chunks) and RocksDB's own space amplification.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "codec/chunker.h"
#include "codec/classify.h"
#include "codec/policy.h"
#include "store/hash.h"
#include "store/records.h"
#include "tools/cli.h"
#include "tools/format.h"

namespace densefs::tools {
namespace {

using codec::file_type;
using nlohmann::json;

constexpr std::uint64_t k_chunk = store::k_chunk_size;

// Enough to estimate each type's ratio to within a percent or two on real
// trees, and a bounded wait: 256 MiB is ~50 s of Lepton on one core at the
// measured ~5 MB/s, a few seconds of Broccoli or zstd.
constexpr std::uint64_t k_default_sample_bytes = 256ull << 20;

// The sample is drawn with a fixed seed so the same tree gives the same
// figures from run to run.
constexpr std::uint64_t k_sample_seed = 0x64656e7365667321ull;

struct file_entry {
  std::string path;
  std::uint64_t size = 0;
  file_type type = file_type::unknown;
};

// A 4 MiB slot of a file: what the sample draws and a worker reads.
struct chunk_ref {
  std::uint32_t file = 0;
  std::uint32_t index = 0;  // slot number within the file
  std::uint32_t size = 0;   // as the walk saw the file
  bool sampled = false;
  // 1 / the probability that the sample took this chunk (1 when certain).
  double weight = 1.0;
};

struct walk_result {
  std::vector<file_entry> files;
  std::uint64_t unreadable = 0;     // files and directories we could not open or read
  std::uint64_t other_devices = 0;  // mount points not crossed
  std::uint64_t not_regular = 0;    // symlinks, devices, fifos, sockets
};

// --- Walking the tree -------------------------------------------------------

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Reads up to `n` bytes at `offset`; fewer only at the end of the file.
// Returns false on a read error (errno set).
bool read_at(int fd, std::uint64_t offset, std::size_t n, std::string& out) {
  out.resize(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return true;
}

// Depth first, each directory's entries in name order so runs are
// repeatable. Symbolic links are not followed; directories on another
// device are not entered unless cross_devices. Every regular file is opened
// once here to classify it from its first bytes.
walk_result walk(const std::string& root, bool cross_devices,
                 const std::function<void(const walk_result&)>& progress) {
  walk_result r;
  struct stat root_st {};
  if (::stat(root.c_str(), &root_st) != 0) {
    throw std::system_error(errno, std::generic_category(), root);
  }
  std::vector<std::string> pending = {root};
  std::string head;
  while (!pending.empty()) {
    const std::string dir = std::move(pending.back());
    pending.pop_back();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = dfd < 0 ? nullptr : ::fdopendir(dfd);
    if (d == nullptr) {
      if (dfd >= 0) ::close(dfd);
      ++r.unreadable;
      continue;
    }
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.emplace_back(e->d_name);
      }
    }
    std::sort(names.begin(), names.end());
    std::vector<std::string> subdirs;
    for (const auto& name : names) {
      struct stat st {};
      if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        ++r.unreadable;
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (!cross_devices && st.st_dev != root_st.st_dev) {
          ++r.other_devices;
        } else {
          subdirs.push_back(join(dir, name));
        }
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        ++r.not_regular;
        continue;
      }
      if (!cross_devices && st.st_dev != root_st.st_dev) {  // a bind-mounted file
        ++r.other_devices;
        continue;
      }
      const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        ++r.unreadable;
        continue;
      }
      const bool ok = read_at(fd, 0, codec::k_classify_head_bytes, head);
      ::close(fd);
      if (!ok) {
        ++r.unreadable;
        continue;
      }
      r.files.push_back(
          {join(dir, name), static_cast<std::uint64_t>(st.st_size), codec::classify(head, name)});
      if (r.files.size() % 1024 == 0) progress(r);
    }
    ::closedir(d);
    // Pushed in reverse so the first name is walked first.
    for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) pending.push_back(std::move(*it));
  }
  return r;
}

// --- The sample -------------------------------------------------------------

// The chance that the sample takes a chunk of `size` bytes: proportional to
// the square root of its size (see plan_sample), at most 1.
double inclusion_chance(double size, double c) {
  return std::min(1.0, c * std::sqrt(size));
}

// Expected bytes a sample with factor `c` takes from chunks of these sizes.
double expected_sample_bytes(const std::vector<double>& sizes, double c) {
  double e = 0;
  for (const double l : sizes) e += inclusion_chance(l, c) * l;
  return e;
}

// Decides which chunks get encoded, and with what weight each stands for
// the chunks that were not.
//
// Types the policy stores raw need no encoding (stored size = size) and are
// always complete. The byte budget is shared among the other types by
// water-filling: each gets an equal share; a type smaller than its share is
// encoded completely and leaves the rest to the others.
//
// Within a type, a chunk of l bytes is taken with a chance proportional to
// sqrt(l), scaled so that the expected bytes taken equal the type's share.
// That is the design that minimises the variance of the estimated stored
// size for a given number of bytes encoded, when chunks compress alike per
// byte (minimise sum s_i^2 / p_i with s_i ~ l_i under sum p_i * l_i = budget:
// p_i ~ sqrt(l_i)). The two obvious designs do badly on real trees, where
// chunks range from a few bytes to 4 MiB: an equal chance per chunk spends
// the budget on tiny files and leaves the large ones, which hold the bytes,
// to luck; a chance proportional to size spends it on a handful of 4 MiB
// chunks (on /usr/share's text, one or two draws).
//
// The chunks are taken systematically along their chances in a
// pseudo-random order (fixed seed): the sample size is close to its
// expectation, runs are repeatable, and the sample cannot fall into step with
// a pattern of the tree (e.g. always the first chunk of each file).
//
// The budget counts every selected chunk, including those that turn out to
// be holes or duplicates.
void plan_sample(std::vector<chunk_ref>& chunks, const std::vector<file_entry>& files,
                 const codec::policy& policy, std::uint64_t budget, bool full) {
  std::array<std::vector<std::size_t>, codec::k_file_type_count> by_type;
  std::array<std::uint64_t, codec::k_file_type_count> total{};
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const file_entry& f = files[chunks[i].file];
    if (full || policy.for_type(f.type).preferred == codec::codec_id::raw) {
      chunks[i].sampled = true;
      continue;
    }
    const auto t = static_cast<std::size_t>(f.type);
    by_type[t].push_back(i);
    total[t] += chunks[i].size;
  }

  std::vector<std::size_t> order;
  for (std::size_t t = 0; t < total.size(); ++t) {
    if (total[t] > 0) order.push_back(t);
  }
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return total[a] < total[b]; });
  std::uint64_t left = budget;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t t = order[k];
    const std::uint64_t share = std::min(total[t], left / (order.size() - k));
    left -= share;
    auto& list = by_type[t];
    if (share >= total[t]) {
      for (const auto i : list) chunks[i].sampled = true;
      continue;
    }
    std::mt19937_64 rng(k_sample_seed + t);
    std::shuffle(list.begin(), list.end(), rng);
    std::vector<double> sizes;
    sizes.reserve(list.size());
    for (const auto i : list) sizes.push_back(chunks[i].size);

    // The factor whose expected sample is the share, by bisection (the
    // expected bytes grow with it; at 1 every chunk is taken).
    double lo = 0, hi = 1;
    for (int iter = 0; iter < 200 && hi - lo > 1e-9 * hi; ++iter) {
      const double mid = (lo + hi) / 2;
      (expected_sample_bytes(sizes, mid) < static_cast<double>(share) ? lo : hi) = mid;
    }
    // Systematic: the chances laid end to end, a point every 1.0 from a
    // random start; a chunk is taken when a point falls in its stretch.
    double point = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    double at = 0;
    bool any = false;
    for (std::size_t j = 0; j < list.size(); ++j) {
      const double p = inclusion_chance(sizes[j], hi);
      if (point < at + p) {
        chunk_ref& c = chunks[list[j]];
        c.sampled = true;
        c.weight = 1.0 / p;
        any = true;
        point += 1.0;
      }
      at += p;
    }
    if (!any) chunks[list.front()].sampled = true;  // every type gets a ratio
  }
}

// --- Reading, hashing, encoding ---------------------------------------------

bool all_zero(std::string_view data) {
  static const char zeros[4096] = {};
  while (!data.empty()) {
    const std::size_t n = std::min(data.size(), sizeof zeros);
    if (std::memcmp(data.data(), zeros, n) != 0) return false;
    data.remove_prefix(n);
  }
  return true;
}

// What the read pass learned about one chunk of a slot.
struct chunk_piece {
  std::uint32_t bytes = 0;
  bool hole = false;  // all zeros: not stored
  store::chunk_hash hash;
};

// What the read pass learned about one slot: its chunks, in file order.
struct chunk_result {
  bool read = false;
  std::vector<chunk_piece> pieces;
};

// One encoding, shared by every copy of the content under the same codec
// options (copies in files of one type).
struct encoding {
  std::uint32_t stored = 0;
  codec::codec_id codec = codec::codec_id::raw;
  bool fell_back = false;
};

struct encoding_key {
  store::chunk_hash hash;
  std::uint8_t type = 0;
  bool operator==(const encoding_key&) const = default;
};

struct encoding_key_hasher {
  std::size_t operator()(const encoding_key& k) const {
    return store::chunk_hash_hasher{}(k.hash) ^ k.type;
  }
};

struct scan_state {
  scan_state(const std::vector<file_entry>& f, const std::vector<chunk_ref>& c,
             const codec::policy& p)
      : files(f), chunks(c), policy(p), results(c.size()) {}

  const std::vector<file_entry>& files;
  const std::vector<chunk_ref>& chunks;
  const codec::policy& policy;
  std::vector<chunk_result> results;  // index: slot; each written by one thread

  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<std::uint64_t> files_done{0};
  std::atomic<std::uint64_t> read_errors{0};  // files that failed between walk and read
  std::atomic<bool> stop{false};

  std::mutex encodings_mutex;
  std::unordered_map<encoding_key, encoding, encoding_key_hasher> encodings;

  std::mutex error_mutex;
  std::exception_ptr error;

  // Workers that have finished, for the progress loop.
  std::mutex done_mutex;
  std::condition_variable done_cv;
  unsigned finished = 0;

  bool encoded_already(const encoding_key& k) {
    const std::lock_guard lock(encodings_mutex);
    return encodings.contains(k);
  }
  void add_encoding(const encoding_key& k, const encoding& e) {
    const std::lock_guard lock(encodings_mutex);
    encodings.emplace(k, e);
  }
};

// One worker: takes slots in walk order (one at a time, so a single huge
// file still spreads over all threads), reads each, cuts it into chunks,
// hashes them and, for sampled slots, encodes them. Two threads may encode the same content at
// once; both get the same answer.
void scan_worker(scan_state& s) {
  int fd = -1;
  std::uint32_t fd_file = 0;
  std::uint32_t failed_file = UINT32_MAX;
  std::string data;
  std::string context;
  try {
    while (!s.stop.load(std::memory_order_relaxed)) {
      const std::size_t i = s.next.fetch_add(1);
      if (i >= s.chunks.size()) break;
      const chunk_ref& c = s.chunks[i];
      const file_entry& f = s.files[c.file];
      if (c.file == failed_file) continue;  // counted once already
      if (fd < 0 || fd_file != c.file) {
        if (fd >= 0) ::close(fd);
        fd = ::open(f.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        fd_file = c.file;
        if (fd < 0) {
          failed_file = c.file;
          s.read_errors.fetch_add(1);
          continue;
        }
      }
      const std::uint64_t offset = std::uint64_t{c.index} * k_chunk;
      if (!read_at(fd, offset, c.size, data)) {
        failed_file = c.file;
        s.read_errors.fetch_add(1);
        continue;
      }
      s.bytes_done.fetch_add(c.size, std::memory_order_relaxed);
      if (offset + c.size >= f.size) s.files_done.fetch_add(1, std::memory_order_relaxed);

      // The mount's cut: the policy's chunker for the type, the end of the
      // previous slot as its context (fs/data_path.cpp, data_path::encode_slot).
      const codec::chunker_spec& chunker = s.policy.chunker_for(f.type);
      const std::uint64_t want = c.index == 0 ? 0 : codec::chunk_context_bytes(chunker);
      if (want > 0 && !read_at(fd, offset - want, want, context)) {
        failed_file = c.file;
        s.read_errors.fetch_add(1);
        continue;
      }
      const std::vector<std::size_t> ends = codec::chunk_ends(
          data, chunker, want > 0 ? std::string_view(context) : std::string_view());

      chunk_result& r = s.results[i];
      r.read = true;
      r.pieces.reserve(ends.size());
      const codec::codec_options& options = s.policy.for_type(f.type);
      std::size_t begin = 0;
      for (const std::size_t end : ends) {
        const std::string_view plain = std::string_view(data).substr(begin, end - begin);
        begin = end;
        chunk_piece& piece = r.pieces.emplace_back();
        piece.bytes = static_cast<std::uint32_t>(plain.size());
        if (all_zero(plain)) {
          piece.hole = true;
          continue;
        }
        piece.hash = store::sha256_of(plain);
        if (!c.sampled || options.preferred == codec::codec_id::raw) continue;
        const encoding_key key{piece.hash, static_cast<std::uint8_t>(f.type)};
        if (s.encoded_already(key)) continue;
        codec::encoded_chunk e;
        try {
          e = codec::encode_chunk(plain, options);
        } catch (const codec::codec_error& ex) {
          throw codec::codec_error(f.path + ": slot " + std::to_string(c.index) + ": " + ex.what());
        }
        s.add_encoding(key, {static_cast<std::uint32_t>(e.bytes.size()), e.codec,
                             e.fell_back_from.has_value()});
      }
    }
  } catch (...) {
    const std::lock_guard lock(s.error_mutex);
    if (!s.error) s.error = std::current_exception();
    s.stop = true;
  }
  if (fd >= 0) ::close(fd);
  {
    const std::lock_guard lock(s.done_mutex);
    ++s.finished;
  }
  s.done_cv.notify_all();
}

// --- Adding up ------------------------------------------------------------------

// The figures for one file type.
//
// Estimator: each unique chunk whose first copy (in walk order) was sampled
// contributes its plain and stored size times its weight (1 / the chance it
// was drawn). The type's stored size is its unique bytes times the weighted
// stored/plain ratio of the sample (a Hajek ratio estimator); with every
// chunk sampled all weights are 1 and the figures are exact.
struct type_stats {
  std::uint64_t files = 0;
  std::uint64_t logical_bytes = 0;
  std::uint64_t hole_bytes = 0;
  std::uint64_t duplicate_chunks = 0;
  std::uint64_t duplicate_bytes = 0;
  std::uint64_t unique_chunks = 0;
  std::uint64_t unique_bytes = 0;
  // Unique chunks in the sample: their stored size is measured, by encoding
  // them or, for types the policy stores raw, without.
  std::uint64_t measured_chunks = 0;
  std::uint64_t measured_bytes = 0;
  std::uint64_t encoded_chunks = 0;  // of those, the ones that went through a codec
  std::uint64_t encoded_bytes = 0;
  std::uint64_t fallbacks = 0;  // in the sample
  double weighted_plain = 0;
  double weighted_stored = 0;
  // Index: codec id. What the sampled chunks were stored as.
  struct codec_use {
    std::uint64_t chunks = 0;
    double weighted_plain = 0;
    double weighted_stored = 0;
  };
  std::array<codec_use, codec::k_codec_count> by_codec{};

  void add_sampled(std::uint64_t plain, std::uint64_t stored, bool encoded, codec::codec_id codec,
                   bool fell_back, double weight) {
    ++measured_chunks;
    measured_bytes += plain;
    encoded_chunks += encoded;
    encoded_bytes += encoded ? plain : 0;
    fallbacks += fell_back;
    weighted_plain += weight * static_cast<double>(plain);
    weighted_stored += weight * static_cast<double>(stored);
    auto& u =
        by_codec[std::min<std::size_t>(static_cast<std::size_t>(codec), codec::k_codec_count - 1)];
    ++u.chunks;
    u.weighted_plain += weight * static_cast<double>(plain);
    u.weighted_stored += weight * static_cast<double>(stored);
  }

  // The counts only: a sum of types is not extrapolated as one (each type
  // has its own ratio), so the weighted sums are left out.
  void add_counts(const type_stats& o) {
    files += o.files;
    logical_bytes += o.logical_bytes;
    hole_bytes += o.hole_bytes;
    duplicate_chunks += o.duplicate_chunks;
    duplicate_bytes += o.duplicate_bytes;
    unique_chunks += o.unique_chunks;
    unique_bytes += o.unique_bytes;
    measured_chunks += o.measured_chunks;
    measured_bytes += o.measured_bytes;
    encoded_chunks += o.encoded_chunks;
    encoded_bytes += o.encoded_bytes;
    fallbacks += o.fallbacks;
  }

  // What the sample's weighted bytes are multiplied by to stand for all
  // unique bytes of the type (1 when everything was encoded).
  double scale() const {
    return weighted_plain == 0 ? 1.0 : static_cast<double>(unique_bytes) / weighted_plain;
  }
  bool estimated() const { return measured_bytes < unique_bytes; }
  // Holes and duplicates cost nothing. A type none of whose unique chunks
  // landed in the sample (only with a tiny --sample-bytes) is assumed not
  // to compress.
  std::uint64_t stored_estimate() const {
    if (weighted_plain == 0) return unique_bytes;
    return static_cast<std::uint64_t>(std::llround(weighted_stored * scale()));
  }
};

using stats_by_type = std::array<type_stats, codec::k_file_type_count>;

// Sums the read pass in walk order: the first copy of each content is the
// unique one, later copies are duplicates.
stats_by_type add_up(const scan_state& s) {
  stats_by_type stats{};
  for (const auto& f : s.files) ++stats[static_cast<std::size_t>(f.type)].files;
  std::unordered_set<store::chunk_hash, store::chunk_hash_hasher> seen;
  for (std::size_t i = 0; i < s.chunks.size(); ++i) {
    const chunk_ref& c = s.chunks[i];
    const chunk_result& r = s.results[i];
    if (!r.read) continue;
    const file_type type = s.files[c.file].type;
    type_stats& t = stats[static_cast<std::size_t>(type)];
    for (const chunk_piece& piece : r.pieces) {
      t.logical_bytes += piece.bytes;
      if (piece.hole) {
        t.hole_bytes += piece.bytes;
        continue;
      }
      if (!seen.insert(piece.hash).second) {
        ++t.duplicate_chunks;
        t.duplicate_bytes += piece.bytes;
        continue;
      }
      ++t.unique_chunks;
      t.unique_bytes += piece.bytes;
      if (!c.sampled) continue;
      if (s.policy.for_type(type).preferred == codec::codec_id::raw) {
        t.add_sampled(piece.bytes, piece.bytes, false, codec::codec_id::raw, false, c.weight);
        continue;
      }
      const auto it = s.encodings.find({piece.hash, static_cast<std::uint8_t>(type)});
      if (it == s.encodings.end()) continue;  // cannot happen: this chunk was encoded
      t.add_sampled(piece.bytes, it->second.stored, true, it->second.codec, it->second.fell_back,
                    c.weight);
    }
  }
  return stats;
}

// --- Output -----------------------------------------------------------------

double savings_of(std::uint64_t stored, std::uint64_t logical) {
  return logical == 0 ? 0.0 : 1.0 - static_cast<double>(stored) / static_cast<double>(logical);
}

json type_json(const type_stats& t) {
  const std::uint64_t stored = t.stored_estimate();
  return json{{"files", t.files},
              {"logical_bytes", t.logical_bytes},
              {"hole_bytes", t.hole_bytes},
              {"duplicate_chunks", t.duplicate_chunks},
              {"duplicate_bytes", t.duplicate_bytes},
              {"unique_chunks", t.unique_chunks},
              {"unique_bytes", t.unique_bytes},
              {"measured_chunks", t.measured_chunks},
              {"measured_bytes", t.measured_bytes},
              {"encoded_chunks", t.encoded_chunks},
              {"encoded_bytes", t.encoded_bytes},
              {"stored_bytes", stored},
              {"estimated", t.estimated()},
              {"savings", savings_of(stored, t.logical_bytes)},
              {"fallbacks", t.fallbacks}};
}

json build_report(const std::string& dir, const codec::policy& policy, const walk_result& w,
                  const stats_by_type& stats, std::uint64_t read_errors, bool full,
                  std::uint64_t sample_bytes, double seconds) {
  json types = json::array();
  type_stats total;
  // Index: codec id; extrapolated with each type's scale.
  std::array<double, codec::k_codec_count> codec_plain{}, codec_stored{};
  std::array<std::uint64_t, codec::k_codec_count> codec_chunks{};
  std::uint64_t stored_total = 0;
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const type_stats& t = stats[i];
    if (t.files == 0) continue;
    json j = type_json(t);
    j["type"] = codec::file_type_name(static_cast<file_type>(i));
    j["codec"] = codec::format_codec_spec(policy.by_type[i]);
    types.push_back(std::move(j));
    total.add_counts(t);
    stored_total += t.stored_estimate();
    if (t.weighted_plain == 0) {
      codec_plain[0] += static_cast<double>(t.unique_bytes);  // assumed raw, as above
      codec_stored[0] += static_cast<double>(t.unique_bytes);
    }
    for (std::size_t c = 0; c < t.by_codec.size(); ++c) {
      codec_chunks[c] += t.by_codec[c].chunks;
      codec_plain[c] += t.by_codec[c].weighted_plain * t.scale();
      codec_stored[c] += t.by_codec[c].weighted_stored * t.scale();
    }
  }
  json codecs = json::array();
  for (std::size_t c = 0; c < codec_plain.size(); ++c) {
    if (codec_plain[c] == 0) continue;
    const auto plain = static_cast<std::uint64_t>(std::llround(codec_plain[c]));
    const auto stored = static_cast<std::uint64_t>(std::llround(codec_stored[c]));
    codecs.push_back({{"codec", codec::codec_name(static_cast<codec::codec_id>(c))},
                      {"measured_chunks", codec_chunks[c]},
                      {"plain_bytes", plain},
                      {"stored_bytes", stored},
                      {"savings", savings_of(stored, plain)}});
  }
  json totals = type_json(total);
  totals["stored_bytes"] = stored_total;  // each type extrapolated on its own
  totals["savings"] = savings_of(stored_total, total.logical_bytes);
  return json{{"directory", dir},
              {"policy", codec::format_policy(policy)},
              {"full", full},
              {"sample_bytes", full ? 0 : sample_bytes},
              {"chunk_size", k_chunk},
              {"types", std::move(types)},
              {"codecs", std::move(codecs)},
              {"totals", std::move(totals)},
              {"skipped",
               {{"unreadable", w.unreadable + read_errors},
                {"other_file_systems", w.other_devices},
                {"not_regular", w.not_regular}}},
              {"seconds", seconds}};
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0);
  return buf;
}

std::string render(const json& r) {
  const json& totals = r.at("totals");
  const auto u64 = [](const json& j, const char* k) { return j.at(k).get<std::uint64_t>(); };
  // "~" marks a figure extrapolated from a sample.
  const auto est = [](const json& j, std::string s) {
    return j.at("estimated").get<bool>() ? "~" + s : s;
  };

  std::string out = "densefs analyze " + r.at("directory").get<std::string>() + ": " +
                    std::to_string(u64(totals, "files")) + " files, " +
                    human_size(u64(totals, "logical_bytes")) + "\n\n";

  std::vector<std::vector<std::string>> rows = {
      {"type", "files", "logical", "stored", "savings", "codec", "encoded", "fallbacks"}};
  for (const json& t : r.at("types")) {
    const std::string spec = t.at("codec").get<std::string>();
    rows.push_back({t.at("type").get<std::string>(), std::to_string(u64(t, "files")),
                    human_size(u64(t, "logical_bytes")), est(t, human_size(u64(t, "stored_bytes"))),
                    est(t, percent(t.at("savings").get<double>())), spec.substr(0, spec.find(':')),
                    // Raw by policy: nothing to encode.
                    spec == "raw" ? "-" : human_size(u64(t, "encoded_bytes")),
                    std::to_string(u64(t, "fallbacks"))});
  }
  rows.push_back(
      {"total", std::to_string(u64(totals, "files")), human_size(u64(totals, "logical_bytes")),
       est(totals, human_size(u64(totals, "stored_bytes"))),
       est(totals, percent(totals.at("savings").get<double>())), "",
       human_size(u64(totals, "encoded_bytes")), std::to_string(u64(totals, "fallbacks"))});
  out += format_table(rows);

  std::vector<std::vector<std::string>> codecs = {
      {"stored as", "plain", "stored", "savings", "chunks measured"}};
  for (const json& c : r.at("codecs")) {
    codecs.push_back({c.at("codec").get<std::string>(),
                      est(totals, human_size(u64(c, "plain_bytes"))),
                      est(totals, human_size(u64(c, "stored_bytes"))),
                      est(totals, percent(c.at("savings").get<double>())),
                      std::to_string(u64(c, "measured_chunks"))});
  }
  if (codecs.size() > 1) out += "\n" + format_table(codecs);

  out += "\nholes (all-zero chunks): " + human_size(u64(totals, "hole_bytes")) +
         "; dedup: " + std::to_string(u64(totals, "duplicate_chunks")) + " duplicate chunks, " +
         human_size(u64(totals, "duplicate_bytes")) + " not stored again\n";
  if (totals.at("estimated").get<bool>()) {
    out += "~ estimated: " + human_size(u64(totals, "encoded_bytes")) + " encoded; " +
           human_size(u64(totals, "unique_bytes") - u64(totals, "measured_bytes")) +
           " of unique data extrapolated from its type's sample (--full encodes everything)\n";
  } else {
    out += "exact: every unique chunk encoded or stored raw by the policy (metadata not counted)\n";
  }
  const json& skipped = r.at("skipped");
  const std::uint64_t unreadable = u64(skipped, "unreadable");
  const std::uint64_t other_fs = u64(skipped, "other_file_systems");
  if (unreadable != 0 || other_fs != 0) {
    out += "skipped: " + std::to_string(unreadable) + " unreadable, " + std::to_string(other_fs) +
           " on other file systems (--cross-file-systems enters them)\n";
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", r.at("seconds").get<double>());
  out += std::string("took ") + secs + "\n";
  return out;
}

// A progress line that rewrites itself; only on a terminal.
class progress_line {
 public:
  explicit progress_line(const tool_io& io)
      // In-process callers (tests) pass string streams: only the real
      // std::cerr of a terminal gets the line.
      : enabled_(progress_wanted(io)), err_(io.err) {}
  ~progress_line() { clear(); }

  void show(const std::string& text) {
    if (!enabled_) return;
    err_ << "\r\033[K" << text << std::flush;
    shown_ = true;
  }
  void clear() {
    if (enabled_ && shown_) err_ << "\r\033[K" << std::flush;
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::ostream& err_;
};

}  // namespace

int analyze_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Estimate what densefs would store for an existing directory tree, per file "
      "type and codec, without creating a store (a dry run; reads every file once).",
      "densefs analyze"};
  std::string dir;
  std::string spec = "default";
  bool as_json = false;
  bool full = false;
  bool cross = false;
  std::uint64_t sample_bytes = k_default_sample_bytes;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  app.add_option("DIR", dir, "the directory tree to analyze")->required();
  app.add_option("--codec", spec, "codec policy, as for mkfs (docs/policy.md); default: default");
  app.add_flag("--json", as_json, "print the report as JSON");
  app.add_option("--sample-bytes", sample_bytes,
                 "encode about this much data (e.g. 64MiB, 1GiB) and extrapolate each type's "
                 "ratio (default 256MiB)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--full", full, "encode every unique chunk: exact figures, slower");
  app.add_option("--threads", threads, "encoding threads (default: the number of cores)")
      ->check(CLI::Range(1u, 256u));
  app.add_flag("--cross-file-systems", cross,
               "also enter directories on other file systems (mount points)");
  if (auto done = parse_cli(app, args, io)) return *done;

  codec::policy policy;
  try {
    policy = codec::parse_policy(spec);
  } catch (const codec::codec_error& e) {
    print_error(io, "analyze", std::string("--codec: ") + e.what());
    return k_exit_usage;
  }
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    print_error(io, "analyze", dir + ": no such file or directory");
    return k_exit_failure;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    print_error(io, "analyze", dir + ": not a directory");
    return k_exit_failure;
  }

  const auto start = std::chrono::steady_clock::now();
  progress_line progress(io);
  const walk_result w = walk(dir, cross, [&](const walk_result& r) {
    progress.show("analyze: found " + std::to_string(r.files.size()) + " files");
  });
  if (w.files.size() > UINT32_MAX) throw std::runtime_error("too many files");

  std::vector<chunk_ref> chunks;
  std::uint64_t total_bytes = 0;
  std::uint64_t empty_files = 0;  // done before anything is read
  for (std::size_t i = 0; i < w.files.size(); ++i) {
    const file_entry& f = w.files[i];
    total_bytes += f.size;
    empty_files += f.size == 0;
    for (std::uint64_t off = 0; off < f.size; off += k_chunk) {
      chunks.push_back({.file = static_cast<std::uint32_t>(i),
                        .index = static_cast<std::uint32_t>(off / k_chunk),
                        .size = static_cast<std::uint32_t>(std::min(k_chunk, f.size - off))});
    }
  }
  plan_sample(chunks, w.files, policy, sample_bytes, full);

  scan_state s(w.files, chunks, policy);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back([&s] { scan_worker(s); });
  {
    std::unique_lock lock(s.done_mutex);
    while (!s.done_cv.wait_for(lock, std::chrono::milliseconds(200),
                               [&] { return s.finished == threads; })) {
      progress.show("analyze: " + std::to_string(s.files_done.load() + empty_files) + "/" +
                    std::to_string(w.files.size()) + " files, " + human_size(s.bytes_done.load()) +
                    " of " + human_size(total_bytes));
    }
  }
  for (auto& t : workers) t.join();
  progress.clear();
  if (s.error) std::rethrow_exception(s.error);
  const stats_by_type stats = add_up(s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const json report = build_report(absolute_path(dir).string(), policy, w, stats,
                                   s.read_errors.load(), full, sample_bytes, seconds);
  if (as_json) {
    io.out << report.dump(2) << '\n';
  } else {
    io.out << render(report);
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
