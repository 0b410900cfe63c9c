// The threads that run the changes handed off the io_uring rings' threads
// (filesystem::hands_off): a pool for each ring's thread, made at its
// first hand-off, its threads bound to the CPUs that ring's thread is
// bound to (libfuse binds queue i's thread to CPU i, and the kernel queues
// a request on the ring of the CPU it was made on).
//
// Why bound: a hand-off wakes a helper while the ring's thread goes back
// to waiting for the kernel, so the core the request came from is about to
// be free. Unbound, the scheduler wakes the helper on an idle core instead,
// and on a virtual machine an idle vCPU is halted: waking it goes through
// the host, tens of microseconds, and the helper's reply wakes the ring's
// thread the same way (docs/scale-out.md, "Changes answered on the ring").
// A pool per ring, not per CPU: where libfuse could not bind its threads
// (a container's CPU set), two rings may run on one CPU, and each still
// has as many helpers as entries, so that a change never queues behind
// another that waits for the network.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "fs/worker_pool.h"

namespace densefs::fs {

class ring_helpers {
 public:
  // `threads_per_ring`: the ring's entries (one request each at most).
  explicit ring_helpers(unsigned threads_per_ring);
  ring_helpers(const ring_helpers&) = delete;
  ring_helpers& operator=(const ring_helpers&) = delete;

  // Runs `job` on a helper of the calling ring thread's pool; where its
  // threads cannot be started, here.
  void submit(std::function<void()> job);

 private:
  worker_pool* pool_of_this_thread();

  const std::uint64_t id_;
  const unsigned threads_per_ring_;
  std::mutex mutex_;                                 // pools_
  std::vector<std::unique_ptr<worker_pool>> pools_;  // destroyed (joined) with this
};

}  // namespace densefs::fs
