#include "store/metadata/postgres_engine.h"

#include <libpq-fe.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "store/error.h"
#include "store/hash.h"
#include "store/log.h"
#include "store/records.h"
#include "store/text.h"

namespace densefs::store {

namespace {

// PostgreSQL's type oids (pg_type.dat; fixed since 7.x).
constexpr Oid k_bytea_oid = 17;
constexpr Oid k_bytea_array_oid = 1001;
constexpr Oid k_text_oid = 25;

// The tables, indexed by store::table. Their names are part of the schema
// (docs/scale-out.md).
constexpr const char* k_tables[k_table_count] = {
    "densefs_meta",   "densefs_inodes",   "densefs_dirents", "densefs_extents",
    "densefs_chunks", "densefs_payloads", "densefs_xattrs",
};
constexpr const char* k_schema_table = "densefs_schema";

const char* table_sql(table t) {
  const auto i = static_cast<std::size_t>(t);
  if (i >= k_table_count) throw store_error(EINVAL, "no such metadata table");
  return k_tables[i];
}

// A scan's pages: the first is small (most scans stop after a record or two:
// an extent lookup, a name after a cookie), later ones grow by 8x up to
// k_max_page_rows rows or about k_page_bytes of keys and values, so a scan
// over payloads of megabytes each does not hold gigabytes at once.
constexpr int k_first_page_rows = 32;
constexpr int k_max_page_rows = 1024;
constexpr std::size_t k_page_bytes = 16u << 20;

// One statement of a batch carries at most this many rows or bytes:
// PostgreSQL refuses a message or an array over 1 GiB, and smaller arrays
// keep the client's and the server's peak memory bounded.
constexpr std::size_t k_statement_rows = 4096;
constexpr std::size_t k_statement_bytes = 64u << 20;
// bytea's own limit (a varlena holds under 1 GiB).
constexpr std::size_t k_max_value_bytes = (1u << 30) - 1024;
// A batch whose connection was lost before it committed is sent again, up
// to this many sends in all.
constexpr int k_max_write_attempts = 3;
// The SQLSTATE of a batch whose expectation did not hold (write_conflict).
constexpr const char* k_conflict_sqlstate = "DF002";
// The lock that orders commits across a volume's writers: keyed by the
// volume's schema, like the volume's lock, but another key and held by a
// transaction only. The key of write_locked's k_commit_section.
constexpr const char* k_commit_lock_sql =
    "SELECT pg_advisory_xact_lock(hashtextextended('densefs commit ' || current_schema(), 0))";
// metadata_batch: a batch over 4 GiB is a bug, not a commit.
constexpr std::uint64_t k_max_batch_bytes = std::uint64_t{4} << 30;

// libpq's messages can span lines ("...failed: Connection refused\n\tIs the
// server running...?"); store errors are one line.
std::string one_line(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// The passwords a connection string spells out (password=..., a URI's
// user:password@ and ?password=), so that no message repeats them, even one
// of libpq's parse errors quoting the string back.
std::vector<std::string> secrets_in(std::string_view conninfo) {
  std::vector<std::string> out;
  const auto add = [&](std::string_view s) {
    if (!s.empty()) out.emplace_back(s);
  };
  if (PQconninfoOption* opts = PQconninfoParse(std::string(conninfo).c_str(), nullptr)) {
    for (PQconninfoOption* o = opts; o->keyword; ++o)
      if (o->val && std::strcmp(o->keyword, "password") == 0) add(o->val);
    PQconninfoFree(opts);
  }
  // Textual fallbacks for strings libpq cannot parse.
  for (std::size_t at = conninfo.find("password"); at != std::string_view::npos;
       at = conninfo.find("password", at + 1)) {
    std::size_t i = at + 8;
    while (i < conninfo.size() && conninfo[i] == ' ') ++i;
    if (i >= conninfo.size() || conninfo[i] != '=') continue;
    ++i;
    while (i < conninfo.size() && conninfo[i] == ' ') ++i;
    std::size_t end = i;
    while (end < conninfo.size() && conninfo[end] != ' ' && conninfo[end] != '&') ++end;
    std::string_view value = conninfo.substr(i, end - i);
    if (value.size() >= 2 && value.front() == '\'') value = value.substr(1);
    if (!value.empty() && value.back() == '\'') value.remove_suffix(1);
    add(value);
  }
  if (const std::size_t scheme = conninfo.find("://"); scheme != std::string_view::npos) {
    const std::string_view rest = conninfo.substr(scheme + 3);
    const std::size_t at = rest.find('@');
    const std::size_t slash = rest.find('/');
    if (at != std::string_view::npos && (slash == std::string_view::npos || at < slash)) {
      const std::string_view userinfo = rest.substr(0, at);
      if (const std::size_t colon = userinfo.find(':'); colon != std::string_view::npos)
        add(userinfo.substr(colon + 1));
    }
  }
  return out;
}

std::string scrub(std::string text, const std::vector<std::string>& secrets) {
  for (const std::string& s : secrets)
    for (std::size_t at = text.find(s); at != std::string::npos; at = text.find(s, at))
      text.replace(at, s.size(), "***");
  return text;
}

// "volume on postgresql://db1:5432/vol1": host, port and database only, never
// the user's password.
std::string describe(PGconn* pg) {
  const auto text = [](const char* s) { return std::string_view(s ? s : ""); };
  const std::string_view host = pg ? text(PQhost(pg)) : "";
  const std::string_view port = pg ? text(PQport(pg)) : "";
  const std::string_view db = pg ? text(PQdb(pg)) : "";
  // Each part as libpq reads a URI back (a socket directory becomes
  // %2Frun%2Fpostgresql).
  std::string out = "volume on postgresql://" + percent_encode(host);
  if (!port.empty()) out += ":" + percent_encode(port);
  out += "/" + percent_encode(db);
  return out;
}

struct result_deleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using result_ptr = std::unique_ptr<PGresult, result_deleter>;

// One statement with binary parameters; the bytes it points to (views
// into the caller's keys and values, or buffers it owns) outlive the send.
struct statement {
  std::string sql;
  std::vector<Oid> types;
  std::vector<const char*> values;
  std::vector<int> lengths;
  // On the heap: the pointers in `values` stay valid when a vector of
  // statements moves them.
  std::vector<std::unique_ptr<std::string>> owned;

  explicit statement(std::string s) : sql(std::move(s)) {}
  statement(statement&&) noexcept = default;
  statement& operator=(statement&&) noexcept = default;
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;
  statement& param(std::string_view bytes, Oid type) {
    // Lengths are checked against k_statement_bytes and k_max_value_bytes
    // before they get here; an int holds them.
    types.push_back(type);
    values.push_back(bytes.data());
    lengths.push_back(static_cast<int>(bytes.size()));
    return *this;
  }
  statement& own(std::string bytes, Oid type) {
    owned.push_back(std::make_unique<std::string>(std::move(bytes)));
    return param(*owned.back(), type);
  }
};

void append_be32(std::string& out, std::uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 4);
}

// A bytea[] in PostgreSQL's binary array format (array_recv): dimensions,
// no-nulls flag, element type, then each element as length + bytes.
template <class Items>
std::string bytea_array(const Items& items) {
  std::size_t bytes = 20;
  for (std::string_view s : items) bytes += 4 + s.size();
  std::string out;
  out.reserve(bytes);
  append_be32(out, items.empty() ? 0 : 1);  // dimensions
  append_be32(out, 0);                      // no nulls
  append_be32(out, k_bytea_oid);
  if (!items.empty()) {
    append_be32(out, static_cast<std::uint32_t>(items.size()));
    append_be32(out, 1);  // lower bound
  }
  for (std::string_view s : items) {
    append_be32(out, static_cast<std::uint32_t>(s.size()));
    out.append(s);
  }
  return out;
}

// The statements a connection's server process has parsed and planned
// once, by text: named prepared statements, which last for the session
// whatever becomes of the transaction that made them. The engine's
// statements are few and their text is fixed (values go as parameters),
// so each is parsed once per connection rather than at every use: a
// commit's five to eight statements cost the server a parse, analysis and
// plan each otherwise, a large part of a commit's time on a nearby server
// (docs/scale-out.md, "Statements prepared once"). Bounded: past k_max a
// new text goes unnamed, as every statement did before.
struct prepared_statements {
  static constexpr std::size_t k_max = 64;
  std::unordered_map<std::string, std::string> names;  // text -> statement name
  std::uint64_t made = 0;                              // names given, for the next one

