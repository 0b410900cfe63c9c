// File locks every client of a volume sees (store/membership/file_locks.h):
// the rules alone (decide_lock, first_conflict) against what the kernel's
// fs/locks.c does on one machine, then two clients of one engine (RocksDB
// in a temporary directory, two memberships with sessions: the same code
// the PostgreSQL mounts run, tests/mount/locks_test.sh).
#include "store/membership/file_locks.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "store/membership/volume_membership.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/records.h"
#include "tests/store/error_of.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

constexpr std::string_view k_a = "00000000000000aa";
constexpr std::string_view k_b = "00000000000000bb";

lock_request posix(std::uint64_t owner, std::uint64_t start, std::uint64_t end,
                   std::optional<lock_type> type, std::uint32_t pid = 1) {
  lock_request r;
  r.ino = 5;
  r.kind = lock_kind::posix;
  r.owner = owner;
  r.start = start;
  r.end = end;
  r.type = type;
  r.pid = pid;
  return r;
}

lock_request flock_of(std::uint64_t owner, std::optional<lock_type> type) {
  lock_request r = posix(owner, 0, k_lock_to_end, type);
  r.kind = lock_kind::flock;
  return r;
}

// A file's rows after `r` is granted (or the same rows when it is not).
std::vector<lock_record> apply(std::vector<lock_record> rows, std::string_view session,
                               const lock_request& r, bool* granted = nullptr) {
  const lock_decision d = decide_lock(rows, session, r);
  if (granted) *granted = !d.conflict;
  const auto key_of = [](const lock_record& x) { return lock_key(x); };
  std::set<std::string> gone;
  for (const lock_record& e : d.erase) gone.insert(key_of(e));
  for (const lock_record& p : d.put) gone.insert(key_of(p));
  std::erase_if(rows, [&](const lock_record& x) { return gone.contains(key_of(x)); });
  rows.insert(rows.end(), d.put.begin(), d.put.end());
  std::sort(rows.begin(), rows.end(),
            [&](const lock_record& x, const lock_record& y) { return key_of(x) < key_of(y); });
  return rows;
}

// "owner:start-end:r|w" for each row, in key order.
std::string show(const std::vector<lock_record>& rows) {
  std::string out;
  for (const lock_record& r : rows) {
    if (!out.empty()) out += " ";
    out += std::to_string(r.owner) + ":" + std::to_string(r.start) + "-" +
           (r.end == k_lock_to_end ? std::string("eof") : std::to_string(r.end)) + ":" +
           (r.type == lock_type::write ? "w" : "r");
  }
  return out;
}

TEST(lock_rules, an_owners_posix_locks_split_merge_and_replace_as_the_kernels_do) {
  std::vector<lock_record> rows;
  rows = apply(rows, k_a, posix(1, 0, 99, lock_type::write));
  EXPECT_EQ(show(rows), "1:0-99:w");
  rows = apply(rows, k_a, posix(1, 40, 59, std::nullopt));  // unlock the middle: split
  EXPECT_EQ(show(rows), "1:0-39:w 1:60-99:w");
  rows = apply(rows, k_a, posix(1, 40, 59, lock_type::write));  // fill it again: one lock
  EXPECT_EQ(show(rows), "1:0-99:w");
  rows = apply(rows, k_a, posix(1, 100, 149, lock_type::write));  // adjacent, same type: merged
  EXPECT_EQ(show(rows), "1:0-149:w");
  rows = apply(rows, k_a, posix(1, 10, 19, lock_type::read));  // downgrade a part
  EXPECT_EQ(show(rows), "1:0-9:w 1:10-19:r 1:20-149:w");
  rows = apply(rows, k_a, posix(1, 0, k_lock_to_end, lock_type::read));  // all read, to EOF
  EXPECT_EQ(show(rows), "1:0-eof:r");
  rows = apply(rows, k_a, posix(1, 0, k_lock_to_end, std::nullopt));
  EXPECT_EQ(show(rows), "");
}

