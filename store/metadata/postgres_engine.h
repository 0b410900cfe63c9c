// The scale-out metadata engine: a volume's records in a PostgreSQL database,
// one table per store::table with the key and the value as bytea, holding the
// same bytes as rocksdb_engine (store/metadata/metadata_engine.h, docs/scale-out.md).
//
// Connections: a small pool of libpq connections (libpq connections are not
// thread-safe), each method holds one for its duration. Every connection
// stays in libpq's pipeline mode, so a batch of many statements (or a scan's
// BEGIN and first page) is one round trip. Credentials never pass through
// densefs: libpq reads them from PGPASSWORD, ~/.pgpass or the connection
// string, and where() and every message name only host, port and database.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "store/metadata/metadata_engine.h"

struct pg_conn;  // libpq's PGconn

namespace densefs::store {

struct postgres_engine_options {
  // A libpq connection string: "host=db1 dbname=vol1 user=densefs" or a
  // "postgresql://user@db1:5432/vol1" URI. Empty: libpq's defaults (PGHOST,
  // PGDATABASE, ... from the environment).
  std::string conninfo;
  std::size_t connections = 4;  // the pool's size: concurrent statements at most
  bool read_only = false;       // write() throws EROFS; sessions are read-only too
  // A read-write engine takes the volume's advisory lock (one writer per
  // volume). False: a follower beside the writer, which writes nothing but
  // its own session row (store_open_options::follower).
  bool lock_volume = true;
  // With lock_volume: one of several writers of the volume. The volume's
  // lock is taken shared (beside other sharing writers, never beside a
  // writer that has it alone), and every write takes turns with the
  // others' (metadata_engine::write_locked). Several writers need the
  // store's read-modify-writes to go through write_locked
  // (store_open_options::shared_writer).
  bool share_volume = false;
};

// The version of the schema create() makes (the densefs_schema row). open()
// refuses a database whose version is newer.
inline constexpr int k_postgres_schema_version = 1;

class postgres_engine final : public metadata_engine {
 public:
  // Connects and checks the schema: store_error(ENOENT) without densefs
  // tables, EPROTONOSUPPORT for a newer schema version, EIO when the server
  // cannot be reached or refuses. Messages are one line, without passwords.
  // A read-write engine takes the volume's advisory lock: EBUSY when another
  // read-write engine (another mount or tool, on any machine) holds it.
  static std::unique_ptr<postgres_engine> open(const postgres_engine_options& options);
  // mkfs: creates the tables and the schema-version row in one transaction.
  // store_error(EEXIST) when densefs tables already exist there.
  static void create(const postgres_engine_options& options);
  ~postgres_engine() override;
  // Whether `conninfo` spells out a password (password=..., a URI's
  // user:password@ or ?password=), which must not be written into files
  // (mkfs refuses it for STORE/FORMAT).
  static bool names_a_password(std::string_view conninfo);

  std::string_view kind() const override { return "postgresql"; }
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
  std::unique_ptr<metadata_batch> new_batch() const override;
  // A sharing writer (postgres_engine_options::share_volume): one
  // transaction that takes the section's transaction-level advisory lock,
  // runs `build`'s reads and applies its batch; the lock goes with the
  // commit. Others: metadata_engine's.
  void write_locked(std::string_view section,
                    const std::function<void(locked_reads&, metadata_batch&)>& build,
                    bool sync) override;
  // Any client that writes rows (a writer, a follower): the same
  // transaction without the volume's lock check or the commit section.
  void update_apart(std::string_view section,
                    const std::function<void(locked_reads&, metadata_batch&)>& build) override;
  // One implicit transaction of pipelined statements. Durable when it
  // returns, with `sync` or without (the sessions keep synchronous_commit on).
  void write(metadata_batch& batch, bool sync) override;
  void sync() override {}
  // Every write is durable when it returns (synchronous_commit), so bytes
  // outside the database a write names must be durable before it.
  bool writes_are_durable() const override { return true; }
  bool reads_are_round_trips() const override { return true; }
  std::uint64_t round_trips() const override { return round_trips_.load(); }
  std::uint64_t lock_retakes() const override { return lock_retakes_.load(); }
  // LISTEN on the volume's channel, on a connection of its own; notices
  // are NOTIFYs that write() sends in the batch's transaction.
  bool watch(std::function<void(std::string_view notice)> fn) override;
  void unwatch() override;
  bool write_and_await(metadata_batch& batch,
                       const std::function<bool(std::string_view notice)>& answer,
                       std::chrono::milliseconds timeout) override;

  // Private parts, public for postgres_engine.cpp's helpers only.
  struct connection;
  class lease;
  class transaction_reads;
  // write_locked and update_apart: `of_volume` checks the volume's lock.
  void locked_transaction(std::string_view section,
                          const std::function<void(locked_reads&, metadata_batch&)>& build,
                          bool of_volume);

