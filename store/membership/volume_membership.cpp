#include "store/membership/volume_membership.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "store/durable_file.h"
#include "store/error.h"
#include "store/hash.h"
#include "store/log.h"
#include "store/metadata/metadata_engine.h"

namespace densefs::store {

namespace {

// How long a follower's mount waits for the writer's answer.
constexpr std::chrono::milliseconds k_writer_answer_timeout{30000};
// This client's last session id, in its store directory (docs/format.md).
constexpr const char* k_session_file = "SESSION.densefs";

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One pass over the meta rows under `prefix` (sessions, holds): rows
// nobody reads again soon, kept out of the engine's cache.
void scan_meta(const metadata_engine& engine, std::string_view prefix, const char* what,
               const std::function<bool(std::string_view key, std::string_view value)>& fn) {
  scan_options o;
  o.fill_cache = false;
  engine.scan(table::meta, prefix_range(prefix), o, what, fn);
}

}  // namespace

volume_membership::volume_membership(metadata_engine& engine, std::filesystem::path client_dir,
                                     volume_role role, bool shared, bool read_only)
    : engine_(engine),
      client_dir_(std::move(client_dir)),
      role_(role),
      shared_(shared),
      read_only_(read_only),
      locks_(engine, [this](const session_record& r) { return session_alive(r); }) {}

volume_membership::~volume_membership() {
  try {
    end();
  } catch (const store_error& e) {
    log_error("closing store " + client_dir_.string() + ": ending its session: " + e.what());
  }
}

std::chrono::seconds volume_membership::heartbeat_interval() {
  if (const char* env = std::getenv("DENSEFS_HEARTBEAT_SECONDS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 1 && v <= 3600) return std::chrono::seconds(v);
  }
  return std::chrono::seconds(10);
}

bool volume_membership::session_expired(const session_record& r, std::int64_t now_unix) {
  return now_unix - r.heartbeat > 3 * heartbeat_interval().count();
}

void volume_membership::write_meta_row(std::string_view key,
                                       std::optional<std::string_view> value) {
  const std::unique_ptr<metadata_batch> batch = engine_.new_batch();
  if (value)
    batch->put(table::meta, key, *value);
  else
    batch->erase(table::meta, key);
  engine_.write(*batch, false);
}

std::vector<session_record> volume_membership::sessions_in(const metadata_engine& engine) {
  std::vector<session_record> out;
  scan_meta(engine, k_session_prefix, "listing sessions",
            [&](std::string_view key, std::string_view value) {
              out.push_back(decode_session(key, value));
              return true;
            });
  return out;
}

std::vector<session_record> volume_membership::sessions() const {
  if (!shared_) return {};
  return sessions_in(engine_);
}

void volume_membership::begin(const std::string& mountpoint) {
  if (!shared_ || (read_only_ && !follows())) return;
  session_record r;
  r.id = random_hex_id("a random session id");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  r.host = host;
  r.pid = static_cast<std::uint32_t>(::getpid());
  r.mountpoint = mountpoint;
  r.started = r.heartbeat = unix_now();
  r.read_only = follows();
  // Rows of sessions that stopped without ending (kill -9, a lost machine):
  // this mount holds the volume's lock, so none of them is writing. A
  // writer's row is dead even before it expires (a writer killed and
  // mounted again at once): counted as another client, it would make this
  // one commit at every close and keep unlinked files for followers that
  // are not there. (A follower leaves them to the writer.)
  // Writers beside others keep each other's rows (the heartbeat erases a
  // row once session_alive finds it dead: by the clock alone, a mount just
  // after a database outage would take every live writer for dead), but
  // for the last session of this directory (a writer killed and mounted
  // again at once): this mount holds the directory's lock, so that one is
  // over.
  const std::unique_ptr<metadata_batch> batch = engine_.new_batch();
  std::vector<session_record> all = sessions();
  const bool shares = writes_beside_others();
  std::string previous;
  if (std::ifstream in(client_dir_ / k_session_file); in) std::getline(in, previous);
  std::set<std::string> ended;  // their file locks go with them
  if (!previous.empty()) ended.insert(previous);
  if (!follows()) {
    std::erase_if(all, [&](const session_record& old) {
      const bool dead = (!shares && (!old.read_only || session_expired(old, r.started))) ||
                        (!previous.empty() && old.id == previous);
      if (dead) {
        batch->erase(table::meta, session_key(old.id));
        ended.insert(old.id);
        log_info("session " + old.id + " (" + old.host + " pid " + std::to_string(old.pid) +
                 " on " + old.mountpoint + ") ended: this mount " +
                 (old.id == previous ? "follows it in the same client directory"
                                     : "writes the volume alone"));
      }
      return dead;
    });
  }
  file_locks::erase_rows_of(engine_, ended, *batch);
  batch->put(table::meta, session_key(r.id), encode_session(r));
  // The live writers, each of which must answer (one writer alone answers
  // without naming itself).
  std::set<std::string> writers_alive;
  for (const session_record& s : all)
    if (!s.read_only && !session_expired(s, r.started)) writers_alive.insert(s.id);
  // A follower's directory too (its holds end with its session).
  try {
    write_file_durably(client_dir_ / k_session_file, r.id + "\n");
  } catch (const store_error& e) {
    log_error(std::string("recording the session: ") + e.what() +
              " (after a crash, the next mount here waits for this session to expire)");
  }
  if ((follows() || shares) && !writers_alive.empty()) {
    // Close-to-open from the first open: the writer commits at close only
    // once it knows of another client, and files it closed before that may
    // still be staged in its memory. So the follower asks, in the batch
    // that makes its session, and waits until the writer has committed
    // them and answers (fs::filesystem::answer_new_clients). A writer that
    // does not answer in time is logged, not fatal: it learns of this
    // session at its next heartbeat anyway.
    change_notice ask;
    ask.sessions_started.push_back(r.id);
    batch->set_notice(encode_change_notice(ask));
    std::set<std::string> answered_by;
    const bool answered = engine_.write_and_await(
        *batch,
        [&](std::string_view text) {
          const std::optional<change_notice> c = decode_change_notice(text);
          if (!c || std::find(c->sessions_answered.begin(), c->sessions_answered.end(), r.id) ==
                        c->sessions_answered.end())
            return false;
          if (c->writer.empty()) return true;  // a writer alone
          answered_by.insert(c->writer);
          return std::includes(answered_by.begin(), answered_by.end(), writers_alive.begin(),
                               writers_alive.end());
        },
        k_writer_answer_timeout);
    if (!answered)
      log_warning("the writer did not answer within " +
                  std::to_string(k_writer_answer_timeout.count() / 1000) +
                  " s; files it closed just before this mount may be seen only once it "
                  "commits them");
  } else {
    engine_.write(*batch, false);
  }
  locks_.set_session(r.id);
  session_row_ = encode_session(r);
  std::lock_guard lock(session_mutex_);
  session_ = r;
  session_id_ = r.id;
  count_others(all, r.started, false);
  observe_sessions(all);
  {
    std::lock_guard observed(observed_mutex_);
    observing_ = true;
  }
  session_stop_ = false;
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
}

void volume_membership::heartbeat_loop() {
  std::unique_lock lock(session_mutex_);
  for (;;) {
    session_wake_.wait_for(lock, heartbeat_interval(),
                           [&] { return session_stop_ || !answers_due_.empty(); });
    if (session_stop_) break;
    std::vector<std::string> answers = std::exchange(answers_due_, {});
    session_record r = *session_;
    r.heartbeat = unix_now();
    lock.unlock();
    try {
      const std::string key = session_key(r.id);
      const std::string value = encode_session(r);
      // The row, and the answer to the clients that mounted since the last
      // write (their notice rides on it: a batch must write something).
      const auto renewal = [&](bool expect_last) {
        std::unique_ptr<metadata_batch> batch = engine_.new_batch();
        if (expect_last && session_row_) batch->expect(table::meta, key, *session_row_);
        batch->put(table::meta, key, value);
        if (!answers.empty()) {
          change_notice answer;
          answer.sessions_answered = answers;
          // Beside other writers, a new client waits for each of them by name.
          if (writes_beside_others()) answer.writer = r.id;
          batch->set_notice(encode_change_notice(answer));
        }
        return batch;
      };
      const std::unique_ptr<metadata_batch> batch = renewal(true);
      session_row_.reset();
      try {
        engine_.write(*batch, false);
      } catch (const write_conflict&) {
        // Erased by another client, which took this one for dead (its
        // heartbeats could not get through for three intervals): its file
        // locks may be someone else's now. The row comes back for the rest
        // (status, holds), but no lock is granted again until a new mount.
        log_error(
            "this mount's session row was erased by another client that took it for "
            "dead; its file locks may have been taken: flock and fcntl now fail with "
            "ENOLCK until it is mounted again");
        locks_.mark_session_lost();
        engine_.write(*renewal(false), false);
      }
      session_row_ = value;
      beat();
    } catch (const store_error& e) {
      // The next beat tries again; status shows the session as expired
      // meanwhile, which is the truth as others can see it. Others'
      // standing still counts again from the next beat that goes through.
      // Answers not written go with the next beat.
      log_error(std::string("session heartbeat: ") + e.what());
      {
        std::lock_guard observed(observed_mutex_);
        observed_.clear();
      }
      std::lock_guard again(session_mutex_);
      answers_due_.insert(answers_due_.begin(), answers.begin(), answers.end());
    }
    {
      std::lock_guard hook(heartbeat_hook_mutex_);
      if (heartbeat_hook_) heartbeat_hook_();
    }
    lock.lock();
    session_->heartbeat = r.heartbeat;
  }
}

void volume_membership::beat() {
  // After this session's row is renewed: what the others' rows say now.
  const std::vector<session_record> all = sessions();
  count_others(all, unix_now(), true);
  observe_sessions(all);
  if (writes_beside_others()) erase_dead_sessions(all);
  std::vector<std::string> held;
  {
    std::lock_guard leases(lease_mutex_);
    held.assign(leases_.begin(), leases_.end());
  }
  for (const std::string& name : held)
    if (!take_lease(name)) log_info("another writer took the lease of " + name);
}

bool volume_membership::take_lease(std::string_view name) {
  if (!writes_beside_others()) return true;
  const std::string key = std::string(k_lease_prefix) + std::string(name);
  const std::int64_t now = unix_now();
  bool held = false;
  engine_.write_locked(
      k_counters_section,
      [&](locked_reads& reads, metadata_batch& batch) {
        held = false;
        if (const std::optional<std::string> v = reads.get(table::meta, key, "a lease")) {
          const lease_record current = decode_lease(key, *v);
          if (current.session_id != session_id_ && current.expires >= now) return;
        }
        lease_record mine{session_id_, now + 3 * heartbeat_interval().count()};
        batch.put(table::meta, key, encode_lease(mine));
        held = true;
      },
      false);
  std::lock_guard lock(lease_mutex_);
  if (held)
    leases_.emplace(name);
  else if (const auto it = leases_.find(name); it != leases_.end())
    leases_.erase(it);
  return held;
}

bool volume_membership::holds_lease(std::string_view name) const {
  if (!writes_beside_others()) return true;
  std::lock_guard lock(lease_mutex_);
  return leases_.find(name) != leases_.end();
}

bool volume_membership::other_writers_alive() const {
  if (!shared_) return false;
  const std::int64_t now = unix_now();
  for (const session_record& r : sessions())
    if (r.id != session_id_ && !r.read_only && !session_expired(r, now)) return true;
  return false;
}

void volume_membership::observe_sessions(const std::vector<session_record>& all) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(observed_mutex_);
  // A heartbeat of this client that came late (blocked while the database
  // was unreachable, then through) is a gap too: what stood still across
  // it proves nothing.
  if (now - last_observed_ > 2 * heartbeat_interval()) observed_.clear();
  last_observed_ = now;
  std::map<std::string, observed_beat> next;
  for (const session_record& r : all) {
    if (r.id == session_id_) continue;
    const auto before = observed_.find(r.id);
    next.emplace(r.id, before != observed_.end() && before->second.heartbeat == r.heartbeat
                           ? before->second
                           : observed_beat{r.heartbeat, now});
  }
  observed_ = std::move(next);
}

void volume_membership::erase_dead_sessions(const std::vector<session_record>& all) {
  const std::unique_ptr<metadata_batch> batch = engine_.new_batch();
  std::set<std::string> dead;
  for (const session_record& s : all) {
    if (s.id == session_id_ || session_alive(s)) continue;
    batch->erase(table::meta, session_key(s.id));
    dead.insert(s.id);
    log_info("session " + s.id + " (" + s.host + " pid " + std::to_string(s.pid) + " on " +
             s.mountpoint + "): no heartbeat since " + std::to_string(unix_now() - s.heartbeat) +
             " s ago; taken for gone");
  }
  if (dead.empty()) return;
  // Their file locks too, in the same batch: no lock outlives its session.
  file_locks::erase_rows_of(engine_, dead, *batch);
  engine_.write(*batch, false);
}

bool volume_membership::session_alive(const session_record& r) const {
  if (!session_expired(r, unix_now())) return true;
  std::lock_guard lock(observed_mutex_);
  if (!observing_) return false;
  const auto now = std::chrono::steady_clock::now();
  // This client's own last heartbeat is late (the database unreachable, a
  // reader blocked until it came back): nothing can be judged now.
  if (now - last_observed_ > 2 * heartbeat_interval()) return true;
  const auto seen = observed_.find(r.id);
  if (seen == observed_.end() || seen->second.heartbeat != r.heartbeat) return true;
  return now - seen->second.since <= 3 * heartbeat_interval();
}

void volume_membership::count_others(const std::vector<session_record>& all, std::int64_t now_unix,
                                     bool announce) {
  bool others = false;
  for (const session_record& r : all)
    if (r.id != session_id_ && !session_expired(r, now_unix)) others = true;
  if (others != others_mounted_.exchange(others) && announce)
    log_info(others ? "another client has the volume mounted: close now waits for the commit"
                    : "no other client has the volume mounted");
}

void volume_membership::count_others_now() {
  if (shared_ && !read_only_) count_others(sessions(), unix_now(), false);
}

void volume_membership::end() {
  std::optional<session_record> ended;
  {
    std::lock_guard lock(session_mutex_);
    if (!session_) return;
    session_stop_ = true;
  }
  session_wake_.notify_all();
  heartbeat_thread_.join();
  {
    std::lock_guard lock(session_mutex_);
    ended = std::exchange(session_, std::nullopt);
  }
  {
    std::lock_guard observed(observed_mutex_);
    observing_ = false;
    observed_.clear();
  }
  const std::unique_ptr<metadata_batch> batch = engine_.new_batch();
  batch->erase(table::meta, session_key(ended->id));
  file_locks::erase_rows_of(engine_, {ended->id}, *batch);
  locks_.set_session("");
  {
    // Leases held go with the session (another writer takes them at once),
    // each only if it is still this session's: one renewed late may have
    // been taken over.
    std::lock_guard lock(lease_mutex_);
    for (const std::string& name : leases_) {
      const std::string key = std::string(k_lease_prefix) + name;
      try {
        engine_.write_locked(
            k_counters_section,
            [&](locked_reads& reads, metadata_batch& lease_batch) {
              if (const std::optional<std::string> v = reads.get(table::meta, key, "a lease");
                  v && decode_lease(key, *v).session_id == ended->id)
                lease_batch.erase(table::meta, key);
            },
            false);
      } catch (const store_error& e) {
        // It ends by itself three heartbeats after its last renewal.
        log_error("letting the lease of " + name + " go: " + e.what());
      }
    }
    leases_.clear();
  }
  // A follower's holds end with it (so do a shared writer's): the writer
  // may release those files.
  if (follows() || writes_beside_others()) {
    const std::string prefix = hold_prefix(ended->id);
    scan_meta(engine_, prefix, "listing holds", [&](std::string_view key, std::string_view) {
      batch->erase(table::meta, key);
      return true;
    });
  }
  engine_.write(*batch, false);
}

void volume_membership::on_heartbeat(std::function<void()> fn) {
  std::lock_guard hook(heartbeat_hook_mutex_);
  heartbeat_hook_ = std::move(fn);
}

void volume_membership::hold_inode(std::uint64_t ino) {
  write_meta_row(hold_key(session_id_, ino), encode_hold());
}

void volume_membership::release_inode_hold(std::uint64_t ino) {
  write_meta_row(hold_key(session_id_, ino), std::nullopt);
}

std::set<std::uint64_t> volume_membership::held_inodes() {
  std::set<std::uint64_t> held;
  if (!shared_) return held;
  // The rows first, then the sessions: a follower that mounts in between
  // and holds a file is then seen with its session.
  std::vector<std::pair<std::string, hold_record>> rows;
  scan_meta(engine_, k_hold_prefix, "listing holds",
            [&](std::string_view key, std::string_view value) {
              rows.emplace_back(std::string(key), decode_hold(key, value));
              return true;
            });
  if (rows.empty()) return held;
  std::map<std::string, bool> alive;  // by session id
  for (const session_record& r : sessions()) alive.emplace(r.id, session_alive(r));
  const std::unique_ptr<metadata_batch> stale = engine_.new_batch();
  bool any_stale = false;
  for (const auto& [key, h] : rows) {
    const auto session = alive.find(h.session_id);
    if (session == alive.end()) {
      // An ended session's row (its end erases them; a crash in between).
      stale->erase(table::meta, key);
      any_stale = true;
    } else if (session->second) {
      held.insert(h.ino);
    }
    // Not alive: counted as gone (three heartbeats missed while this client
    // beat: killed, or cut off, as far as anyone can tell; session_alive);
    // the row goes with its session's.
  }
  if (any_stale) engine_.write(*stale, false);
  return held;
}

bool volume_membership::watch(std::function<void(const change_notice&)> fn) {
  if (!shared_) return false;
  if (!follows() && !writes_beside_others()) {
    if (read_only_) return false;
    // The writer hears its own commits' notices too: only followers that
    // mounted matter to it.
    return engine_.watch([fn = std::move(fn)](std::string_view text) {
      // Most notices are its own commits' (inodes and entries): not decoded.
      // Only a session token begins with " s".
      if (text.find(" s") == std::string_view::npos) return;
      const std::optional<change_notice> c = decode_change_notice(text);
      if (c && !c->sessions_started.empty()) {
        change_notice started;
        started.sessions_started = c->sessions_started;
        fn(started);
      }
    });
  }
  // A follower, or one of several writers: every commit of the others.
  return engine_.watch([this, fn = std::move(fn)](std::string_view text) {
    std::optional<change_notice> c;
    if (!text.empty()) c = decode_change_notice(text);
    if (!c) {
      // Missed notices (text ""), or a notice this build cannot read (a
      // newer writer): anything may have changed.
      if (!text.empty()) log_error("a change notice this densefs cannot read; dropping caches");
      c.emplace();
      c->everything = true;
    }
    // A writer's own commits (its session in their `w` token): only the
    // sessions that started matter.
    if (!c->writer.empty() && c->writer == session_id_) {
      if (c->sessions_started.empty()) return;
      c->everything = false;
      c->inodes.clear();
      c->entries.clear();
    }
    fn(*c);
  });
}

void volume_membership::unwatch() {
  engine_.unwatch();
}

void volume_membership::answer_sessions(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  {
    std::lock_guard lock(session_mutex_);
    if (!session_ || session_stop_) return;
    answers_due_.insert(answers_due_.end(), ids.begin(), ids.end());
  }
  session_wake_.notify_all();
}

}  // namespace densefs::store
