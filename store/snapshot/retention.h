// Which snapshots a retention rule keeps (`densefs snapshot forget`;
// docs/backup.md, "Snapshots"), as restic's `forget` decides: --keep-last N
// keeps the N newest; --keep-daily N keeps the newest snapshot of each of
// the N newest days that have one (local time); weekly (ISO weeks) and
// monthly the same. A snapshot any rule keeps is kept; with no rule at all
// everything is kept (a rule must be asked for to delete anything).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/snapshot/registry.h"

namespace densefs::store {

struct retention_rule {
  std::uint32_t last = 0;
  std::uint32_t daily = 0;
  std::uint32_t weekly = 0;
  std::uint32_t monthly = 0;
  bool empty() const { return last == 0 && daily == 0 && weekly == 0 && monthly == 0; }
};

struct retention_decision {
  snapshot_record snapshot;
  bool keep = true;
  std::vector<std::string> reasons;  // "last", "daily", ...: the rules that keep it
};

// One decision per live snapshot, oldest first (deleting ones are left out).
std::vector<retention_decision> apply_retention(const std::vector<snapshot_record>& snapshots,
                                                const retention_rule& rule);

}  // namespace densefs::store