  // Worth a name: a statement with parameters (its text does not change
  // with the values) or a fixed query. Not BEGIN, COMMIT, DO blocks (whose
  // text carries values: expectation_sql), nor a scan's page, whose LIMIT
  // is in its text and follows the sizes of the rows it read.
  static bool worth_preparing(const statement& s) {
    return (!s.values.empty() || s.sql.starts_with("SELECT ")) &&
           s.sql.find(" LIMIT ") == std::string::npos;
  }
};

// The connection was lost (or its protocol state is unknown); the lease
// drops it, and a read may be retried once on a new one.
class connection_lost : public store_error {
 public:
  explicit connection_lost(const std::string& what) : store_error(EIO, what) {}
};

int errno_of_sqlstate(std::string_view state) {
  if (state == "53100") return ENOSPC;  // disk_full
  if (state == "25006") return EROFS;   // read_only_sql_transaction (a standby)
  return EIO;
}

void notice_to_log(void*, const char* message) {
  // Notices of our own statements ("... already exists, skipping") and the
  // server's last words before it closes a connection: debug lines, never
  // libpq's default of stderr.
  log_debug("postgresql: " + one_line(message ? message : ""));
}

}  // namespace

struct postgres_engine::connection {
  PGconn* pg = nullptr;
  // A finished scan's COMMIT and Sync were sent without waiting (its
  // results do not matter to anyone): the next lease reads them first.
  int unread_syncs = 0;
  // The server process serving it: its id and start time (text, as
  // pg_stat_activity shows it), kept after the connection is lost.
  int backend_pid = 0;
  std::string backend_start;
  // Its number among the engine's connections (postgres_engine::slots_):
  // names its commit outcome row.
  std::size_t slot = 0;
  // What its session has prepared; a new session has nothing.
  prepared_statements prepared;

  connection() = default;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() { close(); }
  void close() {
    if (pg) PQfinish(pg);
    pg = nullptr;
    unread_syncs = 0;
    backend_pid = 0;
    backend_start.clear();
    prepared.names.clear();
  }
};

namespace {

// Connects with the engine's settings: pipeline mode, notices to the log,
// synchronous_commit on (a write is durable when it returns, whatever the
// server's default), read-only sessions for a read-only engine.
PGconn* connect(const std::string& conninfo, bool read_only, const std::string& where,
                std::string_view what, std::string* backend_start = nullptr) {
  // A daemon must not hang forever on an unreachable server: libpq waits
  // indefinitely unless connect_timeout is set. Earlier keywords are
  // defaults the expanded connection string overrides.
  std::vector<const char*> keys, values;
  if (!std::getenv("PGCONNECT_TIMEOUT")) {
    keys.push_back("connect_timeout");
    values.push_back("10");
  }
  keys.push_back("fallback_application_name");
  values.push_back("densefs");
  // A server or network that goes silent must not hold a thread (and, in a
  // commit, the store's commit mutex) for the minutes TCP takes to give up:
  // keepalives find a dead peer of an idle connection in about 25 s, and
  // data unacknowledged for 30 s drops the connection. (Unix sockets ignore
  // both.)
  for (const auto& [k, v] :
       {std::pair{"keepalives", "1"}, std::pair{"keepalives_idle", "10"},
        std::pair{"keepalives_interval", "5"}, std::pair{"keepalives_count", "3"},
        std::pair{"tcp_user_timeout", "30000"}}) {
    keys.push_back(k);
    values.push_back(v);
  }
  keys.push_back("dbname");
  values.push_back(conninfo.c_str());
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* pg = PQconnectdbParams(keys.data(), values.data(), 1);
  if (!pg) throw store_error(ENOMEM, std::string(what) + ": out of memory connecting");
  const auto fail = [&](const std::string& why) {
    const std::string name = where.empty() ? describe(pg) : where;
    PQfinish(pg);
    throw store_error(EIO, scrub(std::string(what) + ": connecting to " + name + ": " + why,
                                 secrets_in(conninfo)));
  };
  if (PQstatus(pg) != CONNECTION_OK) fail(one_line(PQerrorMessage(pg)));
  PQsetNoticeProcessor(pg, notice_to_log, nullptr);
  result_ptr r(PQexec(pg,
                      "SELECT set_config('synchronous_commit', 'on', false) "
                      "WHERE current_setting('synchronous_commit') = 'off'"));
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(one_line(PQresultErrorMessage(r.get())));
  // A statement that waits (a lock another session holds, a server too
  // busy to answer) ends with an error after a minute instead of never,
  // unless the server or the connection string sets a limit of its own.
  // Every statement densefs sends is a bounded page or batch.
  r.reset(PQexec(pg,
                 "SELECT set_config('statement_timeout', '60s', false) "
                 "WHERE current_setting('statement_timeout') = '0'"));
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(one_line(PQresultErrorMessage(r.get())));
  // The server's end of the connection: a client the network cut off is
  // noticed within about 30 s of silence (keepalive probes from 10 s on,
  // bounded by tcp_user_timeout), not at the kernel's default of two
  // hours. Until then its session keeps what it holds, the volume's lock
  // among them: a writer mounting again after a partition was refused as
  // "in use" (docs/scale-out.md, "Over a network"). A server's own
  // shorter values stand. (These settings show
  // the socket's values, the kernel's 7200 s and the like where the server
  // sets none; a server older than 12 has no tcp_user_timeout, which then
  // reads NULL and is left out.) Settable by any user; over a unix socket
  // they read 0 and setting them does nothing.
  r.reset(PQexec(pg,
                 "SELECT set_config(name, value::text, false) FROM (VALUES "
                 "('tcp_keepalives_idle', 10), ('tcp_keepalives_interval', 5), "
                 "('tcp_keepalives_count', 3), ('tcp_user_timeout', 30000)) AS s(name, value) "
                 "WHERE current_setting(name, true)::bigint NOT BETWEEN 1 AND value"));
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(one_line(PQresultErrorMessage(r.get())));
  if (read_only) {
    r.reset(PQexec(pg, "SET default_transaction_read_only = on"));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) fail(one_line(PQresultErrorMessage(r.get())));
  }
  if (backend_start) {
    // With the process id, names this server process even after the
    // connection is gone (a process id alone may be reused): see
    // postgres_engine::await_outcome.
    r.reset(PQexec(pg,
                   "SELECT backend_start::text FROM pg_stat_activity WHERE pid = "
                   "pg_backend_pid()"));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(one_line(PQresultErrorMessage(r.get())));
    *backend_start = PQntuples(r.get()) == 1 ? PQgetvalue(r.get(), 0, 0) : "";
  }
  r.reset();
  if (PQenterPipelineMode(pg) != 1) fail("cannot enter pipeline mode");
  return pg;
}

// Sends `statements` and a Sync in one round trip and reads every result up
// to the Sync. Statements up to a Sync run in one implicit transaction
// (libpq's pipeline mode, "Using Pipeline Mode"): the first error rolls
// back what ran before it and skips the rest. A statement `prepared` has a
// name for runs by it; one worth a name that has none yet is prepared in
// the same pipeline, just before it runs. Throws connection_lost when the
// connection breaks; returns the results, errors included, otherwise.
std::vector<result_ptr> run_pipeline(PGconn* pg, const std::vector<statement>& statements,
                                     prepared_statements& prepared) {
  const auto lost = [&]() -> connection_lost {
    return connection_lost(one_line(PQerrorMessage(pg)));
  };
  // The name each statement is prepared under in this pipeline, if any.
  std::vector<std::string> preparing(statements.size());
  std::unordered_map<std::string_view, std::string> named_here;  // prepared in this pipeline
  for (std::size_t i = 0; i < statements.size(); ++i) {
    const statement& s = statements[i];
    const int count = static_cast<int>(s.values.size());
    const std::vector<int> binary(s.values.size(), 1);
    std::string name;
    if (const auto known = prepared.names.find(s.sql); known != prepared.names.end())
      name = known->second;
    else if (const auto here = named_here.find(s.sql); here != named_here.end())
      name = here->second;
    if (name.empty() && prepared_statements::worth_preparing(s) &&
        prepared.names.size() + named_here.size() < prepared_statements::k_max) {
      name = "densefs_" + std::to_string(prepared.made++);
      if (!PQsendPrepare(pg, name.c_str(), s.sql.c_str(), count, s.types.data())) throw lost();
      preparing[i] = name;
      named_here.emplace(s.sql, name);
    }
    const bool sent = name.empty()
                          ? PQsendQueryParams(pg, s.sql.c_str(), count, s.types.data(),
                                              s.values.data(), s.lengths.data(), binary.data(), 1)
                          : PQsendQueryPrepared(pg, name.c_str(), count, s.values.data(),
                                                s.lengths.data(), binary.data(), 1);
    if (!sent) throw lost();
  }
  if (!PQpipelineSync(pg)) throw lost();
  // Each result, the Prepare's before its statement's, ends with a null.
  const auto next_result = [&] {
    result_ptr r(PQgetResult(pg));
    if (!r || PQstatus(pg) == CONNECTION_BAD) throw lost();
    if (result_ptr extra{PQgetResult(pg)}) throw connection_lost("unexpected extra result");
    return r;
  };
  std::vector<result_ptr> results;
  results.reserve(statements.size());
  for (std::size_t i = 0; i < statements.size(); ++i) {
    result_ptr prepare_failed;
    if (!preparing[i].empty()) {
      result_ptr p = next_result();
      if (PQresultStatus(p.get()) == PGRES_COMMAND_OK)
        prepared.names.emplace(statements[i].sql, preparing[i]);
      else if (PQresultStatus(p.get()) == PGRES_FATAL_ERROR)
        prepare_failed = std::move(p);  // the statement's own error, reported as its result
    }
    result_ptr r = next_result();
    results.push_back(prepare_failed ? std::move(prepare_failed) : std::move(r));
  }
  result_ptr sync(PQgetResult(pg));
  if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
    if (PQstatus(pg) == CONNECTION_BAD) throw lost();
    // A failure at the Sync itself (the COMMIT): report it as the result
    // of the last statement, then read up to the Sync that must follow.
    if (sync && PQresultStatus(sync.get()) == PGRES_FATAL_ERROR) {
      results.back() = std::move(sync);
      result_ptr next(PQgetResult(pg));
      while (next && PQresultStatus(next.get()) != PGRES_PIPELINE_SYNC) next.reset(PQgetResult(pg));
      if (!next) throw lost();
      return results;
    }
    throw connection_lost("unexpected result in a pipeline");
  }
  return results;
}

