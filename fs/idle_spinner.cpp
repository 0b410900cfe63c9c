#include "fs/idle_spinner.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace densefs::fs {
namespace {

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// SCHED_IDLE: the thread runs only on a core nothing else wants; nice 19
// where that is refused.
void make_idle_priority() noexcept {
  sched_param param{};
  if (::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &param) != 0)
    ::setpriority(PRIO_PROCESS, 0, 19);
}

}  // namespace

void idle_spinner::start(unsigned threads, std::chrono::microseconds window) {
  if (!threads_.empty() || threads == 0) return;
  window_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(window).count();
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  started_.store(true);
}

idle_spinner::~idle_spinner() {
  stopping_.store(true);
  sleeping_.store(false);
  sleeping_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void idle_spinner::run() {
  ::pthread_setname_np(::pthread_self(), "densefs-spin");
  make_idle_priority();
  while (!stopping_.load()) {
    // The time spun is counted every 100 us too: a steady stream of
    // requests keeps a spinner in this loop for as long as it lasts.
    std::int64_t counted = now_ns();
    std::int64_t now = counted;
    while (!stopping_.load(std::memory_order_relaxed) &&
           now - last_request_ns_.load(std::memory_order_relaxed) < window_ns_) {
      relax();
      now = now_ns();
      if (now - counted > 100'000) {
        spun_ns_.fetch_add(static_cast<std::uint64_t>(now - counted), std::memory_order_relaxed);
        counted = now;
      }
    }
    spun_ns_.fetch_add(static_cast<std::uint64_t>(now - counted), std::memory_order_relaxed);
    // Asleep until the next request. A request between the check above and
    // this store is seen below (note_request stores the time before it
    // reads sleeping_; both sequentially consistent).
    sleeping_.store(true);
    if (stopping_.load() || now_ns() - last_request_ns_.load() < window_ns_) {
      sleeping_.store(false);
      continue;
    }
    sleeping_.wait(true);
  }
}

}  // namespace densefs::fs
