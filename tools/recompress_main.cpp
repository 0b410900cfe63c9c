// densefs recompress STORE [--threads N] [--json]: re-encodes the chunks of
// an unmounted store under its current codec policy (after a codec was
// added, or to finish queued background work at once). A chunk is replaced
// only by a verified encoding that is smaller; it never grows.
//
// On a live mount the daemon owns the store; `densefs recompress PATH` asks
// it through the control socket to queue PATH's chunks for its background
// re-encoder and follows the queue until they are done.
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fcntl.h>

#include "codec/classify.h"
#include "codec/policy.h"
#include "fs/control_server.h"
#include "fs/mount.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {
namespace {

struct chunk_job {
  store::chunk_hash hash;
  codec::codec_options target;
};

// A JPEG of several chunks under a Lepton policy: all its chunks become one
// Lepton file in one commit (store::reencode_lepton_file).
struct file_job {
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  store::extent_list extents;
  codec::codec_options target;
};

struct totals {
  std::atomic<std::uint64_t> lepton_files{0};  // JPEGs made one Lepton file
  std::atomic<std::uint64_t> examined{0};
  std::atomic<std::uint64_t> reencoded{0};
  std::atomic<std::uint64_t> fallbacks{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> before{0};  // stored bytes of the re-encoded chunks, before
  std::atomic<std::uint64_t> after{0};   // and after
};

// The file's type; files written before per-type policies (type unknown)
// are classified from their first bytes now.
codec::file_type type_of(const store::store& s, const store::inode_record& r) {
  if (r.type != codec::file_type::unknown) return r.type;
  const auto first = s.extents(r.ino, 0, 1);
  if (first.empty() || first.front().first != 0) return codec::file_type::unknown;
  try {
    const auto plain = s.read_chunk(first.front().second.hash);
    const std::string_view head(*plain);
    return codec::classify(
        head.substr(first.front().second.chunk_offset, codec::k_classify_head_bytes), {});
  } catch (const std::exception&) {
    return codec::file_type::unknown;  // reported when its chunk is re-encoded
  }
}

// PATH on a live mount: the daemon queues PATH's chunks for its background
// re-encoder; this follows its progress messages until they are done.
int recompress_live(const std::string& path, bool as_json, bool progress, const tool_io& io) {
  struct stat st {};
  std::string store_dir;
  {
    fd_guard file;
    file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (file.fd < 0) {
      print_error(io, "recompress", path + ": " + std::strerror(errno));
      return k_exit_failure;
    }
    std::optional<std::string> info;
    try {
      ::fstat(file.fd, &st);
      // Staged data reaches the store first (a directory's fsync is harmless).
      ::fsync(file.fd);
      info = read_xattr(file.fd, path, fs::k_xattr_info);
      if (info) store_dir = mount_store_dir(*info, path);
    } catch (const std::exception& e) {
      print_error(io, "recompress", e.what());
      return k_exit_failure;
    }
    if (!info) {
      print_error(io, "recompress",
                  path + " is neither a densefs store nor inside a densefs mount");
      return k_exit_failure;
    }
  }
  try {
    fs::control_client client(store_dir);
    const nlohmann::json plan =
        client.request({{"op", "recompress"}, {"ino", static_cast<std::uint64_t>(st.st_ino)}});
    const nlohmann::json summary = client.read_body({}, [&](const nlohmann::json& m) {
      if (progress)
        io.err << "\rrecompress: " << m.value("done", 0) << "/" << m.value("total", 0)
               << " chunks   " << std::flush;
    });
    if (progress) io.err << "\n";
    if (as_json) {
      io.out << summary.dump(2) << '\n';
    } else {
      io.out << "re-encoded " << summary.value("chunks", 0) << " chunks of "
             << summary.value("files", 0) << " files under " << path
             << " (chunks only get smaller; densefs stats shows the savings)\n";
    }
  } catch (const fs::control_error& e) {
    print_error(io, "recompress", path + ": " + e.what());
    return k_exit_failure;
  }
  return k_exit_ok;
}

}  // namespace

int recompress_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Re-encode the chunks of an unmounted store under its codec policy (for example "
      "after a codec was added). Chunks only ever get smaller.",
      "densefs recompress"};
  std::string path;
  unsigned threads = 0;
  bool as_json = false;
  app.add_option("STORE|PATH", path,
                 "an unmounted store directory, or a file or directory inside a densefs mount "
                 "(its daemon re-encodes in the background; this waits until it is done)")
      ->required();
  app.add_option("--threads", threads, "encoding threads (default: one per core)")
      ->check(CLI::Range(1u, 1024u));
  app.add_flag("--json", as_json, "print the summary as JSON");
  std::string key_file;
  app.add_option("--key-file", key_file,
                 "an encrypted volume's key file (else DENSEFS_PASSPHRASE, else a terminal asks)")
      ->type_name("FILE");
  if (auto done = parse_cli(app, args, io)) return *done;