bool failed(const PGresult* r) {
  const ExecStatusType s = PQresultStatus(r);
  return s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK;
}

// The first failed result as a store_error: "<what> in <where>: <primary
// message> (SQLSTATE x)". An aborted statement only follows a failed one.
[[noreturn]] void throw_result(const PGresult* r, std::string_view what, const std::string& where) {
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  const char* primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
  std::string why = primary ? one_line(primary) : one_line(PQresultErrorMessage(r));
  if (why.empty()) why = PQresStatus(PQresultStatus(r));
  if (state) why += std::string(" (SQLSTATE ") + state + ")";
  throw store_error(state ? errno_of_sqlstate(state) : EIO,
                    std::string(what) + " in " + where + ": " + why);
}

void check(const std::vector<result_ptr>& results, std::string_view what,
           const std::string& where) {
  for (const result_ptr& r : results)
    if (failed(r.get()) && PQresultStatus(r.get()) != PGRES_PIPELINE_ABORTED)
      throw_result(r.get(), what, where);
  for (const result_ptr& r : results)
    if (failed(r.get())) throw_result(r.get(), what, where);
}

// A row set with two binary bytea columns (k, v), checked before use: the
// server is outside densefs.
class rows {
 public:
  rows(const PGresult* r, int columns, std::string_view what, const std::string& where)
      : r_(r), what_(what), where_(where) {
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) != columns || PQntuples(r) < 0)
      bad("unexpected result shape");
    for (int c = 0; c < columns; ++c)
      if (PQfformat(r, c) != 1) bad("a text column where a binary one was asked for");
  }
  int count() const { return PQntuples(r_); }
  std::string_view at(int row, int column) const {
    if (PQgetisnull(r_, row, column)) bad("a null value");
    const int length = PQgetlength(r_, row, column);
    const char* data = PQgetvalue(r_, row, column);
    if (length < 0 || (length > 0 && !data)) bad("a negative length");
    return {data, static_cast<std::size_t>(length)};
  }
  [[noreturn]] void bad(std::string_view why) const {
    throw store_error(
        EIO, std::string(what_) + " in " + where_ + ": the server sent " + std::string(why));
  }

 private:
  const PGresult* r_;
  std::string_view what_;
  const std::string& where_;
};

// A commit outcome row's value: the token, u64 little-endian.
std::string encode_outcome(std::uint64_t token) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>(token >> (8 * i));
  return out;
}

std::int64_t be_int(std::string_view bytes) {
  std::int64_t v = (!bytes.empty() && static_cast<signed char>(bytes[0]) < 0) ? -1 : 0;
  for (char c : bytes) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

}  // namespace

// A connection taken from the pool for the duration of one call. It is
// checked (connected, idle, its deferred results read) when first used and
// goes back to the pool when the lease ends, or is closed when its state is
// unknown. A thread that already holds a lease (a get inside a scan's
// callback) is never made to wait for another: it gets an extra connection
// beyond the pool's size, which would otherwise deadlock.
class postgres_engine::lease {
 public:
  lease(const postgres_engine& engine, std::string_view what) : engine_(engine), what_(what) {
    std::unique_lock lock(engine_.mutex_);
    if (t_held_ == 0)
      engine_.available_.wait(
          lock, [&] { return !engine_.idle_.empty() || engine_.busy_ < engine_.capacity_; });
    if (!engine_.idle_.empty()) {
      conn_ = std::move(engine_.idle_.back());
      engine_.idle_.pop_back();
    } else {
      conn_ = std::make_unique<connection>();
      auto& slots = engine_.slots_;
      conn_->slot =
          static_cast<std::size_t>(std::find(slots.begin(), slots.end(), false) - slots.begin());
      if (conn_->slot == slots.size()) slots.push_back(false);
      slots[conn_->slot] = true;
    }
    ++engine_.busy_;
    ++t_held_;
  }
  ~lease() {
    // A connection in the middle of a pipeline is not reusable.
    if (conn_->pg && (PQstatus(conn_->pg) != CONNECTION_OK || !clean_)) conn_->close();
    --t_held_;
    std::lock_guard lock(engine_.mutex_);
    --engine_.busy_;
    if (engine_.busy_ + engine_.idle_.size() < engine_.capacity_)
      engine_.idle_.push_back(std::move(conn_));
    else
      engine_.slots_[conn_->slot] = false;
    engine_.available_.notify_one();
  }
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;

  // The connection, ready for a pipeline: connected, idle, outside any
  // transaction.
  // Checked once per lease: a scan's later pages run inside its
  // transaction.
  PGconn* pg() {
    if (!checked_ && conn_->pg && !ready()) conn_->close();
    if (!conn_->pg) {
      conn_->pg = connect(engine_.conninfo_, engine_.read_only_, engine_.where_, what_,
                          engine_.read_only_ ? nullptr : &conn_->backend_start);
      conn_->backend_pid = PQbackendPID(conn_->pg);
    }
    checked_ = true;
    return conn_->pg;
  }
  // The server process of the connection (kept after it is lost).
  std::pair<int, std::string> backend() const { return {conn_->backend_pid, conn_->backend_start}; }
  // The connection's number among the engine's.
  std::size_t slot() const { return conn_->slot; }
  // Drops the connection; the next pg() connects anew.
  void reconnect() {
    conn_->close();
    checked_ = false;
  }

  // Runs statements; the lease is unclean (its connection dropped at the
  // end) if this throws before every result was read.
  std::vector<result_ptr> run(const std::vector<statement>& statements) {
    PGconn* c = pg();
    clean_ = false;
    engine_.round_trips_.fetch_add(1, std::memory_order_relaxed);
    auto results = run_pipeline(c, statements, conn_->prepared);
    clean_ = true;
    return results;
  }

  // run() for reads: a lost connection is retried once on a new one (a
  // read has no effect to double); a second loss is EIO naming `what`.
  std::vector<result_ptr> run_read(const std::vector<statement>& statements, std::string_view what,
                                   const std::string& where) {
    try {
      return run(statements);
    } catch (const connection_lost&) {
      reconnect();
      try {
        return run(statements);
      } catch (const connection_lost& e) {
        throw store_error(EIO, std::string(what) + " in " + where + ": " + e.what());
      }
    }
  }

  // A scan's read-only transaction on this lease: ended (without waiting)
  // when the scan ends, however it ends, if it began.
  struct scan_transaction {
    lease& l;
    bool open = false;
    ~scan_transaction() {
      if (open) l.end_transaction_later();
    }
  };

  // Ends a scan's transaction without waiting for the server's answer.
  void end_transaction_later() noexcept {
    if (!conn_->pg || !clean_) return;
    if (PQsendQueryParams(conn_->pg, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 1) &&
        PQpipelineSync(conn_->pg))
      ++conn_->unread_syncs;
    else
      clean_ = false;
  }

 private:
  // Reads a previous scan's deferred COMMIT, then checks that the server
  // has not closed the connection meanwhile (a restart, an idle timeout):
  // libpq sees that only when it reads, and a write must not find out
  // after sending its statements, when whether they committed is unknown.
  bool ready() {
    PGconn* c = conn_->pg;
    while (conn_->unread_syncs > 0) {
      result_ptr r(PQgetResult(c));
      if (PQstatus(c) == CONNECTION_BAD) return false;
      if (!r) {
        // Between a statement's result and the Sync; two nulls in a row
        // would mean libpq has nothing queued: the count is wrong.
        r.reset(PQgetResult(c));
        if (!r) return false;
      }
      if (PQresultStatus(r.get()) == PGRES_PIPELINE_SYNC) --conn_->unread_syncs;
    }
    // Twice: a closing server's last message and the end of the stream
    // may take one read each.
    for (int i = 0; i < 2; ++i)
      if (!PQconsumeInput(c) || PQstatus(c) != CONNECTION_OK) return false;
    if (PQisBusy(c)) return false;
    return PQtransactionStatus(c) == PQTRANS_IDLE;
  }