 private:
  explicit postgres_engine(const postgres_engine_options& options);

  std::string conninfo_;
  bool read_only_ = false;
  bool shares_volume_ = false;
  std::string where_;
  // The pool: connections not in use (`idle_`, some not connected yet)
  // and the count of those in use (`busy_`), at most `capacity_` together
  // unless a thread takes a second one. Guarded by mutex_; leases wait on
  // available_.
  std::size_t capacity_;
  mutable std::mutex mutex_;
  mutable std::condition_variable available_;
  mutable std::vector<std::unique_ptr<connection>> idle_;
  mutable std::size_t busy_ = 0;
  // Read-write engines: a connection of its own holding the volume's
  // advisory lock for the engine's life, alone (one writer per volume) or
  // shared with other sharing writers (docs/scale-out.md). PGconn, closed
  // with PQfinish. Under lock_mutex_ after open().
  void take_volume_lock(const std::string& what);
  // After a write found the volume's lock lost (k_lock_lost_sqlstate,
  // nothing applied): takes it again, or throws EIO saying why not. A
  // second loss in one write (`attempt` > 0) is EIO too.
  // `failed_check`: the check that found it lost (lock_check_sql_ then).
  void retake_volume_lock(int attempt, const std::string& what, const std::string& failed_check);
  std::mutex lock_mutex_;
  std::shared_ptr<void> volume_lock_;
  std::atomic<std::uint64_t> lock_retakes_{0};         // lock_retakes()
  mutable std::atomic<std::uint64_t> round_trips_{0};  // round_trips(): lease::run counts
  // The engine writes only while it holds the volume's lock (once lost and
  // not taken again, every write tries to take it first).
  bool locks_volume_ = false;
  // The statement a write checks the volume's lock with, once this engine
  // holds it again if it had lost it; "" for an engine without the lock.
  // Throws EIO when the lock cannot be taken again.
  std::string volume_lock_check(const std::string& what);
  // The statement each write begins with: fails with k_lock_lost_sqlstate
  // (division_by_zero: it divides by whether the lock's key is taken)
  // unless the lock's session still holds it.
  std::string lock_check_sql_;
  static constexpr const char* k_lock_lost_sqlstate = "22012";

  // Each write of a read-write engine also rewrites one row of its own in
  // densefs_meta, `commit_outcome/` + 16 hex digits drawn at open + `/` +
  // the number of the pool's connection it runs on, with a token that
  // write alone uses: after a connection lost during a write, the row tells
  // whether that write committed (await_outcome; docs/scale-out.md, "A
  // commit whose outcome is unknown"). One row per connection, not per
  // engine: a write on another connection must not overwrite the row before
  // it is read.
  std::string outcome_key_;
  std::atomic<std::uint64_t> next_token_{1};
  // The connection numbers in use (the pool's and the extra ones), under
  // mutex_: the lowest free one goes to a new connection.
  mutable std::vector<bool> slots_;
  // The key of the outcome row of writes on `l`'s connection ("" for an
  // engine without them).
  std::string outcome_row(const class lease& l) const;
  enum class outcome { committed, not_committed };
  // On a new connection: waits (at most ~10 s, ending it if need be) until
  // the server process of the lost connection is gone, so that its
  // transaction has ended one way or the other, then reads the row `key`.
  // Throws store_error(EIO) when it cannot tell.
  outcome await_outcome(class lease& l, const std::pair<int, std::string>& lost_backend,
                        const std::string& key, std::uint64_t token, const std::string& what);
  // Waits (at most ~10 s) until the server process `lost_backend` is gone,
  // ending it if need be; throws store_error(EIO) naming `what` when it
  // cannot tell.
  void end_backend(class lease& l, const std::pair<int, std::string>& lost_backend,
                   const std::string& what);
  // After `lost` (the connection lost while a write's last statements were
  // sent on `l`): whether that write committed (await_outcome), so the
  // caller returns; false: it did not, and the caller tries again. Throws
  // EIO when it cannot tell or `attempt` was the last.
  bool committed_before_loss(class lease& l, const store_error& lost, int attempt,
                             const std::string& outcome_key, std::uint64_t token,
                             const std::string& what);

  // The channel of the volume's change notices: "densefs_" and 16 hex
  // digits of the md5 of the schema's name (so volumes in schemas of one
  // database do not hear each other), set by open().
  std::string channel_;
  // A connection of its own that LISTENs on channel_ (watch,
  // write_and_await); store_error(EIO) naming `what` when it cannot.
  using listening_connection = std::unique_ptr<::pg_conn, void (*)(::pg_conn*)>;
  listening_connection listen(const std::string& what) const;
  // watch(): the listening thread and the eventfd that wakes it to stop.
  std::thread watcher_;
  int watch_wake_fd_ = -1;
  void watch_loop(std::function<void(std::string_view)> fn);
};

}  // namespace densefs::store
