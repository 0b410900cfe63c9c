#include "fs/ring_helpers.h"

#include <sched.h>

#include <utility>

namespace densefs::fs {

ring_helpers::ring_helpers(unsigned cpus, unsigned threads_per_cpu) {
  if (cpus == 0) cpus = 1;
  pools_.reserve(cpus);
  for (unsigned cpu = 0; cpu < cpus; ++cpu)
    pools_.push_back(std::make_unique<worker_pool>(threads_per_cpu, static_cast<int>(cpu)));
}

void ring_helpers::submit(std::function<void()> job) {
  const int cpu = sched_getcpu();
  // -1 where the kernel cannot say: any pool serves.
  const std::size_t pool = cpu < 0 ? 0 : static_cast<std::size_t>(cpu) % pools_.size();
  pools_[pool]->submit(std::move(job));
}

}  // namespace densefs::fs