  static thread_local int t_held_;
  const postgres_engine& engine_;
  std::string_view what_;
  std::unique_ptr<connection> conn_;
  bool checked_ = false;
  bool clean_ = true;
};

thread_local int postgres_engine::lease::t_held_ = 0;

std::string postgres_engine::outcome_row(const lease& l) const {
  if (outcome_key_.empty()) return {};
  return outcome_key_ + "/" + std::to_string(l.slot());
}

namespace {

class postgres_batch final : public metadata_batch {
 public:
  struct op {
    table t;
    bool erase;
    std::string key;
    std::string value;
  };

  void put(table t, std::string_view key, std::string_view value) override {
    add(t, key, value.size());
    ops_.push_back({t, false, std::string(key), std::string(value)});
  }
  void erase(table t, std::string_view key) override {
    add(t, key, 0);
    ops_.push_back({t, true, std::string(key), {}});
  }
  std::string notice_;
  bool empty() const override { return ops_.empty(); }
  void set_notice(std::string notice) override { notice_ = std::move(notice); }
  void expect(table t, std::string_view key, std::optional<std::string_view> value) override {
    add(t, key, value ? value->size() : 0);
    expected_.push_back({t, !value, std::string(key), value ? std::string(*value) : std::string()});
  }
  const std::vector<op>& ops() const { return ops_; }
  const std::string& notice() const { return notice_; }
  // What expect() asked: `erase` true for a record expected absent.
  const std::vector<op>& expected() const { return expected_; }

 private:
  void add(table t, std::string_view key, std::size_t value_size) {
    table_sql(t);
    if (key.size() > k_max_value_bytes || value_size > k_max_value_bytes)
      throw store_error(EIO, "a metadata record of " + std::to_string(key.size() + value_size) +
                                 " bytes is over PostgreSQL's 1 GiB");
    bytes_ += key.size() + value_size;
    if (bytes_ > k_max_batch_bytes)
      throw store_error(
          EIO, "a metadata batch over 4 GiB (" + std::to_string(ops_.size()) + " records)");
  }

  std::vector<op> ops_;
  std::vector<op> expected_;
  std::uint64_t bytes_ = 0;
};

// decode('...', 'hex'): bytes for SQL text, as hex digits only (they cannot
// end the literal or a DO block's $$ quoting), read the same whatever the
// session's standard_conforming_strings.
std::string bytea_literal(std::string_view bytes) {
  return "decode('" + to_hex(bytes) + "', 'hex')";
}

// The statement that fails with k_conflict_sqlstate unless every expected
// record is as expected: a DO block (it cannot take parameters; the bytes go
// in as hex literals), run after the commit lock in the batch's
// transaction.
std::string expectation_sql(const std::vector<postgres_batch::op>& expected) {
  std::string cond;
  for (std::size_t ti = 0; ti < k_table_count; ++ti) {
    std::string values;
    for (const postgres_batch::op& e : expected) {
      if (static_cast<std::size_t>(e.t) != ti) continue;
      values += values.empty() ? "(" : ", (";
      values += bytea_literal(e.key) + ", " + (e.erase ? "NULL::bytea" : bytea_literal(e.value));
      values += ")";
    }
    if (values.empty()) continue;
    if (!cond.empty()) cond += " OR ";
    cond += std::string("EXISTS (SELECT 1 FROM (VALUES ") + values + ") AS e(k, v) LEFT JOIN " +
            k_tables[ti] + " r ON r.k = e.k WHERE r.v IS DISTINCT FROM e.v)";
  }
  return "DO $$BEGIN IF " + cond +
         " THEN RAISE EXCEPTION 'a record changed since it was read' USING ERRCODE = '" +
         std::string(k_conflict_sqlstate) + "'; END IF; END$$";
}

// The statements that apply a batch: per table, one INSERT ... ON CONFLICT
// of the keys whose last op is a put and one DELETE of those whose last op
// is an erase (split at k_statement_rows / k_statement_bytes). Reducing to
// the last op per key keeps the batch's order where it matters (an erase
// then a put of one key is a put) and lets one INSERT name a key once,
// which ON CONFLICT DO UPDATE requires.
std::vector<statement> batch_statements(const std::vector<postgres_batch::op>& ops) {
  std::vector<statement> out;
  for (std::size_t ti = 0; ti < k_table_count; ++ti) {
    const auto t = static_cast<table>(ti);
    std::unordered_map<std::string_view, std::size_t> last;
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (ops[i].t == t) last[ops[i].key] = i;
    if (last.empty()) continue;
    std::vector<std::string_view> put_keys, put_values, erase_keys;
    std::size_t put_bytes = 0, erase_bytes = 0;
    const auto flush_puts = [&] {
      if (put_keys.empty()) return;
      statement s(std::string("INSERT INTO ") + k_tables[ti] +
                  " (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) "
                  "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v");
      s.own(bytea_array(put_keys), k_bytea_array_oid);
      s.own(bytea_array(put_values), k_bytea_array_oid);
      out.push_back(std::move(s));
      put_keys.clear();
      put_values.clear();
      put_bytes = 0;
    };
    const auto flush_erases = [&] {
      if (erase_keys.empty()) return;
      statement s(std::string("DELETE FROM ") + k_tables[ti] + " WHERE k = ANY($1::bytea[])");
      s.own(bytea_array(erase_keys), k_bytea_array_oid);
      out.push_back(std::move(s));
      erase_keys.clear();
      erase_bytes = 0;
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const postgres_batch::op& o = ops[i];
      if (o.t != t || last[o.key] != i) continue;
      const std::size_t bytes = o.key.size() + o.value.size() + 8;
      if (o.erase) {
        if (erase_keys.size() >= k_statement_rows || erase_bytes + bytes > k_statement_bytes)
          flush_erases();
        erase_keys.push_back(o.key);
        erase_bytes += bytes;
      } else {
        if (put_keys.size() >= k_statement_rows || put_bytes + bytes > k_statement_bytes)
          flush_puts();
        put_keys.push_back(o.key);
        put_values.push_back(o.value);
        put_bytes += bytes;
      }
    }
    flush_puts();
    flush_erases();
  }
  return out;
}

}  // namespace

postgres_engine::postgres_engine(const postgres_engine_options& options)
    : conninfo_(options.conninfo),
      read_only_(options.read_only),
      shares_volume_(!options.read_only && options.lock_volume && options.share_volume),
      capacity_(std::max<std::size_t>(options.connections, 1)) {}

postgres_engine::~postgres_engine() {
  unwatch();
}

bool postgres_engine::names_a_password(std::string_view conninfo) {
  return !secrets_in(conninfo).empty();
}

