#include "fs/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "store/log.h"

namespace densefs::fs {

namespace {

// A request's head is at most this long, and must arrive within this time.
constexpr std::size_t k_max_request_head = 8192;
constexpr int k_request_timeout_ms = 2000;

std::runtime_error bad_address(const std::string& address, const std::string& why) {
  return std::runtime_error("-o metrics=" + address + ": " + why);
}

// Sends all of `bytes`, or gives up (the scraper went away).
void send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void reply(int fd, std::string_view status, std::string_view type, std::string_view body,
           bool head_only) {
  std::string out = "HTTP/1.1 ";
  out += status;
  out += "\r\nContent-Type: ";
  out += type;
  out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += body;
  send_all(fd, out);
}

}  // namespace

metrics_server::metrics_server(const std::string& address) : address_(address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    throw bad_address(address, "give HOST:PORT, [IPV6]:PORT or :PORT (e.g. 127.0.0.1:9567)");
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      port.size() > 5 || std::stoul(port) > 65535)
    throw bad_address(address, "the port must be a number from 0 to 65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0)
    throw bad_address(address, std::string("cannot resolve the host: ") + ::gai_strerror(rc));
  std::string why = "no address";
  for (const addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0)
    throw bad_address(address, "cannot listen there: " + why +
                                   " (another program has the port? pick another PORT)");
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
    if (bound.ss_family == AF_INET)
      port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    else if (bound.ss_family == AF_INET6)
      port_ = ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    ::close(listen_fd_);
    throw bad_address(address, std::string("eventfd: ") + std::strerror(errno));
  }
}

metrics_server::~metrics_server() {
  stop();
}

void metrics_server::serve(std::function<std::string()> render, std::function<void()> refresh,
                           std::chrono::seconds interval) {
  render_ = std::move(render);
  refresher_ = std::thread(
      [this, refresh = std::move(refresh), interval] { run_refresh(refresh, interval); });
  thread_ = std::thread([this] { run(); });
}

void metrics_server::run_refresh(std::function<void()> refresh, std::chrono::seconds interval) {
  std::unique_lock lock(stop_mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      refresh();
    } catch (const std::exception& e) {
      log_error(std::string("metrics: the store's totals: ") + e.what());
    }
    lock.lock();
    stop_cv_.wait_for(lock, interval, [this] { return stopping_; });
  }
}

void metrics_server::stop() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (stop_fd_ >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (refresher_.joinable()) refresher_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
}

void metrics_server::run() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log_error(std::string("metrics server: poll: ") + std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int connection = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;  // the client gave up first, or out of fds for now
    try {
      answer(connection);
    } catch (const std::exception& e) {
      log_error(std::string("metrics server: ") + e.what());
    }
    ::close(connection);
  }
}

void metrics_server::answer(int connection) {
  // The request head, within the bounds: a slow or silent client is dropped.
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < k_max_request_head) {
    pollfd p{connection, POLLIN, 0};
    if (::poll(&p, 1, k_request_timeout_ms) <= 0) return;
    const ssize_t n = ::recv(connection, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    head.append(buf, static_cast<std::size_t>(n));
  }
  const std::string line = head.substr(0, head.find("\r\n"));
  const std::size_t first_space = line.find(' ');
  const std::size_t second_space = line.find(' ', first_space + 1);
  if (first_space == std::string::npos || second_space == std::string::npos) {
    reply(connection, "400 Bad Request", "text/plain", "bad request\n", false);
    return;
  }
  const std::string method = line.substr(0, first_space);
  std::string target = line.substr(first_space + 1, second_space - first_space - 1);
  target = target.substr(0, target.find('?'));  // Prometheus may add parameters
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    reply(connection, "405 Method Not Allowed", "text/plain", "GET /metrics\n", false);
    return;
  }
  if (target != "/metrics") {
    reply(connection, "404 Not Found", "text/plain", "densefs serves its metrics at /metrics\n",
          head_only);
    return;
  }
  std::string body;
  try {
    body = render_();
  } catch (const std::exception& e) {
    reply(connection, "500 Internal Server Error", "text/plain",
          std::string("densefs metrics: ") + e.what() + "\n", head_only);
    return;
  }
  reply(connection, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head_only);
}

}  // namespace densefs::fs
