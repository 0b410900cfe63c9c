// -o metrics=: what the mount serves to Prometheus (docs/metrics.md lists
// every family). Counters kept as the mount runs are read at each scrape;
// the store's totals (bytes by codec, dedup, the re-encoder's backlog) are
// a walk of its records, so the metrics server's second thread takes them
// once a minute (or less often where a walk is long) and scrapes serve
// them as of then
// (densefs_store_stats_age_seconds says how old): a scrape never waits
// for the walk.
#include <algorithm>
#include <chrono>
#include <string>

#include "codec/codec.h"
#include "fs/filesystem.h"
#include "fs/prometheus_text.h"
#include "store/cache/chunk_cache.h"
#include "store/object/object_store.h"
#include "store/payload/pack_store.h"
#include "store/store.h"

namespace densefs::fs {

std::chrono::seconds filesystem::refresh_metrics_totals() {
  const auto start = std::chrono::steady_clock::now();
  store::store_stats totals = store_->stats();
  const auto end = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(metrics_totals_mutex_);
    metrics_totals_ = std::move(totals);
    metrics_totals_time_ = end;
  }
  return std::max<std::chrono::seconds>(
      std::chrono::seconds(60), std::chrono::ceil<std::chrono::seconds>(10 * (end - start)));
}

namespace {

// A histogram's samples (its family started): cumulative buckets, +Inf,
// sum and count; `kind`, if not empty, is the `kind` label of each.
void write_histogram(prometheus_text& out, std::string_view name, const latency_histogram& h,
                     std::string_view kind) {
  const auto sample = [&](std::string_view suffix, auto value, std::string_view le) {
    const std::string full = std::string(name) + std::string(suffix);
    if (kind.empty() && le.empty())
      out.sample(full, value);
    else if (kind.empty())
      out.sample(full, value, {{"le", le}});
    else if (le.empty())
      out.sample(full, value, {{"kind", kind}});
    else
      out.sample(full, value, {{"kind", kind}, {"le", le}});
  };
  // The count is read first and the buckets after: +Inf is at least the
  // last bucket, whatever lands between the reads.
  const std::uint64_t count = h.count();
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < k_latency_buckets; ++b) {
    cumulative += h.in_bucket(b);
    sample("_bucket", cumulative, prometheus_text::bound(k_latency_bounds[b]));
  }
  const std::uint64_t total = std::max(count, cumulative);
  sample("_bucket", total, "+Inf");
  sample("_sum", static_cast<double>(h.nanoseconds()) / 1e9, "");
  sample("_count", total, "");
}

}  // namespace

