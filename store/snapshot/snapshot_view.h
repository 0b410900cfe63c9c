// The records of a volume as they were when snapshot S was taken
// (docs/backup.md, "Snapshots"): a read-only metadata_engine over the live
// one (`densefs mount -o snapshot=NAME`). A namespace record's value is its
// first pre-image row at or after (key, S), else its live value; scans
// merge the live range with the pre-image rows of the same range, in every
// scan order. Other tables (chunks, payloads, meta) are the live ones:
// chunks are named by their content, and a snapshot's references keep
// them (store_snapshots.cpp). Writes throw EROFS.
//
// Exact beside a writer, in point reads and scans alike: the live value is
// read first and the pre-images after it, so a commit in between shows in
// neither (what it changed kept its old value in a pre-image of the same
// batch). Each page of a scan is its own read, so a long scan beside
// writers sees each record as it was at S, never a mix within a record.
#pragma once

#include <cstdint>
#include <memory>

#include "store/metadata/metadata_engine.h"

namespace densefs::store {

class snapshot_view final : public metadata_engine {
 public:
  // Reads the snapshot's record (its next_ino); a snapshot without one
  // hides nothing by inode number.
  snapshot_view(const metadata_engine& live, std::uint64_t snapshot);

  std::string_view kind() const override { return live_.kind(); }
  const std::string& where() const override { return where_; }
  std::optional<std::string> get(table t, std::string_view key,
                                 std::string_view what) const override;
  std::vector<std::optional<std::string>> get_many(table t, std::span<const std::string> keys,
                                                   std::string_view what) const override;
  void scan(
      table t, const key_range& range, const scan_options& options, std::string_view what,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) const override;
  void scan_consistent(std::span<const table> tables, std::string_view what,
                       const std::function<void(table t, std::string_view key,
                                                std::string_view value)>& fn) const override;
  std::vector<std::optional<std::string>> get_payloads(std::span<const std::string> keys,
                                                       std::string_view what) const override {
    return live_.get_payloads(keys, what);
  }
  void drop_caches() const override { live_.drop_caches(); }
  std::unique_ptr<metadata_batch> new_batch() const override;
  void write(metadata_batch& batch, bool sync) override;
  void sync() override {}

 private:
  // Forward or backward over the visible records of `range` from `start`
  // (forward: the first key >= start; backward: the last key <= start;
  // empty: the range's end). `fn` returns false to stop.
  void merge(table t, const key_range& range, std::string_view start, bool backward,
             std::string_view what,
             const std::function<bool(std::string_view, std::string_view)>& fn) const;

  const metadata_engine& live_;
  // Whether the snapshot cannot see record `key` of `t` (its inode came
  // later).
  bool born_after(table t, std::string_view key) const;

  std::uint64_t snapshot_;
  std::uint64_t next_ino_ = UINT64_MAX;
  std::string where_;
};

}  // namespace densefs::store
