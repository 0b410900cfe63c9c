#include "tools/render.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tools/format.h"

namespace densefs::tools {
namespace {

std::uint64_t u64(const json& j, const char* key) {
  return j.at(key).get<std::uint64_t>();
}

// "22.4%" of `plain` saved; "-" when there is nothing.
std::string human_savings(std::uint64_t plain, std::uint64_t stored) {
  if (plain == 0) return "-";
  const double saved = 100.0 * (1.0 - static_cast<double>(stored) / static_cast<double>(plain));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", saved);
  return buf;
}

}  // namespace

std::string render_stats(const std::string& source, const json& j) {
  const std::uint64_t logical = u64(j, "logical_bytes");
  const std::uint64_t stored = u64(j, "stored_bytes");
  std::vector<std::vector<std::string>> rows = {
      {"store", source},
      {"files", std::to_string(u64(j, "files")) + " (" + std::to_string(u64(j, "directories")) +
                    (u64(j, "directories") == 1 ? " directory)" : " directories)")},
      {"logical size", human_size(logical)},
      {"stored size", human_size(stored)},
      {"stored/logical", human_ratio(stored, logical)},
      {"unique chunks", std::to_string(u64(j, "chunks")) + " (" +
                            human_size(u64(j, "unique_plain_bytes")) + " plain)"},
      {"dedup savings", human_size(u64(j, "dedup_saved_bytes"))},
      {"store on disk", human_size(u64(j, "disk_bytes"))},
  };
  std::string out = format_table(rows);

  if (j.contains("pending_recompress") && u64(j, "pending_recompress") != 0) {
    out += "background re-encoding: " + std::to_string(u64(j, "pending_recompress")) +
           " chunks queued\n";
  }

  std::vector<std::vector<std::string>> codecs = {{"codec", "chunks", "plain", "stored", "saved"}};
  for (const auto& [name, c] : j.at("codecs").items()) {
    const std::uint64_t plain = c.value("plain_bytes", std::uint64_t{0});
    const std::uint64_t stored_c = u64(c, "stored_bytes");
    codecs.push_back({name, std::to_string(u64(c, "chunks")), human_size(plain),
                      human_size(stored_c), human_savings(plain, stored_c)});
  }
  if (codecs.size() > 1) out += "\n" + format_table(codecs);
  if (j.contains("lepton_files")) {
    const json& l = j.at("lepton_files");
    const std::uint64_t plain = u64(l, "plain_bytes");
    const std::uint64_t stored_l = u64(l, "stored_bytes");
    out += "JPEGs as one Lepton file (lepton_file + lepton_member): " +
           std::to_string(u64(l, "files")) + ", " + human_size(plain) + " -> " +
           human_size(stored_l) + " (" + human_savings(plain, stored_l) + " saved)\n";
  }

  if (j.contains("types") && !j.at("types").empty()) {
    std::vector<std::vector<std::string>> types = {
        {"file type", "files", "logical", "stored", "saved", "fallbacks"}};
    for (const auto& [name, t] : j.at("types").items()) {
      const std::uint64_t plain = u64(t, "logical_bytes");
      const std::uint64_t stored_t = u64(t, "stored_bytes");
      types.push_back({name, std::to_string(u64(t, "files")), human_size(plain),
                       human_size(stored_t), human_savings(plain, stored_t),
                       std::to_string(u64(t, "fallbacks"))});
    }
    out += "\n" + format_table(types);
  }
  if (j.contains("policy")) out += "\npolicy: " + j.at("policy").get<std::string>() + "\n";
  if (j.contains("payload_backend")) {
    out += "payloads: " + j.at("payload_backend").get<std::string>();
    if (j.contains("pack_files"))
      out += " (" + std::to_string(u64(j, "pack_files")) + " pack files, read with " +
             j.value("pack_reader", std::string("?")) + ")";
    out += "\n";
  }
  if (j.contains("payload_location"))
    out += "packs in: " + j.at("payload_location").get<std::string>() + " (" +
           human_size(u64(j, "payload_object_bytes")) + "; local cache " +
           human_size(u64(j, "cache_bytes")) + " of " + human_size(u64(j, "cache_capacity")) +
           ")\n";
  if (j.contains("object_requests")) {
    const auto& r = j.at("object_requests");
    out += "object store requests since open: " + std::to_string(u64(r, "put")) + " PUT (" +
           human_size(u64(r, "bytes_sent")) + "), " + std::to_string(u64(r, "get")) + " GET (" +
           human_size(u64(r, "bytes_received")) + "), " + std::to_string(u64(r, "head")) +
           " HEAD, " + std::to_string(u64(r, "list")) + " LIST, " +
           std::to_string(u64(r, "delete")) + " DELETE\n";
  }
  if (j.contains("metadata_engine"))
    out += "records: " + j.at("metadata_engine").get<std::string>() + " (" +
           j.value("metadata_location", std::string("?")) + ")\n";
  if (j.value("encryption", std::string("none")) != "none")
    out += "encrypted at rest: " + j.at("encryption").get<std::string>() + "\n";
  if (u64(j, "snapshots") > 0)
    out += "snapshots: " + std::to_string(u64(j, "snapshots")) + ", keeping " +
           human_size(u64(j, "snapshot_only_bytes")) + " no live file uses\n";
  if (j.contains("requests") && j.at("requests").is_object() && !j.at("requests").empty()) {
    // A live mount's FUSE requests, most frequent first.
    std::vector<std::pair<std::uint64_t, std::string>> kinds;
    std::uint64_t total = 0;
    for (const auto& [name, count] : j.at("requests").items()) {
      const auto n = count.is_number_unsigned() ? count.get<std::uint64_t>() : 0;
      kinds.emplace_back(n, name);
      total += n;
    }
    std::sort(kinds.begin(), kinds.end(), std::greater<>());
    out += "requests since mount: " + std::to_string(total) + " (";
    for (std::size_t i = 0; i < kinds.size(); ++i)
      out += (i ? ", " : "") + kinds[i].second + " " + std::to_string(kinds[i].first);
    out += ")\n";
  }
  if (j.contains("inodes") && j.at("inodes").is_object()) {
    // A live mount's nodes, and the inodes the kernel remembers parked.
    out += "inodes in memory: " + std::to_string(u64(j.at("inodes"), "in_memory")) +
           ", parked: " + std::to_string(u64(j.at("inodes"), "parked")) + "\n";
  }
  return out;
}

std::string render_info(const std::string& path, const json& j, bool abbreviate_hashes) {
  const std::uint64_t size = u64(j, "size");
  const std::uint64_t stored = u64(j, "stored_bytes");
  const json& chunks = j.at("chunks");
  const std::uint64_t count = j.contains("chunk_count") ? u64(j, "chunk_count") : chunks.size();
  std::string out = path + ": " + j.at("type").get<std::string>() +
                    (j.contains("snapshot")
                         ? " of snapshot " + j.at("snapshot").get<std::string>() + " (read-only)"
                         : std::string()) +
                    ", inode " + std::to_string(u64(j, "ino")) + ", size " + human_size(size) +
                    ", stored " + human_size(stored) + " (" + human_ratio(stored, size) + "), " +
                    std::to_string(count) + (count == 1 ? " chunk" : " chunks");
  if (const auto shared = j.value<std::uint64_t>("shared_chunks", 0); shared != 0) {
    out += ", " + std::to_string(shared) + " shared (" +
           human_size(j.value<std::uint64_t>("shared_bytes", 0)) +
           " stored once for several references)";
  }
  if (const std::uint64_t pending = u64(j, "pending_bytes"); pending != 0) {
    out += ", " + human_size(pending) + " not yet flushed";
  }
  out += '\n';
  if (j.contains("file_type")) {
    out += "file type " + j.at("file_type").get<std::string>() + ", policy codec " +
           j.at("policy_codec").get<std::string>();
    if (j.contains("policy_chunker"))
      out += ", chunker " + j.at("policy_chunker").get<std::string>();
    if (j.value("fell_back", false)) out += " (some chunks fell back to another codec)";
    if (j.contains("payload_backend"))
      out += ", " + j.at("payload_backend").get<std::string>() + " payloads";
    out += '\n';
  }
  if (chunks.empty()) return out;

  std::vector<std::vector<std::string>> rows = {
      {"offset", "length", "codec", "plain", "stored", "refs", "hash"}};
  for (const json& c : chunks) {
    std::string hash = c.at("hash").get<std::string>();
    // A terminal gets a recognisable prefix; a pipe gets the whole hash.
    if (abbreviate_hashes && hash.size() > 16) hash = hash.substr(0, 16) + "...";
    rows.push_back({std::to_string(u64(c, "offset")), std::to_string(u64(c, "length")),
                    c.at("codec").get<std::string>(), std::to_string(u64(c, "plain_size")),
                    std::to_string(u64(c, "stored_size")) +
                        (c.value("recompress_queued", false) ? " (queued)" : ""),
                    std::to_string(u64(c, "refcount")), hash});
  }
  out += format_table(rows);
  if (chunks.size() < count) {
    out += "(the first " + std::to_string(chunks.size()) + " of " + std::to_string(count) +
           " chunks; the mount owner sees all of them)\n";
  }
  return out;
}

}  // namespace densefs::tools
