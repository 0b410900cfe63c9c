// -o metrics=ADDR:PORT: the mount's metrics for Prometheus, over HTTP
// (docs/metrics.md). `GET /metrics` answers the text of `render` (the
// Prometheus text format); anything else a short 404 or 405.
//
// The address is bound in the mount command, before the daemon forks, so
// a port already taken is a one-line error and no mount; the thread that
// answers starts after the fork (threads do not survive it). One request
// per connection, one connection at a time: a scraper asks every few
// seconds, and a client that sends nothing is dropped after a bound, so it
// cannot hold the server. Nothing here takes a lock of the file system:
// `render` and `refresh` take what they read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace densefs::fs {

class metrics_server {
 public:
  // Binds and listens on `address`: HOST:PORT, [IPV6]:PORT, or :PORT (every
  // address). Throws std::runtime_error naming the address and what to do.
  explicit metrics_server(const std::string& address);
  ~metrics_server();
  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  // The port bound (PORT 0 in the option: the kernel's choice).
  std::uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }

  // Starts answering from a thread of its own, with `render`'s text; and
  // from a second thread calls `refresh` now, then again after the time
  // each call returns: what is too slow to take at each scrape (a walk of
  // the store's records) is taken there, and `render` serves it as of then.
  void serve(std::function<std::string()> render, std::function<std::chrono::seconds()> refresh);
  // Stops both threads (waits for a request being answered and a refresh
  // under way) and closes the socket. Idempotent.
  void stop();

 private:
  void run();
  void answer(int connection);
  void run_refresh(const std::function<std::chrono::seconds()>& refresh);

  std::string address_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: written once by stop()
  std::uint16_t port_ = 0;
  std::function<std::string()> render_;
  std::thread thread_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // under stop_mutex_
  std::thread refresher_;
};

}  // namespace densefs::fs