TEST(lock_rules,
     other_owners_conflict_on_overlap_with_a_writer_and_a_failed_upgrade_keeps_the_lock) {
  bool granted = false;
  std::vector<lock_record> rows;
  rows = apply(rows, k_a, posix(1, 0, 99, lock_type::read));
  rows =
      apply(rows, k_b, posix(1, 0, 9, lock_type::read), &granted);  // same owner id, other client
  EXPECT_TRUE(granted) << "two readers share";
  EXPECT_EQ(show(rows), "1:0-99:r 1:0-9:r");
  rows = apply(rows, k_a, posix(1, 0, 99, lock_type::write), &granted);
  EXPECT_FALSE(granted) << "an upgrade over another client's reader";
  EXPECT_EQ(show(rows), "1:0-99:r 1:0-9:r") << "the failed upgrade kept the read lock";
  rows = apply(rows, k_a, posix(1, 10, 99, lock_type::write), &granted);
  EXPECT_TRUE(granted) << "the part nobody else holds";
  rows = apply(rows, k_b, posix(2, 100, 199, lock_type::write), &granted);
  EXPECT_TRUE(granted) << "no overlap";
  rows = apply(rows, k_a, posix(2, 99, 100, lock_type::read), &granted);
  EXPECT_FALSE(granted) << "another owner of the same client conflicts too";
  const std::optional<lock_record> in_the_way =
      first_conflict(rows, k_b, posix(3, 50, 150, lock_type::read));
  ASSERT_TRUE(in_the_way);
  EXPECT_EQ(in_the_way->session_id, k_a);
  EXPECT_EQ(in_the_way->start, 10u);
  EXPECT_EQ(in_the_way->end, 99u);
  EXPECT_FALSE(first_conflict(rows, k_b, posix(3, 0, 9, lock_type::read)));
  // POSIX and flock locks do not see each other.
  EXPECT_FALSE(first_conflict(rows, k_b, flock_of(9, lock_type::write)));
}

TEST(lock_rules, a_flock_conversion_drops_the_old_lock_first_as_on_linux) {
  bool granted = false;
  std::vector<lock_record> rows;
  rows = apply(rows, k_a, flock_of(1, lock_type::read));
  rows = apply(rows, k_b, flock_of(2, lock_type::read), &granted);
  EXPECT_TRUE(granted);
  rows = apply(rows, k_a, flock_of(1, lock_type::read), &granted);
  EXPECT_TRUE(granted) << "the same lock again";
  EXPECT_EQ(show(rows), "1:0-eof:r 2:0-eof:r");
  rows = apply(rows, k_a, flock_of(1, lock_type::write), &granted);
  EXPECT_FALSE(granted);
  EXPECT_EQ(show(rows), "2:0-eof:r") << "the failed upgrade lost the shared lock";
  rows = apply(rows, k_b, flock_of(2, lock_type::write), &granted);
  EXPECT_TRUE(granted) << "so the other holder's upgrade goes through";
  EXPECT_EQ(show(rows), "2:0-eof:w");
  rows = apply(rows, k_b, flock_of(2, std::nullopt), &granted);
  EXPECT_TRUE(granted);
  EXPECT_EQ(show(rows), "");
}

TEST(lock_rules, a_file_keeps_a_bounded_number_of_locks) {
  std::vector<lock_record> rows;
  for (std::uint64_t i = 0; i < k_max_locks_per_file; ++i) {
    lock_record r = decide_lock({}, k_a, posix(1, 2 * i, 2 * i, lock_type::read)).put.at(0);
    rows.push_back(r);
  }
  EXPECT_TRUE(decide_lock(rows, k_a, posix(1, 0, 0, lock_type::read)).put.empty())
      << "a lock held again changes nothing";
  EXPECT_EQ(test::error_of([&] {
              (void)decide_lock(
                  rows, k_a,
                  posix(1, 2 * k_max_locks_per_file, 2 * k_max_locks_per_file, lock_type::read));
            }),
            ENOLCK);
  // Merging frees room: one lock over all of them.
  EXPECT_EQ(show(apply(rows, k_a, posix(1, 0, k_lock_to_end, lock_type::read))), "1:0-eof:r");
}

TEST(lock_rows, a_lock_row_reads_back_and_a_damaged_one_is_refused) {
  lock_record r;
  r.ino = 77;
  r.kind = lock_kind::flock;
  r.session_id = std::string(k_a);
  r.owner = 0x1234;
  r.start = 0;
  r.end = k_lock_to_end;
  r.type = lock_type::write;
  r.pid = 4321;
  EXPECT_EQ(decode_lock(lock_key(r), encode_lock(r)), r);
  EXPECT_TRUE(lock_key(r).starts_with(lock_inode_prefix(77)));
  std::string bad = encode_lock(r);
  bad[1] = 3;  // no such type
  EXPECT_EQ(test::error_of([&] { (void)decode_lock(lock_key(r), bad); }), EIO);
  lock_record backwards = r;
  backwards.kind = lock_kind::posix;
  backwards.start = 10;
  backwards.end = 5;
  EXPECT_EQ(test::error_of([&] { (void)decode_lock(lock_key(backwards), encode_lock(backwards)); }),
            EIO);
}

