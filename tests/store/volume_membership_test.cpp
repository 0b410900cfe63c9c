// Volume membership without a mount: sessions, leases, holds and the role,
// over a real engine (RocksDB in a temporary directory; the membership sees
// only the metadata_engine interface, so the PostgreSQL suites cover the
// same code with a database; what only PostgreSQL checks, the session
// row's expectation, runs on the phase's server). Two memberships on one
// engine stand for two clients of one volume.
#include "store/membership/volume_membership.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "store/metadata/postgres_engine.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/records.h"
#include "tests/postgres_server.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

class volume_membership_test : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = rocksdb_engine::open(dir_.path() / "db", {.create = true}); }

  std::unique_ptr<volume_membership> member(volume_role role, const std::string& client,
                                            bool shared = true) {
    std::filesystem::create_directories(dir_.path() / client);
    return std::make_unique<volume_membership>(*engine_, dir_.path() / client, role, shared,
                                               role == volume_role::follower);
  }

  // A session row as a client that stopped without ending leaves it.
  void put_session(const session_record& r) {
    const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
    batch->put(table::meta, session_key(r.id), encode_session(r));
    engine_->write(*batch, false);
  }

  static std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  test::temp_dir dir_;
  std::unique_ptr<rocksdb_engine> engine_;
};

TEST_F(volume_membership_test, a_volume_that_is_not_shared_writes_nothing_and_holds_every_lease) {
  const auto alone = member(volume_role::alone, "a", false);
  alone->begin("/mnt");
  EXPECT_EQ(alone->session_id(), "");
  EXPECT_TRUE(alone->sessions().empty());
  EXPECT_TRUE(volume_membership::sessions_in(*engine_).empty());
  EXPECT_TRUE(alone->take_lease(volume_membership::k_lease_gc));
  EXPECT_TRUE(alone->holds_lease(volume_membership::k_lease_re_encoder));
  EXPECT_FALSE(alone->watch([](const change_notice&) {}));
  EXPECT_TRUE(alone->held_inodes().empty());
  EXPECT_FALSE(alone->others_mounted());
  EXPECT_FALSE(alone->other_writers_alive());
  alone->end();
}

TEST_F(volume_membership_test, a_session_is_a_row_while_it_lasts_and_its_id_stays_in_the_client) {
  const auto writer = member(volume_role::alone, "w");
  writer->begin("/mnt/w");
  const std::string id = writer->session_id();
  ASSERT_EQ(id.size(), 16u);
  const std::vector<session_record> rows = volume_membership::sessions_in(*engine_);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, id);
  EXPECT_EQ(rows[0].mountpoint, "/mnt/w");
  EXPECT_EQ(rows[0].pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_FALSE(rows[0].read_only);
  std::string recorded;
  std::getline(std::ifstream(dir_.path() / "w" / "SESSION.densefs"), recorded);
  EXPECT_EQ(recorded, id);
  writer->end();
  EXPECT_TRUE(volume_membership::sessions_in(*engine_).empty());
  writer->end();  // twice is harmless
}

TEST_F(volume_membership_test, the_writer_alone_clears_dead_rows_and_counts_a_live_follower) {
  const std::int64_t now = unix_now();
  const std::int64_t long_ago = now - 4 * volume_membership::heartbeat_interval().count();
  // A writer killed a moment ago (alive by the clock: still dead, this one
  // holds the volume's lock), a follower that stopped beating, a live one.
  put_session({"000000000000000a", "h", 1, "/old", now, now, false});
  put_session({"000000000000000b", "h", 2, "/gone", long_ago, long_ago, true});
  put_session({"000000000000000c", "h", 3, "/ro", now, now, true});
  const auto writer = member(volume_role::alone, "w");
  writer->begin("/mnt/w");
  std::set<std::string> left;
  for (const session_record& r : volume_membership::sessions_in(*engine_)) left.insert(r.id);
  EXPECT_EQ(left, (std::set<std::string>{"000000000000000c", writer->session_id()}));
  EXPECT_TRUE(writer->others_mounted());
  EXPECT_FALSE(writer->other_writers_alive());
}

TEST_F(volume_membership_test, one_writer_beside_others_holds_a_lease_until_its_session_ends) {
  const auto a = member(volume_role::writer_beside_others, "a");
  const auto b = member(volume_role::writer_beside_others, "b");
  a->begin("/mnt/a");
  b->begin("/mnt/b");
  EXPECT_TRUE(a->other_writers_alive());
  EXPECT_TRUE(a->take_lease(volume_membership::k_lease_gc));
  EXPECT_TRUE(a->holds_lease(volume_membership::k_lease_gc));
  EXPECT_TRUE(a->take_lease(volume_membership::k_lease_gc));  // renewed
  EXPECT_FALSE(b->take_lease(volume_membership::k_lease_gc));
  EXPECT_FALSE(b->holds_lease(volume_membership::k_lease_gc));
  EXPECT_TRUE(b->take_lease(volume_membership::k_lease_re_encoder));  // another lease
  a->end();
  EXPECT_TRUE(b->take_lease(volume_membership::k_lease_gc));
  EXPECT_FALSE(b->other_writers_alive());
}