  const bool progress = !as_json && progress_wanted(io);
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(path) / "FORMAT", ec))
    return recompress_live(path, as_json, progress, io);
  const auto started = std::chrono::steady_clock::now();
  const store_lock lock(path);
  store::store_open_options options;
  options.chunk_cache_bytes = 0;  // every chunk is read once
  add_volume_secret(path, key_file, options);
  const auto s = store::store::open(path, options);
  const codec::policy& policy = s->policy();

  // Plan: every chunk whose codec differs from its file's policy codec.
  std::vector<chunk_job> jobs;
  std::vector<file_job> file_jobs;
  std::set<store::chunk_hash> planned;
  std::map<std::uint64_t, codec::file_type> classified;  // inodes typed only now
  std::vector<std::uint64_t> files;
  totals t;
  s->for_each_inode([&](const store::inode_record& r) {
    if (!S_ISREG(r.mode)) return true;
    files.push_back(r.ino);
    const codec::file_type type = type_of(*s, r);
    if (type != r.type) classified[r.ino] = type;
    const codec::codec_options& target = policy.for_type(type);
    store::extent_list extents = s->extents(r.ino, 0, std::numeric_limits<std::uint64_t>::max());
    if (target.preferred == codec::codec_id::lepton && s->could_be_lepton_file(extents, r.size)) {
      // Its chunks are the file job's; a copy of the same JPEG (same
      // chunks) is done by the first one.
      bool fresh = true;
      for (const auto& [off, ext] : extents) fresh = planned.insert(ext.hash).second && fresh;
      if (fresh) file_jobs.push_back({r.ino, r.size, std::move(extents), target});
      return true;
    }
    for (const auto& [off, ext] : extents) {
      if (planned.count(ext.hash)) continue;
      const auto rec = s->get_chunk(ext.hash);
      if (!rec || rec->codec == target.preferred) continue;
      planned.insert(ext.hash);
      jobs.push_back({ext.hash, target});
    }
    return true;
  });

  // Work: a few threads pull jobs; each chunk is its own small commit, so an
  // interrupted run keeps what it finished.
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> next_file{0};
  std::mutex error_mutex;
  std::string first_error;
  // A file's chunks as one Lepton file; when Lepton does not take the whole
  // file, its chunks are re-encoded one by one as before.
  const auto work_file = [&](const file_job& job) {
    std::vector<chunk_job> fallback;
    try {
      store::store::lepton_file_reencoding r =
          s->reencode_lepton_file(job.extents, job.size, job.target.min_savings);
      store::transaction txn;
      for (const auto& [off, ext] : job.extents) txn.drop_recompress(ext.hash);
      const std::size_t swaps = r.swaps.size();
      if (swaps == 0) {
        ++t.fallbacks;
        for (const auto& [off, ext] : job.extents) fallback.push_back({ext.hash, job.target});
      }
      txn.replace_payloads(std::move(r.swaps));
      t.examined += job.extents.size();
      s->commit(txn);
      if (swaps != 0) {
        t.before += r.stored_before;
        t.after += r.stored_after;
        t.reencoded += swaps;
        ++t.lepton_files;
      }
    } catch (const std::exception& e) {
      ++t.failed;
      std::lock_guard lock(error_mutex);
      if (first_error.empty()) first_error = "inode " + std::to_string(job.ino) + ": " + e.what();
    }
    return fallback;
  };
  std::vector<chunk_job> fallbacks;
  std::mutex fallback_mutex;
  const auto work_files = [&] {
    for (std::size_t i = next_file++; i < file_jobs.size(); i = next_file++) {
      std::vector<chunk_job> more = work_file(file_jobs[i]);
      std::lock_guard lock(fallback_mutex);
      fallbacks.insert(fallbacks.end(), more.begin(), more.end());
    }
  };
  const auto work = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      const chunk_job& job = jobs[i];
      ++t.examined;
      try {
        const auto rec = s->get_chunk(job.hash);
        if (!rec) continue;
        store::store::reencoding r = s->reencode_chunk(job.hash, *rec, job.target);
        if (r.fell_back_from) ++t.fallbacks;
        store::transaction txn;
        txn.drop_recompress(job.hash);
        if (r.smaller) {
          t.before += rec->stored_size;
          t.after += r.smaller->bytes.size();
          ++t.reencoded;
          txn.replace_payload(job.hash, rec->checksum, std::move(*r.smaller));
        }
        s->commit(txn);
      } catch (const std::exception& e) {
        ++t.failed;
        std::lock_guard lock(error_mutex);
        if (first_error.empty()) first_error = "chunk " + job.hash.hex() + ": " + e.what();
      }
      if (progress) {
        std::lock_guard lock(error_mutex);
        io.err << "\rrecompress: " << t.examined << "/" << jobs.size() << " chunks, "
               << human_size(t.before) << " -> " << human_size(t.after) << "   " << std::flush;
      }
    }
  };
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  {
    std::vector<std::jthread> pool;
    for (unsigned i = 0; i < std::min<std::size_t>(threads, file_jobs.size()); ++i)
      pool.emplace_back(work_files);
  }
  // JPEGs Lepton refused whole: their chunks one by one, with the rest.
  for (chunk_job& j : fallbacks) {
    const auto rec = s->get_chunk(j.hash);
    if (rec && rec->codec != j.target.preferred) jobs.push_back(std::move(j));
  }
  {
    std::vector<std::jthread> pool;
    for (unsigned i = 0; i < std::min<std::size_t>(threads, std::max<std::size_t>(1, jobs.size()));
         ++i)
      pool.emplace_back(work);
  }
  if (progress) io.err << "\n";

  // Accounting: stored_bytes of every file from its chunks as they are now,
  // and the types classified on the way.
  for (std::uint64_t ino : files) {
    auto r = s->get_inode(ino);
    if (!r) continue;
    store::inode_record updated = *r;
    std::uint64_t stored = 0;
    for (const auto& [off, ext] : s->extents(ino, 0, std::numeric_limits<std::uint64_t>::max()))
      if (auto rec = s->get_chunk(ext.hash)) stored += rec->stored_size;
    updated.stored_bytes = stored;
    if (auto it = classified.find(ino); it != classified.end()) updated.type = it->second;
    if (updated == *r) continue;
    store::transaction txn;
    txn.put_inode(updated);
    s->commit(txn);
  }
  s->sync();

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (as_json) {
    nlohmann::json j;
    j["store"] = absolute_path(path).string();
    j["files"] = files.size();
    j["chunks_examined"] = t.examined.load();
    j["chunks_reencoded"] = t.reencoded.load();
    j["lepton_files"] = t.lepton_files.load();
    j["stored_bytes_before"] = t.before.load();
    j["stored_bytes_after"] = t.after.load();
    j["fallbacks"] = t.fallbacks.load();
    j["failed"] = t.failed.load();
    j["seconds"] = seconds;
    io.out << j.dump(2) << '\n';
  } else {
    io.out << "recompressed " << t.reencoded << " of " << t.examined << " chunks in "
           << files.size() << " files (" << t.lepton_files
           << " JPEGs as one Lepton file): " << human_size(t.before) << " -> "
           << human_size(t.after) << " (" << t.fallbacks << " fell back, " << t.failed
           << " failed) in " << static_cast<int>(seconds * 10) / 10.0 << " s\n";
  }
  if (t.failed != 0) {
    print_error(
        io, "recompress",
        std::to_string(t.failed.load()) + " chunks could not be re-encoded; first: " + first_error);
    return k_exit_failure;
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
