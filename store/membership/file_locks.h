// File locks that every client of a scale-out volume sees (docs/scale-out.md,
// "Locks across clients"): flock(2) and POSIX record locks (fcntl F_SETLK,
// F_SETLKW, F_GETLK) kept as `lock/` rows of the volume's database
// (records.h), so that a lock taken on one machine excludes a conflicting
// one on another, with the kernel's rules on each (fs/locks.c): an owner's
// own locks are replaced, split and merged, a failed upgrade keeps the old
// lock, a flock conversion drops the old lock first, flock and POSIX locks
// do not interact.
//
// An owner is (session, the kernel's lock owner): the kernel's owner ids
// are unique only within one mount. Locks of a session that ended are
// erased on the way; locks of a session that volume_membership finds dead
// (session_alive) do not count. Each request is one transaction, serialised
// per file across the clients (metadata_engine::update_apart), that first
// checks that this client's own session row is still there: a client the
// others took for dead may have lost its locks, and is told so (ENOLCK)
// rather than granted anew.
//
// decide_lock and first_conflict are the rules alone, over a file's rows;
// file_locks runs them in the transaction. Waiting for a lock (F_SETLKW,
// flock without LOCK_NB) is the caller's: fs/lock_waiters.h retries.
//
// Threading: every method is safe from any thread; no lock is held across
// a round trip.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "store/records.h"

namespace densefs::store {

class metadata_engine;
struct session_record;

// One request, as the kernel sends it: who, which bytes (inclusive; a
// flock is always the whole file) and what (nullopt: unlock).
struct lock_request {
  std::uint64_t ino = 0;
  lock_kind kind = lock_kind::posix;
  std::uint64_t owner = 0;
  std::uint64_t start = 0;
  std::uint64_t end = k_lock_to_end;
  std::optional<lock_type> type;
  std::uint32_t pid = 0;
};

// A file can hold this many lock rows; a request that would make more is
// refused (ENOLCK), and a file with more is corruption (EIO): memory stays
// bounded.
inline constexpr std::size_t k_max_locks_per_file = 4096;

// What a request does to a file's rows (`rows`: the file's locks that
// count, in any order; `session`: the requester's session).
struct lock_decision {
  std::optional<lock_record> conflict;  // set: not granted (EAGAIN)
  std::vector<lock_record> put;         // rows to write (new or changed)
  std::vector<lock_record> erase;       // rows to delete
};
lock_decision decide_lock(std::span<const lock_record> rows, std::string_view session,
                          const lock_request& r);
// F_GETLK: the first lock of another owner that `r` (a read or write
// request) would conflict with, in key order.
std::optional<lock_record> first_conflict(std::span<const lock_record> rows,
                                          std::string_view session, const lock_request& r);

class file_locks {
 public:
  // `alive`: whether another client's session counts as alive
  // (volume_membership::session_alive). `session_id`: this client's.
  file_locks(metadata_engine& engine, std::function<bool(const session_record&)> alive);
  void set_session(std::string session_id);
  // This client's session row was erased by another client (the
  // heartbeat found it gone): every request fails with ENOLCK from now on.
  void mark_session_lost();

  // F_SETLK / flock with LOCK_NB, and one try of a waiting request: true
  // when granted (or unlocked), false when another owner's lock is in the
  // way (nothing changed, but for a flock conversion, which drops the old
  // lock first as on Linux). Throws store_error: ENOLCK when this client's
  // session is gone or the file has too many locks.
  // `in_the_way`: set to the lock that refused it, this client's only
  // (whose owner means something here: deadlock detection); else cleared.
  bool set(const lock_request& r, std::optional<lock_record>* in_the_way = nullptr);
  // F_GETLK: the lock in the way, nullopt when there is none. The pid is
  // set only for this client's own locks (another machine's pid would
  // name the wrong process here).
  std::optional<lock_record> test(const lock_request& r);
  // Unlock on close (FLUSH): every POSIX lock of `owner` on `ino`; flock's
  // last close (RELEASE): its flock lock. Costs no round trip when that
  // owner took no lock of that kind there since its last release; returns
  // whether it looked.
  bool release(std::uint64_t ino, lock_kind kind, std::uint64_t owner);
  // The last close of `ino` on this client: every lock of `kind` this
  // client's owners still hold there (OFD locks, whose close the kernel
  // names no owner for). Returns whether it looked.
  bool release_all(std::uint64_t ino, lock_kind kind);
  // Whether a close of `ino` may let go of a lock (a round trip): an owner
  // of this client was granted one of it and has not been released since.
  bool granted_any(std::uint64_t ino) const;

  // Into `batch`: erases every lock row of `sessions` (ended or dead).
  // Scans the volume's lock rows (few: one per lock held).
  static void erase_rows_of(const metadata_engine& engine, const std::set<std::string>& sessions,
                            class metadata_batch& batch);

 private:
  metadata_engine& engine_;
  const std::function<bool(const session_record&)> alive_;

  // One request's transaction: the file's rows, those of sessions that
  // ended erased, of dead ones left out; `decide` then fills the batch.
  // Throws ENOLCK when this session's row is gone.
  // `decide` gets this client's session id too. Unlocks go on past rows
  // that cannot be decoded (skipped, logged): a damaged row must not keep
  // a file locked.
  void in_transaction(
      std::uint64_t ino, bool unlock,
      const std::function<void(const std::string& session, std::vector<lock_record>& counted,
                               class metadata_batch& batch)>& decide);

  // Which of a file's `rows` count, by their sessions' rows, which
  // `read_sessions` reads (the keys in, the values out, one round trip):
  // this client's own (`session`) always, others' while their session is
  // alive. `ended`: rows whose session row is gone (a crash before the
  // session's end), for a writing caller to erase.
  struct sorted_rows {
    std::vector<lock_record> counted;
    std::vector<lock_record> ended;
    bool own_session_found = false;
  };
  using session_reader =
      std::function<std::vector<std::optional<std::string>>(const std::vector<std::string>& keys)>;
  sorted_rows sort_rows(std::vector<lock_record> rows, const std::string& session,
                        const session_reader& read_sessions) const;

  mutable std::mutex mutex_;
  std::string session_id_;
  bool session_lost_ = false;
  // The owners of this client that were granted a lock of a file (maybe
  // unlocked since), until their release: a close by anyone else costs no
  // round trip.
  struct owner_key {
    std::uint64_t ino;
    lock_kind kind;
    std::uint64_t owner;
    auto operator<=>(const owner_key&) const = default;
  };
  std::set<owner_key> granted_;
};

}  // namespace densefs::store
