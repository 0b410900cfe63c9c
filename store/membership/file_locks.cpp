#include "store/membership/file_locks.h"

#include <algorithm>
#include <cerrno>
#include <map>

#include "store/error.h"
#include "store/log.h"
#include "store/metadata/metadata_engine.h"

namespace densefs::store {

namespace {

// Rows read of one file at most: twice the grant bound, as rows of dead
// sessions not yet erased count against a read, never against a grant.
constexpr std::size_t k_max_rows_read = 2 * k_max_locks_per_file;

bool same_owner(const lock_record& row, std::string_view session, const lock_request& r) {
  return row.kind == r.kind && row.owner == r.owner && row.session_id == session;
}

bool overlaps(const lock_record& row, std::uint64_t start, std::uint64_t end) {
  return row.start <= end && start <= row.end;
}

bool conflicts(const lock_record& row, std::string_view session, const lock_request& r) {
  if (row.kind != r.kind || same_owner(row, session, r) || !r.type) return false;
  if (*r.type != lock_type::write && row.type != lock_type::write) return false;
  return r.kind == lock_kind::flock || overlaps(row, r.start, r.end);
}

lock_record row_of(const lock_request& r, std::string_view session) {
  lock_record row;
  row.ino = r.ino;
  row.kind = r.kind;
  row.session_id = std::string(session);
  row.owner = r.owner;
  row.start = r.kind == lock_kind::flock ? 0 : r.start;
  row.end = r.kind == lock_kind::flock ? k_lock_to_end : r.end;
  row.type = r.type.value_or(lock_type::read);
  row.pid = r.pid;
  return row;
}

// An owner's POSIX locks after `r`, as fs/locks.c's posix_lock_inode
// leaves them: the requested range replaced by the new type (or freed),
// what is left of the old locks on either side kept, and neighbours of one
// type (touching or overlapping) merged into one lock.
std::vector<lock_record> owner_locks_after(const std::vector<lock_record>& own,
                                           std::string_view session, const lock_request& r) {
  std::vector<lock_record> out;
  for (const lock_record& old : own) {
    if (!overlaps(old, r.start, r.end)) {
      out.push_back(old);
      continue;
    }
    if (old.start < r.start) {
      lock_record before = old;
      before.end = r.start - 1;
      out.push_back(before);
    }
    if (old.end > r.end) {
      lock_record after = old;
      after.start = r.end + 1;
      out.push_back(after);
    }
  }
  if (r.type) out.push_back(row_of(r, session));
  std::sort(out.begin(), out.end(),
            [](const lock_record& a, const lock_record& b) { return a.start < b.start; });
  std::vector<lock_record> merged;
  for (const lock_record& piece : out) {
    if (!merged.empty()) {
      lock_record& last = merged.back();
      const bool touches = last.end == k_lock_to_end || last.end + 1 >= piece.start;
      if (touches && last.type == piece.type) {
        last.end = std::max(last.end, piece.end);
        if (piece.pid == r.pid) last.pid = r.pid;
        continue;
      }
    }
    merged.push_back(piece);
  }
  return merged;
}

}  // namespace

std::optional<lock_record> first_conflict(std::span<const lock_record> rows,
                                          std::string_view session, const lock_request& r) {
  std::optional<lock_record> first;
  for (const lock_record& row : rows)
    if (conflicts(row, session, r) && (!first || row.start < first->start)) first = row;
  return first;
}

lock_decision decide_lock(std::span<const lock_record> rows, std::string_view session,
                          const lock_request& r) {
  lock_decision d;
  std::vector<lock_record> own;
  for (const lock_record& row : rows)
    if (same_owner(row, session, r)) own.push_back(row);

  if (r.kind == lock_kind::flock) {
    // Linux's flock_lock_inode: the same lock again changes nothing; any
    // other request first drops the owner's lock (a conversion is not
    // atomic: a failed upgrade leaves no lock), then looks for conflicts.
    if (!own.empty() && r.type && own.front().type == *r.type) return d;
    d.conflict = first_conflict(rows, session, r);
    if (r.type && !d.conflict && own.empty() && rows.size() >= k_max_locks_per_file)
      throw store_error(ENOLCK, "inode " + std::to_string(r.ino) + " has " +
                                    std::to_string(k_max_locks_per_file) +
                                    " locks, the most densefs keeps per file");
    if (r.type && !d.conflict) {
      d.put.push_back(row_of(r, session));  // the same key as an old lock: overwrites it
    } else {
      d.erase = own;
    }
    return d;
  }

  // POSIX: nothing changes unless all of it can (a failed upgrade keeps
  // the old lock).
  d.conflict = first_conflict(rows, session, r);
  if (d.conflict) return d;
  const std::vector<lock_record> after = owner_locks_after(own, session, r);
  if (rows.size() - own.size() + after.size() > k_max_locks_per_file)
    throw store_error(ENOLCK, "inode " + std::to_string(r.ino) + " has " +
                                  std::to_string(k_max_locks_per_file) +
                                  " locks, the most densefs keeps per file");
  std::map<std::uint64_t, const lock_record*> before;  // by start: one owner's locks do not overlap
  for (const lock_record& row : own) before.emplace(row.start, &row);
  for (const lock_record& row : after) {
    const auto old = before.find(row.start);
    if (old == before.end() || !(*old->second == row)) d.put.push_back(row);
    if (old != before.end()) before.erase(old);
  }
  for (const auto& [start, row] : before) d.erase.push_back(*row);
  return d;
}

file_locks::file_locks(metadata_engine& engine, std::function<bool(const session_record&)> alive)
    : engine_(engine), alive_(std::move(alive)) {}

void file_locks::set_session(std::string session_id) {
  std::lock_guard lock(mutex_);
  session_id_ = std::move(session_id);
  session_lost_ = false;
}

void file_locks::mark_session_lost() {
  std::lock_guard lock(mutex_);
  session_lost_ = true;
}

void file_locks::in_transaction(
    std::uint64_t ino, bool unlock,
    const std::function<void(const std::string&, std::vector<lock_record>&, metadata_batch&)>&
        decide) {
  std::string session;
  bool lost = false;
  {
    std::lock_guard lock(mutex_);
    session = session_id_;
    lost = session_lost_;
  }
  if (session.empty())
    throw store_error(ENOLCK, "file locks of inode " + std::to_string(ino) +
                                  ": this mount has no session on the volume");
  if (lost && !unlock)
    throw store_error(ENOLCK, "this mount's session " + session +
                                  " was taken for dead by the volume's other clients: its file "
                                  "locks may have been taken; unmount and mount again");
  engine_.update_apart("lock " + std::to_string(ino), [&](locked_reads& reads,
                                                          metadata_batch& batch) {
    std::vector<lock_record> rows;
    for (const auto& [key, value] : reads.scan(table::meta, prefix_range(lock_inode_prefix(ino)),
                                               k_max_rows_read, "reading a file's locks")) {
      try {
        rows.push_back(decode_lock(key, value));
      } catch (const store_error& e) {
        if (!unlock) throw;
        log_error(std::string("skipping a damaged file lock row: ") + e.what());
      }
    }
    sorted_rows sorted =
        sort_rows(std::move(rows), session, [&](const std::vector<std::string>& keys) {
          return reads.get_many(table::meta, keys, "reading the sessions that hold locks");
        });
    if (!sorted.own_session_found && !unlock)
      throw store_error(ENOLCK, "this mount's session " + session +
                                    " is gone from the volume (the other clients took it for dead "
                                    "while it could not reach the database): its file locks may "
                                    "have been taken by others; unmount and mount again");
    for (const lock_record& row : sorted.ended) batch.erase(table::meta, lock_key(row));
    decide(session, sorted.counted, batch);
  });
}

file_locks::sorted_rows file_locks::sort_rows(std::vector<lock_record> rows,
                                              const std::string& session,
                                              const session_reader& read_sessions) const {
  // This client's session first, then each holder's once.
  std::vector<std::string> ids{session};
  for (const lock_record& row : rows)
    if (std::find(ids.begin(), ids.end(), row.session_id) == ids.end())
      ids.push_back(row.session_id);
  std::vector<std::string> keys;
  for (const std::string& id : ids) keys.push_back(session_key(id));
  const std::vector<std::optional<std::string>> found = read_sessions(keys);
  sorted_rows out;
  out.own_session_found = found[0].has_value();
  std::map<std::string, bool> counts;  // by session id: its locks count
  counts[session] = true;
  for (std::size_t i = 1; i < ids.size(); ++i)
    counts[ids[i]] = found[i] && alive_(decode_session(keys[i], *found[i]));
  for (lock_record& row : rows) {
    const std::size_t at =
        static_cast<std::size_t>(std::find(ids.begin(), ids.end(), row.session_id) - ids.begin());
    if (at > 0 && !found[at])
      out.ended.push_back(std::move(row));
    else if (counts[row.session_id])
      out.counted.push_back(std::move(row));
  }
  return out;
}

bool file_locks::set(const lock_request& r, std::optional<lock_record>* in_the_way) {
  bool granted = false;
  if (in_the_way) in_the_way->reset();
  in_transaction(
      r.ino, !r.type,
      [&](const std::string& session, std::vector<lock_record>& rows, metadata_batch& batch) {
        const lock_decision d = decide_lock(rows, session, r);
        for (const lock_record& row : d.erase) batch.erase(table::meta, lock_key(row));
        for (const lock_record& row : d.put)
          batch.put(table::meta, lock_key(row), encode_lock(row));
        granted = !d.conflict;
        if (in_the_way) {
          in_the_way->reset();
          if (d.conflict && d.conflict->session_id == session) *in_the_way = d.conflict;
        }
      });
  if (granted && r.type) {
    std::lock_guard lock(mutex_);
    granted_.insert({r.ino, r.kind, r.owner});
  }
  return granted;
}

std::optional<lock_record> file_locks::test(const lock_request& r) {
  std::string session;
  {
    std::lock_guard lock(mutex_);
    session = session_id_;
  }
  // A plain read: what it answers may change as it returns, transaction
  // or not.
  std::vector<lock_record> rows;
  engine_.scan(table::meta, prefix_range(lock_inode_prefix(r.ino)), {}, "reading a file's locks",
               [&](std::string_view key, std::string_view value) {
                 if (rows.size() >= k_max_rows_read)
                   throw store_error(EIO, "inode " + std::to_string(r.ino) + " has more than " +
                                              std::to_string(k_max_rows_read) + " lock rows");
                 rows.push_back(decode_lock(key, value));
                 return true;
               });
  rows = sort_rows(std::move(rows), session, [&](const std::vector<std::string>& keys) {
           return engine_.get_many(table::meta, keys, "reading the sessions that hold locks");
         }).counted;
  std::optional<lock_record> in_the_way = first_conflict(rows, session, r);
  if (in_the_way && in_the_way->session_id != session) in_the_way->pid = 0;
  return in_the_way;
}

bool file_locks::release(std::uint64_t ino, lock_kind kind, std::uint64_t owner) {
  {
    // Forgotten before the unlock: a lock another thread of the owner is
    // granted meanwhile notes itself again, and its close finds it.
    std::lock_guard lock(mutex_);
    if (granted_.erase({ino, kind, owner}) == 0) return false;
  }
  lock_request r;
  r.ino = ino;
  r.kind = kind;
  r.owner = owner;
  try {
    (void)set(r);  // an unlock of everything: always granted
  } catch (...) {
    std::lock_guard lock(mutex_);
    granted_.insert({ino, kind, owner});
    throw;
  }
  return true;
}

bool file_locks::release_all(std::uint64_t ino, lock_kind kind) {
  std::vector<std::uint64_t> owners;
  {
    std::lock_guard lock(mutex_);
    for (auto it = granted_.lower_bound({ino, kind, 0});
         it != granted_.end() && it->ino == ino && it->kind == kind; ++it)
      owners.push_back(it->owner);
  }
  for (const std::uint64_t owner : owners) release(ino, kind, owner);
  return !owners.empty();
}

bool file_locks::granted_any(std::uint64_t ino) const {
  std::lock_guard lock(mutex_);
  const auto it = granted_.lower_bound({ino, lock_kind{}, 0});
  return it != granted_.end() && it->ino == ino;
}

void file_locks::erase_rows_of(const metadata_engine& engine, const std::set<std::string>& sessions,
                               metadata_batch& batch) {
  if (sessions.empty()) return;
  scan_options options;
  options.fill_cache = false;
  engine.scan(table::meta, prefix_range(k_lock_prefix), options, "listing file locks",
              [&](std::string_view key, std::string_view value) {
                try {
                  if (sessions.contains(decode_lock(key, value).session_id))
                    batch.erase(table::meta, key);
                } catch (const store_error& e) {
                  log_error(std::string("a file lock row: ") + e.what());
                }
                return true;
              });
}

}  // namespace densefs::store
