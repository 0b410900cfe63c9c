// The ring helpers (fs/ring_helpers.h): the changes a ring's thread hands
// off run on a pool of that thread's own, bound to the CPUs it is bound to.
#include "fs/ring_helpers.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <future>
#include <optional>
#include <thread>
#include <vector>

namespace densefs::fs {
namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

struct ran_on {
  std::thread::id thread;
  std::vector<int> cpus;  // the helper's affinity
};

// From a thread standing for a ring's thread, bound to `cpu` (or not bound
// at all): where the job it hands off ran.
ran_on hand_off_from(ring_helpers& helpers, std::optional<int> cpu, std::thread::id* ring_id) {
  std::promise<ran_on> where;
  std::thread ring([&] {
    *ring_id = std::this_thread::get_id();
    if (cpu) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(*cpu, &set);
      ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof set, &set), 0);
    }
    helpers.submit([&] { where.set_value({std::this_thread::get_id(), allowed_cpus()}); });
  });
  ring.join();
  return where.get_future().get();
}

TEST(ring_helpers, a_rings_hand_offs_run_beside_it_on_its_own_cpus) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  ring_helpers helpers(2);
  std::thread::id ring;
  const ran_on first = hand_off_from(helpers, cpus.front(), &ring);
  EXPECT_NE(first.thread, ring) << "the job ran on the ring's thread";
  EXPECT_EQ(first.cpus, std::vector<int>{cpus.front()});
  if (cpus.size() > 1) {
    const ran_on second = hand_off_from(helpers, cpus.back(), &ring);
    EXPECT_EQ(second.cpus, std::vector<int>{cpus.back()});
    EXPECT_NE(second.thread, first.thread) << "two rings' changes share a helper";
  }
  // A ring's thread libfuse could not bind (a container's CPU set): its
  // helpers run wherever it may.
  const ran_on unbound = hand_off_from(helpers, std::nullopt, &ring);
  EXPECT_EQ(unbound.cpus, cpus);
}

}  // namespace
}  // namespace densefs::fs
