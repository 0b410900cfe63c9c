// How one client takes part in its volume: its role, its session and
// heartbeat, the leases it holds, the files it holds open for others, and
// the change notices it hears (docs/scale-out.md, "Sessions").
//
// A scale-out volume's records are in a shared database (PostgreSQL): each
// mount writes a session row naming its host, pid and mount point, and
// refreshes it every heartbeat_interval() from a thread of its own;
// `densefs status` lists the rows. On a volume that is not shared (the
// embedded store, whose lock file names the one mount) every call gives the
// answer of a writer alone and writes nothing.
//
// Owned by store::store, which builds it at open over the volume's metadata
// engine; fs/ asks it through store::membership(). It knows records
// (records.h) and the engine's interface (metadata_engine.h), not which
// engine it is.
//
// Threading: every method is safe from any thread. The heartbeat runs on a
// thread begin() starts and end() (or the destructor) joins; no lock is
// held across a database round trip.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "store/membership/change_notice.h"
#include "store/membership/file_locks.h"
#include "store/records.h"

namespace densefs::store {

class metadata_engine;

// How this client takes part in its volume, one value set when the store
// opens (docs/scale-out.md). The store and fs/ ask it rather than which
// engine the store has.
enum class volume_role {
  // No other client writes beside it: the embedded store (its lock admits
  // one process), a scale-out volume's one writer, a read-only tool.
  alone,
  // One of several writers of a scale-out volume (-o shared).
  writer_beside_others,
  // A scale-out volume's reader beside its writer (-o ro).
  follower,
};

class volume_membership {
 public:
  // `engine`: the volume's records (outlives this). `client_dir`: this
  // client's store directory, where the id of its last session is kept
  // (SESSION.densefs, docs/format.md) so that the next mount there knows
  // that session is over. `shared`: the records are in a shared database.
  // `read_only`: a tool that only reads (a follower is read-only too, but
  // writes its own session and hold rows).
  volume_membership(metadata_engine& engine, std::filesystem::path client_dir, volume_role role,
                    bool shared, bool read_only);
  ~volume_membership();  // end(), errors logged
  volume_membership(const volume_membership&) = delete;
  volume_membership& operator=(const volume_membership&) = delete;

  volume_role role() const { return role_; }
  bool follows() const { return role_ == volume_role::follower; }
  bool writes_beside_others() const { return role_ == volume_role::writer_beside_others; }
  // The volume keeps sessions: its records are in a shared database.
  bool keeps_sessions() const { return shared_; }

  // Announces this mount: writes its session row and starts the heartbeat.
  // A writer also deletes the rows of sessions that stopped without ending
  // (a daemon that was killed) and, alone, of every other writer (it holds
  // the volume's lock). A follower, or a writer beside others, waits (up to
  // 30 s) until the live writers answer (answer_sessions) that what they
  // closed before is committed: close-to-open from the first open.
  void begin(const std::string& mountpoint);
  // Stops the heartbeat and erases the session row, the leases it holds
  // and (a follower's, a shared writer's) its holds.
  void end();
  // The id of the session begin() announced ("" before it).
  const std::string& session_id() const { return session_id_; }
  std::vector<session_record> sessions() const;
  // The session rows of `engine`'s volume (for `densefs status`, with no
  // membership of its own).
  static std::vector<session_record> sessions_in(const metadata_engine& engine);

  // DENSEFS_HEARTBEAT_SECONDS (1..3600; tests) or 10 s; a session is
  // expired after three intervals without a heartbeat.
  static std::chrono::seconds heartbeat_interval();
  // How long the writer keeps what another client may still be about to
  // use (an emptied pack object, an unlinked file): one interval past a
  // session's expiry.
  static std::chrono::seconds other_clients_grace() { return 4 * heartbeat_interval(); }
  static bool session_expired(const session_record& r, std::int64_t now_unix);
  // For `densefs status`: two heartbeats missed. Shown as not alive at
  // least an interval before a writer beside it can take the session for
  // gone and erase its row (expired, three intervals, and its heartbeat
  // seen standing still that long), so that a killed client is seen as
  // such for a while instead of only ageing and vanishing.
  static bool session_late(const session_record& r, std::int64_t now_unix) {
    return now_unix - r.heartbeat > 2 * heartbeat_interval().count();
  }
  // Whether another client's session counts as alive, for what is taken
  // from the dead (their orphans, their unfinished new files). By the
  // clock alone a session expires three intervals after its last
  // heartbeat; but after the database was unreachable for that long, every
  // session looks expired (none could beat), and the first writer back
  // must not take the others for dead. So with a heartbeat (begin), an
  // expired session is dead only once its heartbeat has stood still while
  // this client's own heartbeats went through, each on time (a failed or
  // late one starts the count again), for more than three intervals; a
  // row that appeared since the last heartbeat is alive. Without a
  // heartbeat (tools), the clock decides.
  bool session_alive(const session_record& r) const;

  // The writer: whether another client (a follower) had a live session at
  // the last heartbeat, or has mounted since (note_other_client). Then
  // close waits for the commit, so that an open on that client sees the
  // file whole (close-to-open; docs/scale-out.md).
  bool others_mounted() const { return others_mounted_.load(std::memory_order_relaxed); }
  // The writer: another client has mounted (heard from it at once, not at
  // the next heartbeat): close commits from now on.
  void note_other_client() { others_mounted_.store(true, std::memory_order_relaxed); }
  // A tool that writes (gc) counts the mounts as other clients at open.
  void count_others_now();
  // Whether a writer other than this one has a live session on the volume.
  bool other_writers_alive() const;

