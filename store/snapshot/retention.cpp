#include "store/snapshot/retention.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <string>

namespace densefs::store {
namespace {

// The calendar bucket of a time, in local time: the day, the ISO week, the
// month.
std::string bucket(std::int64_t seconds, char kind) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  const char* format = kind == 'd' ? "%Y-%m-%d" : kind == 'w' ? "%G-W%V" : "%Y-%m";
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace

std::vector<retention_decision> apply_retention(const std::vector<snapshot_record>& snapshots,
                                                const retention_rule& rule) {
  std::vector<retention_decision> out;
  for (const snapshot_record& s : snapshots)
    if (s.state == snapshot_state::live) out.push_back({s, rule.empty(), {}});
  // Newest first: by creation time, then id (two in one second).
  std::vector<retention_decision*> newest;
  for (retention_decision& d : out) newest.push_back(&d);
  std::stable_sort(newest.begin(), newest.end(), [](const auto* a, const auto* b) {
    return a->snapshot.created != b->snapshot.created ? a->snapshot.created > b->snapshot.created
                                                      : a->snapshot.id > b->snapshot.id;
  });
  for (std::size_t i = 0; i < newest.size() && i < rule.last; ++i) {
    newest[i]->keep = true;
    newest[i]->reasons.push_back("last");
  }
  const auto by_bucket = [&](std::uint32_t count, char kind, const char* reason) {
    std::string seen_last;
    std::uint32_t kept = 0;
    for (retention_decision* d : newest) {
      if (kept == count) return;
      const std::string b = bucket(d->snapshot.created, kind);
      if (b == seen_last) continue;  // not the newest of its bucket
      seen_last = b;
      d->keep = true;
      d->reasons.push_back(reason);
      ++kept;
    }
  };
  by_bucket(rule.daily, 'd', "daily");
  by_bucket(rule.weekly, 'w', "weekly");
  by_bucket(rule.monthly, 'm', "monthly");
  return out;
}

}  // namespace densefs::store
