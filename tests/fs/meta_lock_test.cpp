// fs/meta_lock.h: readers pass a committer's window, writers wait until
// the committer has the lock back and lets go of it.
#include "fs/meta_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace densefs::fs {
namespace {

using namespace std::chrono_literals;

// Whether `f` finished within a while (a thread blocked on the lock does not).
template <typename T>
bool finishes(std::future<T>& f) {
  return f.wait_for(2s) == std::future_status::ready;
}
template <typename T>
bool still_waits(std::future<T>& f) {
  return f.wait_for(100ms) == std::future_status::timeout;
}

TEST(meta_lock, a_reader_passes_a_window_and_a_writer_waits_for_the_committer) {
  meta_lock l;
  std::atomic<int> order{0};
  std::promise<void> window_open;
  std::promise<void> close_window;
  int writer_saw = -1;
  std::thread commit([&] {
    // The committer's thread holds the lock as a writer, as the group
    // commit's thread does.
    std::unique_lock mine(l);
    {
      const meta_lock::window w(l);
      window_open.set_value();
      close_window.get_future().wait();
    }
    order = 1;  // "applied", with the lock back
    std::this_thread::sleep_for(50ms);
    order = 2;
  });
  window_open.get_future().wait();

  auto reader = std::async(std::launch::async, [&] {
    std::lock_guard r(l.reading());
    return l.window_open();
  });
  ASSERT_TRUE(finishes(reader)) << "a reader waited for the window";
  EXPECT_TRUE(reader.get());
  EXPECT_FALSE(l.try_lock()) << "try_lock took the lock during a window";

  auto writer = std::async(std::launch::async, [&] {
    std::lock_guard w(l);
    writer_saw = order.load();
  });
  EXPECT_TRUE(still_waits(writer)) << "a writer went in during a window";
  close_window.set_value();
  ASSERT_TRUE(finishes(writer));
  commit.join();
  EXPECT_EQ(writer_saw, 2) << "a writer went in before the committer let go";
  EXPECT_TRUE(l.try_lock());
  EXPECT_FALSE(l.window_open());
  l.unlock();
}

TEST(meta_lock, an_exception_in_the_window_gives_the_lock_back_to_the_committer) {
  meta_lock l;
  std::unique_lock mine(l);
  try {
    const meta_lock::window w(l);
    throw std::runtime_error("the store call failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(l.window_open());
  // Held again by this thread: another cannot take it, as reader or writer.
  auto other = std::async(std::launch::async, [&] { std::lock_guard r(l.reading()); });
  EXPECT_TRUE(still_waits(other));
  mine.unlock();
  EXPECT_TRUE(finishes(other));
}

}  // namespace
}  // namespace densefs::fs