  // The file locks every client of the volume sees (file_locks.h): the
  // mount serves flock and fcntl locks through it where the volume keeps
  // sessions. Their rows go with this session's at end(), and with a dead
  // session's when a client erases it.
  file_locks& locks() { return locks_; }

  // Background work one writer of a shared volume does at a time
  // (k_lease_re_encoder, k_lease_gc): takes or renews the lease, for three
  // heartbeat intervals, unless another live session holds it. The
  // heartbeat renews the leases held; a lease whose holder stopped renewing
  // it can be taken once it ends. A client with no writer beside it always
  // holds every lease.
  bool take_lease(std::string_view name);
  bool holds_lease(std::string_view name) const;
  static constexpr std::string_view k_lease_re_encoder = "recompress";
  static constexpr std::string_view k_lease_gc = "gc";

  // `fn` runs on the heartbeat thread after each heartbeat (fs queues the
  // release of unlinked files no client holds any more); an empty `fn`
  // stops it, and returns once a running call has finished.
  void on_heartbeat(std::function<void()> fn);

  // Unlinked files open on a follower (docs/scale-out.md, "Unlinked while
  // open elsewhere"). A follower holds a file it has open once it learns
  // that the writer unlinked it, and releases it at its last close (its
  // rows also go when its session ends); the writer releases an unlinked
  // file's data only while no live session holds it.
  void hold_inode(std::uint64_t ino);
  void release_inode_hold(std::uint64_t ino);
  // The writer: the inodes that live sessions hold. Rows of sessions that
  // ended are erased on the way.
  std::set<std::uint64_t> held_inodes();

  // A follower, or a writer beside others: calls `fn` from the engine's
  // thread with every change the others commit, decoded (missed or
  // unreadable notices arrive as `everything`; a writer's own commits only
  // with the sessions they start). The writer alone: calls `fn` only with
  // the sessions of followers that just mounted (sessions_started), which
  // wait until answer_sessions tells them that everything closed so far is
  // committed. False where nothing is heard (not shared, a read-only
  // tool). unwatch() returns once `fn` runs no more.
  bool watch(std::function<void(const change_notice&)> fn);
  void unwatch();
  // The writer: tells the followers `ids` (change_notice::sessions_started)
  // that what was closed before they mounted is committed. Returns at once:
  // the answer goes with the session row's next write, which the heartbeat
  // thread makes now.
  void answer_sessions(const std::vector<std::string>& ids);

 private:
  metadata_engine& engine_;
  const std::filesystem::path client_dir_;
  const volume_role role_;
  const bool shared_;
  const bool read_only_;

  // One meta row put (`value`) or erased (nullopt) in a write of its own.
  void write_meta_row(std::string_view key, std::optional<std::string_view> value);
  void heartbeat_loop();
  void beat();

  // The session begin() announced, and its heartbeat. After begin(), the
  // heartbeat thread is the session row's only writer: a second writer
  // would move the row under the heartbeat's expectation, which then reads
  // as the row erased by another client (all file locks refused).
  std::mutex session_mutex_;
  std::condition_variable session_wake_;
  std::optional<session_record> session_;
  bool session_stop_ = false;
  std::vector<std::string> answers_due_;  // answer_sessions's, for the next write
  std::thread heartbeat_thread_;
  std::string session_id_;  // set by begin() before its thread starts
  // The session row as this client last wrote it (the heartbeat thread's;
  // nullopt after a failed write: unknown). A heartbeat expects it there:
  // gone means the others took this client for dead, and may have taken
  // its file locks.
  std::optional<std::string> session_row_;
  std::mutex heartbeat_hook_mutex_;  // held while the hook runs
  std::function<void()> heartbeat_hook_;

  file_locks locks_;

  // Another live session at the last heartbeat (the writer; others_mounted).
  std::atomic<bool> others_mounted_{false};
  // `announce`: log a change (not at mount, while stderr is the user's).
  void count_others(const std::vector<session_record>& all, std::int64_t now_unix, bool announce);

  // session_alive's record: each other session's heartbeat as last read,
  // and since when (this client's clock) it has read the same; cleared
  // when a heartbeat fails, so that standing still is measured only across
  // heartbeats that went through.
  struct observed_beat {
    std::int64_t heartbeat = 0;
    std::chrono::steady_clock::time_point since{};
  };
  mutable std::mutex observed_mutex_;
  std::map<std::string, observed_beat> observed_;
  std::chrono::steady_clock::time_point last_observed_{};
  bool observing_ = false;  // a heartbeat thread runs
  void observe_sessions(const std::vector<session_record>& all);
  // A writer beside others, after each heartbeat: erases the rows of the
  // sessions session_alive finds dead (what they held then counts as
  // gone: their holds, their unfinished new files).
  void erase_dead_sessions(const std::vector<session_record>& all);

  mutable std::mutex lease_mutex_;
  std::set<std::string, std::less<>> leases_;  // held (take_lease)
};

}  // namespace densefs::store