TEST_F(volume_membership_test, a_followers_holds_count_while_it_lives_and_end_with_its_session) {
  const auto writer = member(volume_role::alone, "w");
  writer->begin("/mnt/w");
  const auto follower = member(volume_role::follower, "f");
  follower->begin("/mnt/f");  // asks the writer; RocksDB carries no answer
  EXPECT_NE(follower->session_id(), "");
  follower->hold_inode(7);
  follower->hold_inode(9);
  follower->release_inode_hold(9);
  EXPECT_EQ(writer->held_inodes(), (std::set<std::uint64_t>{7}));
  // A hold row whose session is gone (a crash between the two writes of
  // an end) is erased by the next look.
  {
    const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
    batch->put(table::meta, hold_key("00000000000000ff", 11), encode_hold());
    engine_->write(*batch, false);
  }
  EXPECT_EQ(writer->held_inodes(), (std::set<std::uint64_t>{7}));
  std::size_t hold_rows = 0;
  engine_->scan(table::meta, prefix_range(k_hold_prefix), {}, "holds",
                [&](std::string_view, std::string_view) {
                  ++hold_rows;
                  return true;
                });
  EXPECT_EQ(hold_rows, 1u);
  follower->end();
  EXPECT_TRUE(writer->held_inodes().empty());
}

TEST_F(volume_membership_test, without_a_heartbeat_the_clock_decides_who_is_alive) {
  const std::int64_t now = unix_now();
  const std::int64_t expired = now - 3 * volume_membership::heartbeat_interval().count() - 2;
  const auto tool = member(volume_role::alone, "t");
  EXPECT_TRUE(tool->session_alive({"0000000000000001", "h", 1, "/m", now, now, false}));
  EXPECT_FALSE(tool->session_alive({"0000000000000002", "h", 1, "/m", expired, expired, false}));
  // With a heartbeat, a row seen expired for the first time is alive: its
  // standing still has not been watched across this client's beats.
  const auto writer = member(volume_role::writer_beside_others, "w");
  writer->begin("/mnt/w");
  EXPECT_TRUE(writer->session_alive({"0000000000000002", "h", 1, "/m", expired, expired, false}));
}

TEST_F(volume_membership_test, the_heartbeat_renews_the_row_and_runs_the_hook) {
  ::setenv("DENSEFS_HEARTBEAT_SECONDS", "1", 1);
  const auto writer = member(volume_role::alone, "w");
  writer->begin("/mnt/w");
  const std::int64_t started = volume_membership::sessions_in(*engine_).at(0).heartbeat;
  std::mutex m;
  std::condition_variable beaten;
  int beats = 0;
  writer->on_heartbeat([&] {
    std::lock_guard lock(m);
    ++beats;
    beaten.notify_all();
  });
  {
    std::unique_lock lock(m);
    // Two beats: the second one's row is at least a second newer.
    ASSERT_TRUE(beaten.wait_for(lock, std::chrono::seconds(10), [&] { return beats >= 2; }));
  }
  writer->on_heartbeat({});
  EXPECT_GT(volume_membership::sessions_in(*engine_).at(0).heartbeat, started);
  writer->end();
  ::unsetenv("DENSEFS_HEARTBEAT_SECONDS");
}

// Found by mount.locks_test in CI: the answer to a client that mounted was
// written as the session row with a newer heartbeat, so the next beat no
// longer found the row it expected, took it as erased by another client,
// and refused every file lock from then on (ENOLCK). On PostgreSQL: RocksDB
// has one writer and checks no expectation.
TEST(volume_membership_postgres, answering_a_client_that_mounted_keeps_the_session_and_its_locks) {
  DENSEFS_POSTGRES_SERVER(server);
  ::setenv("DENSEFS_HEARTBEAT_SECONDS", "2", 1);
  test::temp_dir dir;
  postgres_engine_options o;
  o.conninfo = server->conninfo(server->create_database());
  postgres_engine::create(o);
  const std::unique_ptr<postgres_engine> engine = postgres_engine::open(o);
  volume_membership writer(*engine, dir.path(), volume_role::alone, true, false);
  writer.begin("/mnt/w");
  std::mutex m;
  std::condition_variable beaten;
  int beats = 0;
  writer.on_heartbeat([&] {
    std::lock_guard lock(m);
    ++beats;
    beaten.notify_all();
  });
  // A second after the row was written, so that an answer written as a
  // new heartbeat would differ from it.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  writer.answer_sessions({"00000000000000aa"});
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(beaten.wait_for(lock, std::chrono::seconds(20), [&] { return beats >= 3; }));
  }
  writer.on_heartbeat({});
  const lock_request flock_a{
      .ino = 5, .kind = lock_kind::flock, .owner = 1, .type = lock_type::write, .pid = 1};
  EXPECT_TRUE(writer.locks().set(flock_a));
  writer.end();
  ::unsetenv("DENSEFS_HEARTBEAT_SECONDS");
}

}  // namespace
}  // namespace densefs::store
