#include "store/snapshot/pre_image_writer.h"

#include "store/records.h"
#include "store/snapshot/pre_image.h"

namespace densefs::store {
namespace {

// Bounds the cache of records kept since the latest snapshot (about 100 MB
// at its fullest); past it, keys are looked up among the pre-image rows.
constexpr std::size_t k_max_kept = 1u << 20;

std::string cache_key(table t, std::string_view key) {
  std::string k(1, static_cast<char>(t));
  k += key;
  return k;
}

}  // namespace

void pre_image_writer::reset(std::uint64_t latest, std::uint64_t next_ino) {
  if (latest == latest_ && next_ino == next_ino_) return;
  latest_ = latest;
  next_ino_ = next_ino;
  kept_.clear();
}

bool pre_image_writer::may_need(table t, std::string_view key) const {
  if (latest_ == 0 || !is_pre_imaged(t)) return false;
  const auto ino = owner_ino(key);
  if (ino && *ino >= next_ino_) return false;  // did not exist at the snapshot
  return kept_.empty() || !kept_.contains(cache_key(t, key));
}

pre_image_writer::added pre_image_writer::add(const record_changes& changes, locked_reads& reads,
                                              metadata_batch& batch) const {
  added out;
  if (latest_ == 0) return out;
  // The records that may need one, by table.
  std::map<table, std::vector<std::string>> wanted;
  for (const auto& [tk, value] : changes) {
    const auto& [t, key] = tk;
    if (may_need(t, key)) wanted[t].push_back(key);
  }
  for (const auto& [t, keys] : wanted) {
    std::vector<std::string> rows;
    rows.reserve(keys.size());
    for (const std::string& k : keys) rows.push_back(pre_image_key(t, k, latest_));
    const auto already = reads.get_many(table::meta, rows, "the pre-images of a commit");
    std::vector<std::string> unkept;
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (already[i]) {
        out.kept.push_back(cache_key(t, keys[i]));
      } else {
        unkept.push_back(keys[i]);
        at.push_back(i);
      }
    }
    if (unkept.empty()) continue;
    const auto before = reads.get_many(t, unkept, "the records before a commit");
    for (std::size_t j = 0; j < unkept.size(); ++j) {
      const std::optional<std::string>& after = changes.at({t, unkept[j]});
      // A change that changes nothing needs no pre-image (yet).
      if (after == before[j]) continue;
      batch.put(
          table::meta, rows[at[j]],
          encode_pre_image(before[j] ? std::optional<std::string_view>(*before[j]) : std::nullopt));
      if (t == table::extents && before[j]) out.held.push_back(decode_extent(*before[j]).hash);
      out.kept.push_back(cache_key(t, unkept[j]));
    }
  }
  return out;
}

void pre_image_writer::remember(std::vector<std::string> kept) {
  for (std::string& k : kept) {
    if (kept_.size() >= k_max_kept) return;
    kept_.insert(std::move(k));
  }
}

}  // namespace densefs::store