std::unique_ptr<postgres_engine> postgres_engine::open(const postgres_engine_options& options) {
  std::unique_ptr<postgres_engine> e(new postgres_engine(options));
  const std::string what = "opening the metadata database";
  lease l(*e, what);
  PGconn* pg = l.pg();
  // Set once here, before any other thread can see the engine.
  e->where_ = describe(pg);

  std::string tables_sql = "SELECT to_regclass('" + std::string(k_schema_table) + "') IS NOT NULL";
  for (const char* name : k_tables)
    tables_sql += std::string(", to_regclass('") + name + "') IS NOT NULL";
  std::vector<statement> check_tables;
  check_tables.emplace_back(tables_sql);
  auto results = l.run(check_tables);
  check(results, what, e->where_);
  const rows present(results[0].get(), 1 + k_table_count, what, e->where_);
  if (present.count() != 1) present.bad("no row");
  for (std::size_t i = 0; i <= k_table_count; ++i) {
    const std::string_view b = present.at(0, static_cast<int>(i));
    if (b.size() != 1) present.bad("a bool of the wrong size");
    if (b[0] == 0)
      throw store_error(ENOENT, "no densefs metadata in " + e->where_ + " (table " +
                                    (i == 0 ? k_schema_table : k_tables[i - 1]) +
                                    " is missing; create the volume first)");
  }

  std::vector<statement> version;
  version.emplace_back("SELECT max(version), count(*) FROM " + std::string(k_schema_table));
  results = l.run(version);
  check(results, what, e->where_);
  const rows v(results[0].get(), 2, what, e->where_);
  if (v.count() != 1) v.bad("no row");
  if (PQgetisnull(results[0].get(), 0, 0))
    throw store_error(EIO, "the schema version of " + e->where_ + " is missing (" +
                               std::string(k_schema_table) + " is empty)");
  const std::string_view version_bytes = v.at(0, 0);
  if (version_bytes.size() != 4) v.bad("an integer of the wrong size");
  const std::int64_t found = be_int(version_bytes);
  if (found > k_postgres_schema_version)
    throw store_error(EPROTONOSUPPORT, e->where_ + " has schema version " + std::to_string(found) +
                                           "; this build reads up to version " +
                                           std::to_string(k_postgres_schema_version));
  if (found < 1)
    throw store_error(EIO, e->where_ + " has an invalid schema version " + std::to_string(found));

  std::vector<statement> channel;
  channel.emplace_back("SELECT 'densefs_' || left(md5(current_schema()), 16)");
  results = l.run(channel);
  check(results, what, e->where_);
  const rows c(results[0].get(), 1, what, e->where_);
  if (c.count() != 1) c.bad("no row");
  e->channel_ = std::string(c.at(0, 0));
  // Goes into SQL text (LISTEN takes no parameter): letters, digits, '_'.
  if (e->channel_.size() != 24 ||
      e->channel_.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
    c.bad("an odd channel name");

  if (!options.read_only)
    e->outcome_key_ = std::string(k_commit_outcome_prefix) + random_hex_id("a random writer id");
  e->locks_volume_ = !options.read_only && options.lock_volume;
  if (e->locks_volume_) e->take_volume_lock(what);
  if (!options.read_only && options.lock_volume && !e->shares_volume_) {
    // The volume's one writer now: the outcome rows of writers before it
    // (a row outlives a writer that crashed) matter to nobody. (Beside
    // other writers, their rows are theirs: a row is left per writer that
    // shared the volume, until a writer alone opens it.)
    std::vector<statement> clear;
    statement d(std::string("DELETE FROM ") + table_sql(table::meta) + " WHERE k >= $1 AND k < $2");
    std::string end(k_commit_outcome_prefix);
    ++end.back();  // the first key past the prefix
    d.param(k_commit_outcome_prefix, k_bytea_oid);
    d.own(end, k_bytea_oid);
    clear.push_back(std::move(d));
    check(l.run(clear), what, e->where_);
  }
  return e;
}

// The volume's writers: one alone, or several that share it
// (share_volume), never both. A session-level advisory lock, keyed by the
// volume's schema so that volumes in schemas of one database do not exclude
// each other, on a connection of its own. The server drops it when that
// connection closes, also when the process dies or the server restarts;
// every write checks it still holds it (write()).
void postgres_engine::take_volume_lock(const std::string& what) {
  PGconn* lock_pg = connect(conninfo_, false, where_, what);
  std::shared_ptr<void> held(lock_pg, [](void* p) { PQfinish(static_cast<PGconn*>(p)); });
  if (PQexitPipelineMode(lock_pg) != 1)
    throw store_error(EIO, what + ": cannot leave pipeline mode");
  result_ptr r(PQexec(lock_pg, shares_volume_
                                   ? "SELECT pg_try_advisory_lock_shared(hashtextextended("
                                     "'densefs volume ' || current_schema(), 0))"
                                   : "SELECT pg_try_advisory_lock(hashtextextended("
                                     "'densefs volume ' || current_schema(), 0))"));
  if (failed(r.get())) throw_result(r.get(), what, where_);
  if (PQntuples(r.get()) != 1 || PQnfields(r.get()) != 1)
    throw store_error(EIO, what + ": " + where_ + " answered the lock request oddly");
  if (std::string_view(PQgetvalue(r.get(), 0, 0)) != "t")
    throw store_error(
        EBUSY, where_ + (shares_volume_ ? " is in use: a densefs that writes it alone (a mount "
                                          "or a tool, on this or another machine) has it open"
                                        : " is in use: another densefs (a mount or a tool, on "
                                          "this or another machine) has it open for writing"));
  // A key of this session's own beside the volume's, held exclusively
  // until the connection ends: every write's check (lock_check_sql_) asks
  // for it, shared and for its transaction only, and gets it only if the
  // session is gone, and with it the volume's lock. A try-lock costs a
  // fraction of a millisecond where a look at pg_locks and
  // pg_stat_activity (to name the session by pid and start time, as the
  // check did until 2026-11-28) cost 0.7 ms of every commit. Shared, so
  // that two connections checking at once after the loss both fail. The
  // two-integer form: a key space apart from the single-bigint keys of
  // hashtextextended. Random digits, so both integers are ours, not user
  // bytes, before they go into SQL text.
  const std::string id = random_hex_id("a random volume lock key");
  const auto half = [&](std::size_t at) {
    return std::to_string(static_cast<std::int32_t>(
        static_cast<std::uint32_t>(std::stoul(id.substr(at, 8), nullptr, 16))));
  };
  const std::string key = half(0) + ", " + half(8);
  r.reset(PQexec(lock_pg, ("SELECT pg_try_advisory_lock(" + key + ")").c_str()));
  if (failed(r.get())) throw_result(r.get(), what, where_);
  if (PQntuples(r.get()) != 1 || std::string_view(PQgetvalue(r.get(), 0, 0)) != "t")
    throw store_error(EIO, what + ": " + where_ + " refused this session's own lock key");
  // A division by zero when the key is free (the session is gone), which
  // aborts the transaction: plain SQL, where a PL/pgSQL DO block raising
  // an error of our own was compiled again by every commit (0.15 ms of a
  // 0.35 ms commit on a unix socket, 2026-12-01). The try-lock is
  // volatile, so the planner cannot fold the division.
  lock_check_sql_ = "SELECT 1 / (NOT pg_try_advisory_xact_lock_shared(" + key + "))::int";
  volume_lock_ = std::move(held);
}

void postgres_engine::retake_volume_lock(int attempt, const std::string& what,
                                         const std::string& failed_check) {
  // Take the lock again if nobody else has: then this engine is a writer of
  // the volume again, and the batch goes through on a second try.
  if (attempt > 0)
    throw store_error(EIO, what +
                               ": the volume's lock was lost and taken again, but "
                               "the commit still finds it missing");
  {
    std::lock_guard lock(lock_mutex_);
    // Two commits that found the loss at once: the second must not drop
    // the lock the first has just taken again (its check is another key).
    if (volume_lock_ && lock_check_sql_ != failed_check) return;
    volume_lock_.reset();
  }
  (void)volume_lock_check(what);
  log_info(where_ + ": took the volume's lock again after losing it");
}

std::string postgres_engine::volume_lock_check(const std::string& what) {
  std::lock_guard lock(lock_mutex_);
  if (!locks_volume_) return {};
  if (!volume_lock_) {
    // Lost, and not taken again yet: no write goes through without it.
    try {
      take_volume_lock(what);
      ++lock_retakes_;
    } catch (const store_error& e) {
      throw store_error(EIO, what +
                                 ": this densefs lost the volume's lock (the server "
                                 "restarted or the connection dropped) and cannot take "
                                 "it again: " +
                                 e.what());
    }
  }
  return lock_check_sql_;
}

void postgres_engine::create(const postgres_engine_options& options) {
  const std::string what = "creating the metadata database";
  // One connection of its own, outside pipeline mode: the DDL goes as one
  // multi-statement query, which PostgreSQL runs as one transaction.
  PGconn* pg = connect(options.conninfo, false, "", what);
  std::unique_ptr<PGconn, decltype(&PQfinish)> owner(pg, &PQfinish);
  if (PQexitPipelineMode(pg) != 1) throw store_error(EIO, what + ": cannot leave pipeline mode");
  const std::string where = describe(pg);

  std::string exists = "SELECT 1 FROM (VALUES (to_regclass('" + std::string(k_schema_table) + "'))";
  for (const char* name : k_tables) exists += std::string(", (to_regclass('") + name + "'))";
  exists += ") AS t(r) WHERE r IS NOT NULL";
  result_ptr r(PQexec(pg, exists.c_str()));
  if (failed(r.get())) throw_result(r.get(), what, where);
  if (PQntuples(r.get()) > 0) throw store_error(EEXIST, where + " already holds densefs tables");

  std::string ddl;
  ddl += "CREATE TABLE " + std::string(k_schema_table) +
         " (version integer NOT NULL, created timestamptz NOT NULL);";
  for (const char* name : k_tables)
    ddl += std::string("CREATE TABLE ") + name + " (k bytea PRIMARY KEY, v bytea NOT NULL);";
  // Payloads are compressed by densefs's codecs already: stored out of line
  // without TOAST's pglz trying to compress them again.
  ddl += std::string("ALTER TABLE ") + k_tables[static_cast<std::size_t>(table::payloads)] +
         " ALTER COLUMN v SET STORAGE EXTERNAL;";
  ddl += "INSERT INTO " + std::string(k_schema_table) + " VALUES (" +
         std::to_string(k_postgres_schema_version) + ", now());";
  r.reset(PQexec(pg, ddl.c_str()));
  if (failed(r.get())) {
    // Another mkfs created them between the check and here.
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    if (state && std::string_view(state) == "42P07")
      throw store_error(EEXIST, where + " already holds densefs tables");
    throw_result(r.get(), what, where);
  }
}

namespace {

std::vector<statement> get_many_query(table t, std::span<const std::string> keys) {
  std::vector<statement> q;
  q.emplace_back(std::string("SELECT k, v FROM ") + table_sql(t) + " WHERE k = ANY($1::bytea[])");
  q.back().own(bytea_array(keys), k_bytea_array_oid);
  return q;
}

// get_many_query's answer: one result per key, in order.
std::vector<std::optional<std::string>> get_many_rows(const std::vector<result_ptr>& results,
                                                      std::span<const std::string> keys,
                                                      std::string_view what,
                                                      const std::string& where) {
  std::vector<std::optional<std::string>> out(keys.size());
  check(results, what, where);
  const rows found(results[0].get(), 2, what, where);
  if (static_cast<std::size_t>(found.count()) > keys.size()) found.bad("more rows than keys");
  const std::unordered_set<std::string_view> asked(keys.begin(), keys.end());
  std::unordered_map<std::string_view, std::string_view> values;
  values.reserve(static_cast<std::size_t>(found.count()));
  for (int i = 0; i < found.count(); ++i) {
    const std::string_view k = found.at(i, 0);
    if (!asked.contains(k)) found.bad("a key not asked for");
    values.emplace(k, found.at(i, 1));
  }
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (auto it = values.find(keys[i]); it != values.end()) out[i].emplace(it->second);
  return out;
}

}  // namespace

std::optional<std::string> postgres_engine::get(table t, std::string_view key,
                                                std::string_view what) const {
  std::vector<statement> q;
  q.emplace_back(std::string("SELECT v FROM ") + table_sql(t) + " WHERE k = $1");
  q.back().param(key, k_bytea_oid);
  lease l(*this, what);
  const std::vector<result_ptr> results = l.run_read(q, what, where_);
  check(results, what, where_);
  const rows found(results[0].get(), 1, what, where_);
  if (found.count() > 1) found.bad("several rows for one key");
  if (found.count() == 0) return std::nullopt;
  return std::string(found.at(0, 0));
}

std::vector<std::optional<std::string>> postgres_engine::get_many(table t,
                                                                  std::span<const std::string> keys,
                                                                  std::string_view what) const {
  if (keys.empty()) return std::vector<std::optional<std::string>>(keys.size());
  lease l(*this, what);
  const std::vector<result_ptr> results = l.run_read(get_many_query(t, keys), what, where_);
  return get_many_rows(results, keys, what, where_);
}

void postgres_engine::scan(
    table t, const key_range& range, const scan_options& options, std::string_view what,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  const std::string name = table_sql(t);
  const bool has_upper = !range.upper.empty();
  // A start below lower is lower; an empty one too (backward: see below).
  const std::string start = options.start.empty() || options.start < std::string_view(range.lower)
                                ? range.lower
                                : std::string(options.start);
  const bool backward = options.order == scan_order::backward;
  const bool from_last = backward && options.start.empty();
  const std::string upper_sql = has_upper ? " AND k < $2" : "";

  // The first page. Parameters: $1 lower (or start), $2 upper when there is
  // one, then start.
  const auto first_page = [&](int limit) {
    const std::string start_param = has_upper ? "$3" : "$2";
    std::string sql;
    switch (options.order) {
      case scan_order::forward:
        sql = "SELECT k, v FROM " + name + " WHERE k >= $1" + upper_sql + " ORDER BY k LIMIT " +
              std::to_string(limit);
        break;
      case scan_order::forward_from_floor:
        // The floor is the last key <= start in range (a start past upper:
        // the last key in range), else start itself. One round trip: the
        // subquery runs once, as an init plan.
        sql = "SELECT k, v FROM " + name + " WHERE k >= COALESCE((SELECT k FROM " + name +
              " WHERE k >= $1" + upper_sql + " AND k <= " + start_param +
              " ORDER BY k DESC LIMIT 1), " + start_param + ")" + upper_sql + " ORDER BY k LIMIT " +
              std::to_string(limit);
        break;
      case scan_order::backward:
        sql = "SELECT k, v FROM " + name + " WHERE k >= $1" + upper_sql +
              (from_last ? std::string() : " AND k <= " + start_param) + " ORDER BY k DESC LIMIT " +
              std::to_string(limit);
        break;
    }
    statement s(std::move(sql));
    const bool floor = options.order == scan_order::forward_from_floor;
    s.param(floor || backward ? std::string_view(range.lower) : std::string_view(start),
            k_bytea_oid);
    if (has_upper) s.param(range.upper, k_bytea_oid);
    if (floor || (backward && !from_last)) s.own(start, k_bytea_oid);
    return s;
  };
  // Later pages: keyset pagination past the last key seen.
  const auto next_page = [&](const std::string& last, int limit) {
    statement s(backward ? "SELECT k, v FROM " + name + " WHERE k >= $1" + upper_sql + " AND k < " +
                               (has_upper ? "$3" : "$2") + " ORDER BY k DESC LIMIT " +
                               std::to_string(limit)
                         : "SELECT k, v FROM " + name + " WHERE k > $1" + upper_sql +
                               " ORDER BY k LIMIT " + std::to_string(limit));
    if (backward) {
      s.param(range.lower, k_bytea_oid);
      if (has_upper) s.param(range.upper, k_bytea_oid);
      s.own(last, k_bytea_oid);
    } else {
      s.own(last, k_bytea_oid);
      if (has_upper) s.param(range.upper, k_bytea_oid);
    }
    return s;
  };

  lease l(*this, what);
  // Every page of one scan reads one snapshot, as a RocksDB iterator does:
  // the pages run in a read-only REPEATABLE READ transaction, begun in the
  // first page's round trip and committed without waiting (the next user of
  // the connection reads the answer).
  lease::scan_transaction transaction{l};

  int limit = options.expected_rows > 0
                  ? static_cast<int>(std::min<std::size_t>(options.expected_rows, k_max_page_rows))
                  : k_first_page_rows;
  std::string last;
  bool first = true;
  for (;;) {
    std::vector<statement> q;
    if (first) {
      q.emplace_back("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
      q.push_back(first_page(limit));
    } else {
      q.push_back(next_page(last, limit));
    }
    std::vector<result_ptr> results;
    try {
      results = l.run(q);
    } catch (const connection_lost& e) {
      transaction.open = false;
      // Nothing delivered yet: the scan can start over on a new connection.
      if (!first) throw store_error(EIO, std::string(what) + " in " + where_ + ": " + e.what());
      l.reconnect();
      try {
        results = l.run(q);
      } catch (const connection_lost& again) {
        throw store_error(EIO, std::string(what) + " in " + where_ + ": " + again.what());
      }
    }
    if (first) transaction.open = PQresultStatus(results[0].get()) == PGRES_COMMAND_OK;
    check(results, what, where_);
    const rows page(results.back().get(), 2, what, where_);
    if (page.count() > limit) page.bad("more rows than asked for");
    std::size_t bytes = 0;
    for (int i = 0; i < page.count(); ++i) {
      const std::string_view key = page.at(i, 0);
      // Keys must move on strictly, or the next page would not.
      if (!first || i > 0) {
        const std::string_view previous = i > 0 ? page.at(i - 1, 0) : std::string_view(last);
        if (backward ? key >= previous : key <= previous) page.bad("keys out of order");
      }
      const std::string_view value = page.at(i, 1);
      bytes += key.size() + value.size();
      if (!fn(key, value)) return;
    }
    if (page.count() < limit) return;
    last = std::string(page.at(page.count() - 1, 0));
    const std::size_t per_row = std::max<std::size_t>(1, bytes / static_cast<std::size_t>(limit));
    limit = static_cast<int>(std::clamp<std::size_t>(
        std::min<std::size_t>(static_cast<std::size_t>(limit) * 8, k_page_bytes / per_row), 1,
        k_max_page_rows));
    first = false;
  }
}

void postgres_engine::scan_consistent(
    std::span<const table> tables, std::string_view what,
    const std::function<void(table t, std::string_view key, std::string_view value)>& fn) const {
  // Every page of every table in one read-only REPEATABLE READ transaction:
  // one snapshot of the database, whatever the volume's writers commit
  // meanwhile. A lost connection ends the scan (EIO): what was delivered
  // cannot be continued in another snapshot.
  lease l(*this, what);
  lease::scan_transaction transaction{l};
  const auto run = [&](std::vector<statement>& q) {
    try {
      return l.run(q);
    } catch (const connection_lost& e) {
      transaction.open = false;
      throw store_error(EIO, std::string(what) + " in " + where_ + ": " + e.what());
    }
  };
  {
    std::vector<statement> q;
    q.emplace_back("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    // Takes the snapshot now, before the first table is read.
    q.emplace_back("SELECT 1");
    const std::vector<result_ptr> results = run(q);
    transaction.open = PQresultStatus(results[0].get()) == PGRES_COMMAND_OK;
    check(results, what, where_);
  }
  for (const table t : tables) {
    const std::string name = table_sql(t);
    std::string last;
    bool first = true;
    for (;;) {
      std::vector<statement> q;
      if (first) {
        q.emplace_back("SELECT k, v FROM " + name + " ORDER BY k LIMIT " +
                       std::to_string(k_max_page_rows));
      } else {
        q.emplace_back("SELECT k, v FROM " + name + " WHERE k > $1 ORDER BY k LIMIT " +
                       std::to_string(k_max_page_rows));
        q.back().own(last, k_bytea_oid);
      }
      const std::vector<result_ptr> results = run(q);
      check(results, what, where_);
      const rows page(results.back().get(), 2, what, where_);
      if (page.count() > k_max_page_rows) page.bad("more rows than asked for");
      for (int i = 0; i < page.count(); ++i) {
        const std::string_view key = page.at(i, 0);
        const std::string_view previous = i > 0 ? page.at(i - 1, 0) : std::string_view(last);
        if ((!first || i > 0) && key <= previous) page.bad("keys out of order");
        fn(t, key, page.at(i, 1));
      }
      if (page.count() < k_max_page_rows) break;
      last = std::string(page.at(page.count() - 1, 0));
      first = false;
    }
  }
}

std::unique_ptr<metadata_batch> postgres_engine::new_batch() const {
  return std::make_unique<postgres_batch>();
}

namespace {

// The statements of a batch after its locks: its expectations, its writes,
// the token of its outcome row (none for an empty `outcome_key`) and its
// notice on `channel`.
std::vector<statement> batch_transaction(const postgres_batch& b, const std::string& outcome_key,
                                         std::uint64_t token, const std::string& channel) {
  std::vector<statement> q;
  if (!b.expected().empty()) q.emplace_back(expectation_sql(b.expected()));
  for (statement& s : batch_statements(b.ops())) q.push_back(std::move(s));
  // In the batch's transaction: the token that says, after a lost
  // connection, whether it committed (await_outcome).
  if (!outcome_key.empty()) {
    statement mark(std::string("INSERT INTO ") + table_sql(table::meta) +
                   " (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v");
    mark.param(outcome_key, k_bytea_oid);
    mark.own(encode_outcome(token), k_bytea_oid);
    q.push_back(std::move(mark));
  }
  // In the batch's transaction: listeners hear it when it commits, never
  // when it does not.
  if (!b.notice().empty()) {
    statement notify("SELECT pg_notify($1, $2)");
    notify.param(channel, k_text_oid);
    notify.param(b.notice(), k_text_oid);
    q.push_back(std::move(notify));
  }
  return q;
}

}  // namespace

bool postgres_engine::committed_before_loss(lease& l, const store_error& lost, int attempt,
                                            const std::string& outcome_key, std::uint64_t token,
                                            const std::string& what) {
  // The statements (and the Sync that commits them) may have reached the
  // server: ask the server which, on a new connection. A batch applied
  // twice would count its chunk references twice.
  const auto lost_backend = l.backend();
  if (outcome_key.empty() || attempt >= k_max_write_attempts - 1)
    throw store_error(EIO, what + ": the connection was lost, the commit may or may not " +
                               "have happened: " + lost.what());
  l.reconnect();
  if (await_outcome(l, lost_backend, outcome_key, token, what) == outcome::committed) {
    log_info(what + ": the connection was lost after the commit (" + lost.what() +
             "); it had committed");
    return true;
  }
  log_info(what + ": the connection was lost before the commit (" + lost.what() +
           "); trying again");
  return false;
}

void postgres_engine::write(metadata_batch& batch, bool) {
  if (read_only_) throw store_error(EROFS, where_ + " is open read-only");
  auto* b = dynamic_cast<postgres_batch*>(&batch);
  if (!b) throw store_error(EINVAL, "a batch of another engine written to " + where_);
  if (b->empty()) return;
  const std::string what = "committing to " + where_;
  for (int attempt = 0;; ++attempt) {
    lease l(*this, what);
    std::vector<statement> q;
    // First in the batch's transaction: the batch applies only while this
    // engine holds the volume's lock (a restarted server or a dropped
    // connection lost it, and another writer may have it now).
    const std::string lock_check = volume_lock_check(what);
    if (!lock_check.empty()) q.emplace_back(lock_check);
    // Writers beside others on one volume, and any batch that expects
    // records to be as read: commits one at a time across the volume's
    // clients (a transaction-level advisory lock, let go at commit, also
    // held by write_locked's "commit" section from its reads on), so the
    // expectations are checked against every commit before this one and
    // nothing commits between the check and this batch's writes.
    if (!locks_volume_ || shares_volume_ || !b->expected().empty())
      q.emplace_back(k_commit_lock_sql);
    const std::uint64_t token = next_token_.fetch_add(1, std::memory_order_relaxed);
    const std::string outcome_key = outcome_row(l);
    for (statement& s : batch_transaction(*b, outcome_key, token, channel_))
      q.push_back(std::move(s));
    std::vector<result_ptr> results;
    try {
      results = l.run(q);
    } catch (const connection_lost& e) {
      if (committed_before_loss(l, e, attempt, outcome_key, token, what)) return;
      continue;  // the batch again
    }
    const char* state = !results.empty() && !lock_check.empty()
                            ? PQresultErrorField(results[0].get(), PG_DIAG_SQLSTATE)
                            : nullptr;
    for (const result_ptr& r : results)
      if (const char* st = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
          st && std::string_view(st) == k_conflict_sqlstate)
        throw write_conflict(what + ": a record it expected was changed by another writer");
    if (state && std::string_view(state) == k_lock_lost_sqlstate) {
      // Nothing was applied.
      retake_volume_lock(attempt, what, lock_check);
      continue;
    }
    check(results, "committing", where_);
    return;
  }
}

// The reads of write_locked: statements in its transaction, on its
// connection, after its lock.
class postgres_engine::transaction_reads final : public locked_reads {
 public:
  transaction_reads(lease& l, const std::string& where) : lease_(l), where_(where) {}
  std::vector<std::optional<std::string>> get_many(table t, std::span<const std::string> keys,
                                                   std::string_view what) override {
    if (keys.empty()) return std::vector<std::optional<std::string>>(keys.size());
    // A lost connection ends the transaction: write_locked starts again.
    return get_many_rows(lease_.run(get_many_query(t, keys)), keys, what, where_);
  }
  std::vector<std::pair<std::string, std::string>> scan(table t, const key_range& range,
                                                        std::size_t limit,
                                                        std::string_view what) override {
    std::vector<statement> q;
    // One row past the limit tells "too many" from "exactly the limit".
    q.emplace_back(std::string("SELECT k, v FROM ") + table_sql(t) + " WHERE k >= $1" +
                   (range.upper.empty() ? "" : " AND k < $2") + " ORDER BY k LIMIT " +
                   std::to_string(limit + 1));
    q.back().param(range.lower, k_bytea_oid);
    if (!range.upper.empty()) q.back().param(range.upper, k_bytea_oid);
    const std::vector<result_ptr> results = lease_.run(q);
    check(results, what, where_);
    const rows found(results[0].get(), 2, what, where_);
    if (static_cast<std::size_t>(found.count()) > limit)
      found.bad("more than " + std::to_string(limit) + " rows");
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(static_cast<std::size_t>(found.count()));
    for (int i = 0; i < found.count(); ++i) out.emplace_back(found.at(i, 0), found.at(i, 1));
    return out;
  }

 private:
  lease& lease_;
  const std::string& where_;
};

void postgres_engine::write_locked(std::string_view section,
                                   const std::function<void(locked_reads&, metadata_batch&)>& build,
                                   bool sync) {
  if (!shares_volume_) return metadata_engine::write_locked(section, build, sync);
  locked_transaction(section, build, true);
}

void postgres_engine::update_apart(
    std::string_view section, const std::function<void(locked_reads&, metadata_batch&)>& build) {
  if (read_only_) throw store_error(EROFS, where_ + " is open read-only");
  locked_transaction(section, build, false);
}

void postgres_engine::locked_transaction(
    std::string_view section, const std::function<void(locked_reads&, metadata_batch&)>& build,
    bool of_volume) {
  const std::string what = "committing to " + where_;
  for (int attempt = 0;; ++attempt) {
    lease l(*this, what);
    // 1. The transaction, the volume's lock checked, the section's lock.
    std::vector<statement> begin;
    begin.emplace_back("BEGIN");
    const std::string lock_check = of_volume ? volume_lock_check(what) : std::string();
    if (!lock_check.empty()) begin.emplace_back(lock_check);
    const bool checks_lock = begin.size() == 2;
    // A server process whose client went away mid-transaction (a network
    // cut) would hold the section's lock until TCP gives up, hours later:
    // the server ends it after a minute of waiting for its client instead.
    begin.emplace_back(
        "SELECT set_config('idle_in_transaction_session_timeout', '60s', true) WHERE "
        "current_setting('idle_in_transaction_session_timeout') IN ('0', '0ms')");
    statement take(
        "SELECT pg_advisory_xact_lock(hashtextextended('densefs ' || $1 || ' ' || "
        "current_schema(), 0))");
    take.own(std::string(section), k_text_oid);
    begin.push_back(std::move(take));
    postgres_batch batch;
    bool building = false;  // the caller's build runs (its reads done, none pending)
    try {
      try {
        const std::vector<result_ptr> results = l.run(begin);
        const char* state =
            checks_lock ? PQresultErrorField(results[1].get(), PG_DIAG_SQLSTATE) : nullptr;
        if (state && std::string_view(state) == k_lock_lost_sqlstate) {
          l.reconnect();  // out of the failed transaction
          retake_volume_lock(attempt, what, lock_check);
          continue;
        }
        check(results, what, where_);
        // 2. What the caller reads and writes.
        transaction_reads reads(l, where_);
        building = true;
        build(reads, batch);
      } catch (const connection_lost& e) {
        // Nothing was sent that commits: start again on a new connection,
        // once the old one's server process (which may still hold the
        // section's lock) is gone.
        if (attempt >= k_max_write_attempts - 1) throw store_error(EIO, what + ": " + e.what());
        const auto lost_backend = l.backend();
        l.reconnect();
        end_backend(l, lost_backend, what + ": ending the lost connection's transaction");
        continue;
      }
    } catch (const connection_lost&) {
      l.reconnect();
      throw;
    } catch (...) {
      // The caller's build refused (a name that exists, a directory not
      // empty: every failed namespace operation of a writer beside others):
      // the transaction and its lock end with a ROLLBACK on the same
      // connection; otherwise, or if that fails, with the connection.
      bool rolled_back = false;
      if (building) {
        try {
          std::vector<statement> rollback;
          rollback.emplace_back("ROLLBACK");
          const std::vector<result_ptr> done = l.run(rollback);
          rolled_back = !done.empty() && !failed(done.back().get());
        } catch (...) {
          rolled_back = false;
        }
      }
      if (!rolled_back) l.reconnect();
      throw;
    }
    // 3. The batch, committed.
    const std::uint64_t token = next_token_.fetch_add(1, std::memory_order_relaxed);
    const std::string outcome_key = outcome_row(l);
    std::vector<statement> q;
    try {
      q = batch_transaction(batch, outcome_key, token, channel_);
      q.emplace_back("COMMIT");
    } catch (...) {
      l.reconnect();
      throw;
    }
    std::vector<result_ptr> results;
    try {
      results = l.run(q);
    } catch (const connection_lost& e) {
      if (committed_before_loss(l, e, attempt, outcome_key, token, what)) return;
      continue;  // what was read may have changed since: read and build again
    }
    for (const result_ptr& r : results) {
      if (!failed(r.get())) continue;
      l.reconnect();  // out of the failed transaction
      if (const char* st = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
          st && std::string_view(st) == k_conflict_sqlstate)
        throw write_conflict(what + ": a record it expected was changed by another writer");
      check(results, "committing", where_);
    }
    return;
  }
}

void postgres_engine::end_backend(lease& l, const std::pair<int, std::string>& lost,
                                  const std::string& what) {
  const auto unknown = [&](const std::string& why) { return store_error(EIO, what + ": " + why); };
  if (lost.first == 0 || lost.second.empty()) throw unknown("the server process was not known");
  // A server process whose client is gone may still be running its
  // transaction (a network cut is seen by the server only when it next
  // reads or writes), and holding its locks. Ending it ends the
  // transaction either way.
  std::string pid = std::to_string(lost.first);
  for (int i = 0;; ++i) {
    std::vector<statement> q;
    statement s(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE pid = $1::text::int AND backend_start::text = $2");
    s.param(pid, k_text_oid);
    s.param(lost.second, k_text_oid);
    q.push_back(std::move(s));
    std::vector<result_ptr> results;
    try {
      results = l.run(q);
    } catch (const connection_lost& e) {
      throw unknown(e.what());
    }
    check(results, what, where_);
    if (PQntuples(results[0].get()) == 0) return;  // gone
    if (i >= 100) throw unknown("its server process " + pid + " did not end within 10 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

postgres_engine::outcome postgres_engine::await_outcome(lease& l,
                                                        const std::pair<int, std::string>& lost,
                                                        const std::string& key, std::uint64_t token,
                                                        const std::string& what) {
  const std::string unknown =
      what + ": the connection was lost, and whether the commit happened is unknown";
  // Until the lost connection's server process has ended, the row may
  // still change.
  std::optional<std::string> row;
  try {
    end_backend(l, lost, unknown);
    row = get(table::meta, key, what);
  } catch (const store_error& e) {
    if (std::string_view(e.what()).starts_with(unknown)) throw;
    throw store_error(EIO, unknown + ": " + e.what());
  }
  if (row && *row == encode_outcome(token)) return outcome::committed;
  return outcome::not_committed;
}

// ---------------------------------------------------------------- watch

postgres_engine::listening_connection postgres_engine::listen(const std::string& what) const {
  listening_connection pg(connect(conninfo_, false, where_, what), &PQfinish);
  // Notifications arrive outside pipeline mode only.
  bool listening = PQexitPipelineMode(pg.get()) == 1;
  if (listening) {
    result_ptr r(PQexec(pg.get(), ("LISTEN " + channel_).c_str()));
    listening = PQresultStatus(r.get()) == PGRES_COMMAND_OK;
  }
  if (!listening)
    throw store_error(
        EIO, what + " in " + where_ + ": LISTEN failed: " + one_line(PQerrorMessage(pg.get())));
  return pg;
}

bool postgres_engine::write_and_await(metadata_batch& batch,
                                      const std::function<bool(std::string_view)>& answer,
                                      std::chrono::milliseconds timeout) {
  const std::string what = "waiting for an answer in " + where_;
  // Listening before the batch is written.
  const listening_connection owner = listen(what);
  PGconn* pg = owner.get();
  write(batch, false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (PQconsumeInput(pg) != 1) throw store_error(EIO, what + ": " + one_line(PQerrorMessage(pg)));
    while (PGnotify* n = PQnotifies(pg)) {
      const std::string notice = n->extra ? n->extra : "";
      PQfreemem(n);
      if (answer(notice)) return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fd{PQsocket(pg), POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
      throw store_error(errno, what + ": poll: " + std::strerror(errno));
  }
}

bool postgres_engine::watch(std::function<void(std::string_view notice)> fn) {
  unwatch();
  watch_wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (watch_wake_fd_ < 0)
    throw store_error(errno, "watching " + where_ + ": eventfd: " + std::strerror(errno));
  watcher_ = std::thread([this, fn = std::move(fn)] { watch_loop(fn); });
  return true;
}

void postgres_engine::unwatch() {
  if (!watcher_.joinable()) return;
  const std::uint64_t one = 1;
  if (::write(watch_wake_fd_, &one, sizeof one) != sizeof one)
    log_error("watching " + where_ + ": cannot wake the listener: " + std::strerror(errno));
  watcher_.join();
  ::close(watch_wake_fd_);
  watch_wake_fd_ = -1;
}

// One connection outside the pool, LISTENing; the thread sleeps in poll()
// on its socket and the wake eventfd. A connection that breaks (a server
// restart, a network cut found by the keepalives) is made anew after a
// second, and the callback hears "" once it is back: whatever was notified
// meanwhile is lost, so anything may have changed.
void postgres_engine::watch_loop(std::function<void(std::string_view)> fn) {
  const std::string what = "listening for changes";
  const auto deliver = [&](const std::function<void(std::string_view)>& to, std::string_view n) {
    try {
      to(n);
    } catch (const std::exception& e) {
      log_error(what + " in " + where_ + ": a change notice was not applied: " + e.what());
    }
  };
  bool stopping = false;
  bool missed = false;
  const auto wait = [&](int fd, int timeout_ms) {
    pollfd fds[2] = {{watch_wake_fd_, POLLIN, 0}, {fd, POLLIN, 0}};
    const int n = ::poll(fds, fd >= 0 ? 2 : 1, timeout_ms);
    if (n > 0 && (fds[0].revents & POLLIN)) stopping = true;
    return n > 0 && fd >= 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP));
  };
  while (!stopping) {
    listening_connection owner(nullptr, &PQfinish);
    try {
      owner = listen(what);
    } catch (const store_error& e) {
      log_error(std::string(e.what()) + " (trying again)");
      missed = true;
      wait(-1, 1000);
      continue;
    }
    PGconn* pg = owner.get();
    if (missed) {
      log_info(where_ + ": listening for changes again; dropping what this client caches");
      deliver(fn, "");
      missed = false;
    }
    while (!stopping) {
      if (!wait(PQsocket(pg), -1)) continue;
      if (PQconsumeInput(pg) != 1) {
        log_error(what + " in " + where_ + ": " + one_line(PQerrorMessage(pg)) +
                  " (connecting again)");
        missed = true;
        break;
      }
      while (PGnotify* n = PQnotifies(pg)) {
        const std::string notice = n->extra ? n->extra : "";
        PQfreemem(n);
        // An empty notice would read as "missed": none is ever sent.
        if (!notice.empty()) deliver(fn, notice);
      }
    }
    if (missed) wait(-1, 1000);
  }
}

}  // namespace densefs::store
