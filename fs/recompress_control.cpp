// The control socket's requests that need the file system, not just the
// store: "info" (a file's whole chunk list) and "recompress" (`densefs
// recompress PATH` on a live mount: the daemon owns the store, so it queues
// PATH's chunks for its own background re-encoder and reports progress
// until they are done).
#include <sys/stat.h>

#include <chrono>
#include <limits>
#include <set>
#include <thread>

#include "fs/control_server.h"
#include "fs/filesystem.h"

namespace densefs::fs {
namespace {

// Queue entries per commit while planning a big tree.
constexpr std::size_t k_plan_batch = 1000;
constexpr std::chrono::seconds k_stall_limit{300};
// "info" builds a file's chunk list in the daemon's memory, about 250 bytes
// per chunk: 64 MiB is ~268,000 chunks, 8 GiB of 32 KiB chunks. A longer
// list stops there ("chunks_truncated"; the counts still cover every chunk).
constexpr std::size_t k_max_info_chunk_list = 64u << 20;

}  // namespace

void filesystem::register_control_handlers(control_server& server) {
  // {"op":"info","ino":N}: user.densefs.info with every chunk listed (the
  // xattr's list stops at 64 KiB). The client holds the file open, so its
  // node is in the table.
  server.register_handler(
      "info", [this](const nlohmann::json& request, control_response& response) {
        if (!request.contains("ino") || !request["ino"].is_number_unsigned())
          throw control_error(EINVAL, "info: \"ino\" must be an inode number");
        const auto ino = request["ino"].get<std::uint64_t>();
        auto n = table_.find(ino);
        if (!n) throw control_error(ENOENT, "info: inode " + std::to_string(ino) + " is not open");
        response.header();
        response.data(info_json(*n, k_max_info_chunk_list));
      });

  server.register_handler("recompress", [this](const nlohmann::json& request,
                                               control_response& response) {
    if (!request.contains("ino") || !request["ino"].is_number_unsigned())
      throw control_error(EINVAL, "recompress: \"ino\" must be an inode number");
    if (options_.read_only) throw control_error(EROFS, "recompress: the mount is read-only");
    if (!recompressor_)
      throw control_error(EINVAL,
                          "recompress: background re-encoding is off on this mount "
                          "(-o recompress_threads=0)");
    const auto root = request["ino"].get<std::uint64_t>();
    // The walk reads the store: what is put off goes to it first (a
    // directory just made, deferred_names.h).
    commit_deferred();
    if (!store_->get_inode(root))
      throw control_error(ENOENT, "recompress: inode " + std::to_string(root) + " does not exist");

    // Plan: every chunk under `root` whose codec is not its file's policy
    // codec (raw targets are skipped: re-encoding to raw never shrinks).
    std::vector<store::chunk_hash> queued;
    std::set<store::chunk_hash> seen;
    std::uint64_t files = 0;
    store::transaction txn;
    std::size_t in_txn = 0;
    std::vector<std::uint64_t> todo{root};
    std::set<std::uint64_t> visited;
    while (!todo.empty()) {
      const std::uint64_t ino = todo.back();
      todo.pop_back();
      if (!visited.insert(ino).second) continue;  // hard links
      const auto r = store_->get_inode(ino);
      if (!r) continue;
      if (S_ISDIR(r->mode)) {
        store_->list_dir(ino, std::nullopt, [&](std::string_view, const store::dirent_record& d) {
          todo.push_back(d.ino);
          return true;
        });
        continue;
      }
      if (!S_ISREG(r->mode)) continue;
      ++files;
      const codec::codec_options& target = store_->policy().for_type(r->type);
      if (target.preferred == codec::codec_id::raw) continue;
      for (const auto& [off, ext] :
           store_->extents(ino, 0, std::numeric_limits<std::uint64_t>::max())) {
        if (!seen.insert(ext.hash).second) continue;
        const auto rec = store_->get_chunk(ext.hash);
        if (!rec || rec->codec == target.preferred) continue;
        txn.queue_recompress(ext.hash, ino);
        queued.push_back(ext.hash);
        if (++in_txn == k_plan_batch) {
          std::lock_guard meta(meta_mutex_);  // every commit takes what is put off
          commit(txn);
          txn = store::transaction();
          in_txn = 0;
        }
      }
    }
    {
      std::lock_guard meta(meta_mutex_);
      commit(txn);
    }
    response.header({{"files", files}, {"chunks", queued.size()}});
    recompressor_->notify();

    // Follow the queue: a chunk is done when its entry is gone (re-encoded,
    // or kept because nothing smaller verified).
    std::size_t done = 0;
    auto last_progress = std::chrono::steady_clock::now();
    for (;;) {
      std::size_t left = 0;
      for (const auto& h : queued) left += store_->is_queued_for_recompress(h) ? 1 : 0;
      if (queued.size() - left != done || left == 0) {
        done = queued.size() - left;
        last_progress = std::chrono::steady_clock::now();
        response.message({{"done", done}, {"total", queued.size()}});
      }
      if (left == 0) break;
      // One Lepton encode takes seconds; minutes without one finished means
      // the re-encoder is stuck on errors (see the daemon's log).
      if (std::chrono::steady_clock::now() - last_progress > k_stall_limit)
        throw control_error(ETIMEDOUT, "recompress: no chunk finished for " +
                                           std::to_string(k_stall_limit.count()) + " s; " +
                                           std::to_string(left) +
                                           " stay queued for the background re-encoder");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    response.summary({{"files", files}, {"chunks", queued.size()}});
  });
  register_gc_handler(server);
  register_sync_handler(server);
  register_snapshot_handler(server);
}

}  // namespace densefs::fs
