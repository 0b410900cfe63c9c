// The write-behind machinery without a mount: the worker pool's queue and
// the committer's queue, and how a waiter does queued work on its own
// thread (fs/worker_pool.h run_one_queued, fs/write_back.h commit_queued).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fs/inode_table.h"
#include "fs/worker_pool.h"
#include "fs/write_back.h"

namespace densefs::fs {
namespace {

// Holds the pool's only worker inside a job until released, so that jobs
// submitted meanwhile stay queued.
class blocker {
 public:
  void hold(worker_pool& pool) {
    pool.submit([this] {
      std::unique_lock lock(mutex_);
      started_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    });
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return started_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool started_ = false;
  bool released_ = false;
};

TEST(worker_pool, a_waiter_runs_the_last_queued_job_of_its_owner_on_its_own_thread) {
  auto pool = std::make_unique<worker_pool>(1);
  blocker busy;
  busy.hold(*pool);
  const int a = 0;
  const int b = 0;
  std::mutex mutex;
  std::vector<std::pair<int, std::thread::id>> ran;
  const auto job = [&](int tag) {
    return [&, tag] {
      std::lock_guard lock(mutex);
      ran.emplace_back(tag, std::this_thread::get_id());
    };
  };
  pool->submit(job(1), &a);
  pool->submit(job(2), &b);
  pool->submit(job(3), &a);

  EXPECT_TRUE(pool->run_one_queued(&a));
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(ran.size(), 1u);
    EXPECT_EQ(ran[0].first, 3) << "the owner's last job, the one the workers reach last";
    EXPECT_EQ(ran[0].second, std::this_thread::get_id());
  }
  const int nobody = 0;
  EXPECT_FALSE(pool->run_one_queued(&nobody));
  EXPECT_FALSE(pool->run_one_queued(nullptr)) << "untagged jobs are the pool's only";

  busy.release();
  // The pool's destructor runs what is queued: jobs 1 and 2, once each.
  pool.reset();
  std::lock_guard lock(mutex);
  ASSERT_EQ(ran.size(), 3u);
  EXPECT_EQ(ran[1].first, 1);
  EXPECT_EQ(ran[2].first, 2);
}

std::shared_ptr<node> file(std::uint64_t ino) {
  store::inode_record r;
  r.ino = ino;
  r.mode = S_IFREG | 0644;
  return std::make_shared<node>(r);
}

encoded_slot version_of(const std::shared_ptr<node>& n, std::uint64_t gen) {
  encoded_slot e;
  e.n = n;
  e.gen = gen;
  e.data = std::make_shared<const std::string>(100, 'x');
  return e;
}

TEST(write_back, a_waiter_commits_the_group_holding_its_file_on_its_own_thread) {
  std::mutex mutex;
  std::vector<std::pair<std::vector<std::uint64_t>, std::thread::id>> groups;
  {
    // An interval no test waits for: only commit_queued or the destructor
    // commit here.
    write_back wb(std::chrono::hours(1), [&](std::vector<encoded_slot>& group) {
      std::vector<std::uint64_t> inos;
      for (const encoded_slot& e : group) inos.push_back(e.n->ino);
      std::lock_guard lock(mutex);
      groups.emplace_back(inos, std::this_thread::get_id());
    });
    const auto x = file(10);
    const auto y = file(11);
    const auto z = file(12);
    wb.add(version_of(x, 1));
    wb.add(version_of(y, 1));

    EXPECT_FALSE(wb.commit_queued(z.get())) << "nothing of z is queued";
    {
      std::lock_guard lock(mutex);
      EXPECT_TRUE(groups.empty());
    }
    EXPECT_TRUE(wb.commit_queued(y.get()));
    {
      std::lock_guard lock(mutex);
      ASSERT_EQ(groups.size(), 1u);
      EXPECT_EQ(groups[0].first, (std::vector<std::uint64_t>{10, 11}))
          << "the group at the front, in queue order, x's version with it";
      EXPECT_EQ(groups[0].second, std::this_thread::get_id());
    }
    EXPECT_FALSE(wb.commit_queued(y.get())) << "committed: no longer queued";

    // A full group's worth of other files ahead: it wakes the committer too,
    // so either thread may commit it; the waiter commits groups from the
    // front until its own is done, and each call that committed says so.
    std::vector<std::shared_ptr<node>> others;
    for (std::size_t i = 0; i < write_back::k_group_files; ++i) {
      others.push_back(file(100 + i));
      wb.add(version_of(others.back(), 1));
    }
    wb.add(version_of(z, 1));
    EXPECT_TRUE(wb.commit_queued(z.get())) << "z was queued: this call commits a group";
    for (int calls = 0; wb.commit_queued(z.get()); ++calls) ASSERT_LT(calls, 3);
  }
  // All of it committed once, in queue order, in groups no bigger than
  // k_group_files, z last.
  std::vector<std::uint64_t> expected;
  for (std::size_t i = 0; i < write_back::k_group_files; ++i) expected.push_back(100 + i);
  expected.push_back(12);
  std::vector<std::uint64_t> committed;
  for (std::size_t g = 1; g < groups.size(); ++g) {
    EXPECT_LE(groups[g].first.size(), write_back::k_group_files);
    committed.insert(committed.end(), groups[g].first.begin(), groups[g].first.end());
  }
  EXPECT_EQ(committed, expected);
}

// The committer waits for a group to be due; when a waiter empties the
// queue meanwhile, unmount (the destructor) must still end it at once, not
// after the interval.
TEST(write_back, stops_at_once_after_a_waiter_emptied_the_queue) {
  const auto started = std::chrono::steady_clock::now();
  {
    write_back wb(std::chrono::hours(1), [](std::vector<encoded_slot>&) {});
    const auto x = file(10);
    wb.add(version_of(x, 1));
    // Long enough for the committer to be waiting for the interval.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(wb.commit_queued(x.get()));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::minutes(1));
}

// What the file system puts off until its next commit (the rows of new
// files that ended, fs/new_files.cpp) is settled once the interval has
// passed, with no file data queued; calls meanwhile make one settle; none
// runs after the destructor began (unmount settles everything itself).
TEST(write_back, settles_what_waits_for_a_commit_once_the_interval_has_passed) {
  std::mutex mutex;
  std::condition_variable settled_cv;
  int settled = 0;
  std::chrono::steady_clock::time_point asked, first_settle;
  {
    write_back wb(
        std::chrono::milliseconds(200), [](std::vector<encoded_slot>&) {},
        [&] {
          std::lock_guard lock(mutex);
          if (settled++ == 0) first_settle = std::chrono::steady_clock::now();
          settled_cv.notify_all();
        });
    asked = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) wb.settle_soon();
    {
      std::unique_lock lock(mutex);
      ASSERT_TRUE(settled_cv.wait_for(lock, std::chrono::seconds(30), [&] { return settled > 0; }))
          << "never settled";
    }
    EXPECT_GE(first_settle - asked, std::chrono::milliseconds(200));
    // Long enough for a second settle, had the calls above made more than one.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    {
      std::lock_guard lock(mutex);
      EXPECT_EQ(settled, 1);
    }
    wb.settle_soon();  // pending at the destructor: not run
  }
  std::lock_guard lock(mutex);
  EXPECT_EQ(settled, 1);
}

}  // namespace
}  // namespace densefs::fs