class two_clients_test : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = rocksdb_engine::open(dir_.path() / "db", {.create = true});
    a_ = member("a");
    b_ = member("b");
    a_->begin("/mnt/a");
    b_->begin("/mnt/b");
  }
  std::unique_ptr<volume_membership> member(const std::string& client) {
    std::filesystem::create_directories(dir_.path() / client);
    return std::make_unique<volume_membership>(*engine_, dir_.path() / client,
                                               volume_role::writer_beside_others, true, false);
  }
  std::size_t lock_rows() {
    std::size_t n = 0;
    engine_->scan(table::meta, prefix_range(k_lock_prefix), {}, "locks",
                  [&](std::string_view, std::string_view) {
                    ++n;
                    return true;
                  });
    return n;
  }

  test::temp_dir dir_;
  std::unique_ptr<rocksdb_engine> engine_;
  std::unique_ptr<volume_membership> a_, b_;
};

TEST_F(two_clients_test, a_lock_excludes_the_other_client_until_its_owner_closes) {
  ASSERT_TRUE(a_->locks().set(posix(1, 0, 99, lock_type::write, 111)));
  EXPECT_FALSE(b_->locks().set(posix(1, 50, 59, lock_type::read)));
  const std::optional<lock_record> seen_by_b = b_->locks().test(posix(7, 0, 0, lock_type::read));
  ASSERT_TRUE(seen_by_b);
  EXPECT_EQ(seen_by_b->end, 99u);
  EXPECT_EQ(seen_by_b->pid, 0u) << "another machine's pid means nothing here";
  const std::optional<lock_record> seen_by_a = a_->locks().test(posix(7, 0, 0, lock_type::read));
  ASSERT_TRUE(seen_by_a);
  EXPECT_EQ(seen_by_a->pid, 111u);
  EXPECT_TRUE(b_->locks().set(posix(1, 100, 199, lock_type::write)));
  EXPECT_FALSE(a_->locks().release(5, lock_kind::posix, 2)) << "an owner without locks: no look";
  EXPECT_TRUE(a_->locks().release(5, lock_kind::posix, 1));
  EXPECT_TRUE(b_->locks().set(posix(1, 50, 59, lock_type::read)));
  EXPECT_EQ(lock_rows(), 2u);
}

TEST_F(two_clients_test,
       an_ended_sessions_locks_go_and_a_session_gone_from_the_volume_gets_enolck) {
  ASSERT_TRUE(a_->locks().set(flock_of(1, lock_type::write)));
  EXPECT_FALSE(b_->locks().set(flock_of(2, lock_type::read)));
  a_->end();
  EXPECT_EQ(lock_rows(), 0u) << "the end of a session takes its locks";
  EXPECT_TRUE(b_->locks().set(flock_of(2, lock_type::read)));
  // A lock row whose session row is gone (a crash between two writes):
  // erased by the next request on the file, and not in the way.
  {
    lock_record stale;
    stale.ino = 5;
    stale.kind = lock_kind::flock;
    stale.session_id = "00000000000000ff";
    stale.owner = 3;
    stale.type = lock_type::write;
    const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
    batch->put(table::meta, lock_key(stale), encode_lock(stale));
    engine_->write(*batch, false);
  }
  EXPECT_TRUE(b_->locks().set(flock_of(2, lock_type::write)));
  EXPECT_EQ(lock_rows(), 1u);
  // This client's own session row gone (the others took it for dead):
  // refused, not granted anew.
  {
    const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
    batch->erase(table::meta, session_key(b_->session_id()));
    engine_->write(*batch, false);
  }
  EXPECT_EQ(test::error_of([&] { (void)b_->locks().set(flock_of(2, lock_type::read)); }), ENOLCK);
  // Letting go still works: a lock nobody can use must not stay.
  EXPECT_TRUE(b_->locks().set(flock_of(2, std::nullopt)));
  EXPECT_EQ(lock_rows(), 0u);
  // Told by its heartbeat that its row was erased: refused even once the
  // row is back.
  b_->locks().mark_session_lost();
  EXPECT_EQ(test::error_of([&] { (void)b_->locks().set(flock_of(2, lock_type::read)); }), ENOLCK);
}

}  // namespace
}  // namespace densefs::store