std::string filesystem::metrics_text() const {
  prometheus_text out;

  // FUSE requests by kind: how many, and how long the daemon took.
  out.family("densefs_fuse_requests_total", "counter",
             "FUSE requests this mount received, by kind (FUSE's own names)");
  for (std::size_t i = 0; i < static_cast<std::size_t>(fuse_request::count_); ++i) {
    const auto kind = static_cast<fuse_request>(i);
    out.sample("densefs_fuse_requests_total", requests_.get(kind), {{"kind", request_name(kind)}});
  }
  out.family("densefs_fuse_request_duration_seconds", "histogram",
             "Time the daemon spent on a FUSE request, from its callback's start to its reply");
  for (std::size_t i = 0; i < static_cast<std::size_t>(fuse_request::count_); ++i) {
    const auto kind = static_cast<fuse_request>(i);
    if (requests_.get(kind) == 0) continue;
    write_histogram(out, "densefs_fuse_request_duration_seconds", requests_.latency(kind),
                    request_name(kind));
  }
  out.single("densefs_read_bytes_total", "counter", "Bytes read through the mount",
             requests_.read_bytes());
  out.single("densefs_written_bytes_total", "counter", "Bytes written through the mount",
             requests_.written_bytes());
  out.single("densefs_requests_off_ring_total", "counter",
             "Requests handed off an io_uring ring's thread to a helper",
             requests_off_ring_.load(std::memory_order_relaxed));
  out.single("densefs_transport_stalls_total", "counter",
             "Probes of the mount left unanswered past their bound", watchdog_.stalls());
  // File data: group commits, bytes waiting for one.
  if (data_) {
    out.family("densefs_group_commit_duration_seconds", "histogram",
               "Time of each group commit of file data (encoded slots of any files, one "
               "transaction)");
    write_histogram(out, "densefs_group_commit_duration_seconds", data_->group_commits(), {});
    out.single("densefs_group_commit_slots_total", "counter",
               "File-data versions the group commits committed (over their count: the mean group)",
               data_->group_commit_slots());
    out.single("densefs_staged_bytes", "gauge",
               "Bytes written and handed to the encoders, not committed yet",
               static_cast<std::uint64_t>(data_->staged_bytes()));
  }
  const store::chunk_cache_reads chunk_reads = store_->chunk_cache_counts();
  out.family("densefs_chunk_cache_reads_total", "counter",
             "Reads of decoded chunks: from the cache (hit), from another read's load (merged), "
             "fetched and decoded (miss)");
  out.sample("densefs_chunk_cache_reads_total", chunk_reads.hits, {{"result", "hit"}});
  out.sample("densefs_chunk_cache_reads_total", chunk_reads.merged, {{"result", "merged"}});
  out.sample("densefs_chunk_cache_reads_total", chunk_reads.misses, {{"result", "miss"}});
  out.single("densefs_gc_runs_total", "counter", "Garbage collections this mount ran that ended",
             store_->collections());
  out.single("densefs_gc_reclaimed_bytes_total", "counter",
             "Disk bytes this mount's garbage collections gave back", store_->collected_bytes());
  out.single("densefs_gc_garbage_bytes", "gauge",
             "Payload bytes made garbage by this mount's commits since its last collection",
             store_->garbage_since_collect());
  if (store_->reads_are_round_trips()) {
    out.single("densefs_metadata_round_trips_total", "counter",
               "Round trips to the metadata server (PostgreSQL: pipelines sent and answered)",
               store_->engine_round_trips());
  }
  out.single("densefs_inodes_in_memory", "gauge", "Inodes with a node in the daemon's memory",
             static_cast<std::uint64_t>(table_.resident()));
  out.single("densefs_inodes_parked", "gauge",
             "Inodes the kernel remembers whose node the daemon has parked",
             static_cast<std::uint64_t>(table_.parked()));

  // This client's requests to the object store: counters, read now.
  if (const store::pack_store* packs = store_->packs(); packs && packs->remote()) {
    const store::object_store::request_counts r = packs->remote()->requests();
    out.family("densefs_object_requests_total", "counter",
               "Requests this client sent to the object store (each try once), by kind");
    out.sample("densefs_object_requests_total", r.puts, {{"kind", "put"}});
    out.sample("densefs_object_requests_total", r.gets, {{"kind", "get"}});
    out.sample("densefs_object_requests_total", r.heads, {{"kind", "head"}});
    out.sample("densefs_object_requests_total", r.lists, {{"kind", "list"}});
    out.sample("densefs_object_requests_total", r.deletes, {{"kind", "delete"}});
    out.single("densefs_object_retries_total", "counter",
               "Object-store requests sent again after a transient failure", r.retries);
    out.single("densefs_object_failures_total", "counter",
               "Object-store requests given up on (an I/O error to the reader or writer)",
               r.failures);
    const store::pack_home::cache_reads cached = packs->cache_counts();
    out.family("densefs_payload_cache_reads_total", "counter",
               "Records read through this client's payload cache (hit) or fetched from the "
               "object store (miss)");
    out.sample("densefs_payload_cache_reads_total", cached.hits, {{"result", "hit"}});
    out.sample("densefs_payload_cache_reads_total", cached.misses, {{"result", "miss"}});
    out.single("densefs_object_sent_bytes_total", "counter", "Bytes sent to the object store",
               r.bytes_sent);
    out.single("densefs_object_received_bytes_total", "counter",
               "Bytes received from the object store", r.bytes_received);
  }

  // The store's totals, as of the last walk (none yet: not served).
  std::optional<store::store_stats> totals;
  std::chrono::steady_clock::time_point taken;
  {
    std::lock_guard lock(metrics_totals_mutex_);
    totals = metrics_totals_;
    taken = metrics_totals_time_;
  }
  if (!totals) return out.text();
  const store::store_stats& s = *totals;
  out.single("densefs_store_stats_age_seconds", "gauge",
             "How old the store totals below are (a walk of the records, once a minute)",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - taken).count());
  out.single("densefs_files", "gauge", "Regular files in the volume", s.files);
  out.single("densefs_directories", "gauge", "Directories in the volume", s.directories);
  out.single("densefs_logical_bytes", "gauge", "Sum of the regular files' sizes", s.logical_bytes);
  out.single("densefs_stored_bytes", "gauge", "Stored bytes of the volume's unique chunks",
             s.stored_bytes);
  out.single("densefs_dedup_saved_bytes", "gauge",
             "Plain bytes not stored again because a chunk was already there", s.dedup_saved_bytes);
  // One family per figure, a sample per codec that stores any chunk.
  const auto by_codec = [&](std::string_view name, std::string_view help,
                            const std::uint64_t(&values)[codec::k_codec_count]) {
    out.family(name, "gauge", help);
    for (std::size_t c = 0; c < codec::k_codec_count; ++c)
      if (s.chunks_by_codec[c] != 0)
        out.sample(name, values[c],
                   {{"codec", codec::codec_name(static_cast<codec::codec_id>(c))}});
  };
  by_codec("densefs_codec_chunks", "Unique chunks by the codec that stores them",
           s.chunks_by_codec);
  by_codec("densefs_codec_plain_bytes",
           "Plain bytes of the unique chunks, by the codec that stores them", s.plain_by_codec);
  by_codec("densefs_codec_stored_bytes",
           "Stored bytes of the unique chunks, by the codec that stores them", s.stored_by_codec);
  out.single("densefs_recompress_backlog_chunks", "gauge",
             "Chunks queued for the background re-encoder", s.pending_recompress);
  out.single("densefs_snapshot_only_bytes", "gauge",
             "Stored bytes only snapshots keep (what deleting them all gives back to gc)",
             s.snapshot_only_bytes);
  if (!s.payload_location.empty()) {
    out.single("densefs_object_bytes", "gauge", "Bytes of the volume's pack objects",
               s.payload_object_bytes);
    out.single("densefs_cache_bytes", "gauge", "Bytes of this client's local payload cache",
               s.cache_bytes);
  }
  return out.text();
}

}  // namespace densefs::fs
