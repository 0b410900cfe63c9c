// The threads that run the changes handed off the io_uring rings' threads
// (filesystem::hands_off): one pool per CPU, its threads bound to that CPU
// as its ring's thread is (libfuse binds queue i's thread to CPU i, and
// the kernel queues a request on the ring of the CPU it was made on).
//
// Why bound: a hand-off wakes a helper while the ring's thread goes back
// to waiting for the kernel, so the core the request came from is about to
// be free. Unbound, the scheduler wakes the helper on an idle core instead,
// and on a virtual machine an idle vCPU is halted: waking it is an
// interrupt through the host, tens of microseconds, twice per hand-off
// (the helper's reply wakes the ring's thread the same way).
// docs/scale-out.md, "The hand-off".
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "fs/worker_pool.h"

namespace densefs::fs {

class ring_helpers {
 public:
  // `cpus` pools (one per ring) of `threads_per_cpu` threads each.
  ring_helpers(unsigned cpus, unsigned threads_per_cpu);
  ring_helpers(const ring_helpers&) = delete;
  ring_helpers& operator=(const ring_helpers&) = delete;

  // Runs `job` on a helper of the calling thread's CPU.
  void submit(std::function<void()> job);

 private:
  std::vector<std::unique_ptr<worker_pool>> pools_;
};

}  // namespace densefs::fs
