#include "fs/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "store/log.h"

namespace densefs::fs {

namespace {

// A request's head is at most this long and must arrive whole within the
// first bound; the answer must be taken within the second. A client that
// trickles or stops reading is dropped then: it cannot hold the server, or
// an unmount waiting for it.
constexpr std::size_t k_max_request_head = 8192;
constexpr auto k_request_time = std::chrono::seconds(2);
constexpr auto k_answer_time = std::chrono::seconds(10);

using deadline = std::chrono::steady_clock::time_point;

// Waits until `fd` is ready for `events`, the deadline passes (false) or
// `stop_fd` is written (false).
bool wait_for(int fd, short events, int stop_fd, deadline until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || fds[1].revents != 0) return false;
    return true;
  }
}

std::runtime_error bad_address(const std::string& address, const std::string& why) {
  return std::runtime_error("-o metrics=" + address + ": " + why);
}

// Sends all of `bytes` (the socket is non-blocking), or gives up: the
// scraper went away, stopped reading past the deadline, or the server stops.
void send_all(int fd, std::string_view bytes, int stop_fd, deadline until) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, stop_fd, until)) return;
      continue;
    }
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void reply(int fd, int stop_fd, std::string_view status, std::string_view type,
           std::string_view body, bool head_only) {
  std::string out = "HTTP/1.1 ";
  out += status;
  out += "\r\nContent-Type: ";
  out += type;
  out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += body;
  send_all(fd, out, stop_fd, std::chrono::steady_clock::now() + k_answer_time);
}

// Listens on `a`; -1 (and `why`) when it cannot. An IPv6 wildcard takes
// IPv4 too (every address of the machine).
int listen_on(const addrinfo& a, bool wildcard, std::string& why) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  const int yes = 1, no = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (wildcard && a.ai_family == AF_INET6)
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);
  if (::bind(fd, a.ai_addr, a.ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
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
  // Every address (:PORT): the IPv6 wildcard first, which takes IPv4 too;
  // the IPv4 one where the machine has no IPv6.
  const bool wildcard = host.empty();
  for (const int family : {AF_INET6, AF_INET, AF_UNSPEC}) {
    for (const addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next)
      if (!wildcard || family == AF_UNSPEC || a->ai_family == family)
        listen_fd_ = listen_on(*a, wildcard, why);
    if (listen_fd_ >= 0 || !wildcard) break;
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

void metrics_server::serve(std::function<std::string()> render,
                           std::function<std::chrono::seconds()> refresh) {
  render_ = std::move(render);
  refresher_ = std::thread([this, refresh = std::move(refresh)] { run_refresh(refresh); });
  thread_ = std::thread([this] { run(); });
}

void metrics_server::run_refresh(const std::function<std::chrono::seconds()>& refresh) {
  std::unique_lock lock(stop_mutex_);
  while (!stopping_) {
    lock.unlock();
    // After a failure, the next try a minute on.
    std::chrono::seconds next(60);
    try {
      next = refresh();
    } catch (const std::exception& e) {
      log_error(std::string("metrics: the store's totals: ") + e.what());
    }
    lock.lock();
    stop_cv_.wait_for(lock, next, [this] { return stopping_; });
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
    const int connection = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection < 0) {
      // Out of descriptors: the connection stays queued, so wait a moment
      // rather than spin on it. Otherwise the client gave up first.
      if (errno == EMFILE || errno == ENFILE) {
        pollfd stop{stop_fd_, POLLIN, 0};
        if (::poll(&stop, 1, 100) > 0) return;
      }
      continue;
    }
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
  const deadline request_until = std::chrono::steady_clock::now() + k_request_time;
  std::string head;
  char buf[1024];
  // The head ends at an empty line (CRLF, or LF from a hand-typed request).
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos &&
         head.size() < k_max_request_head) {
    if (!wait_for(connection, POLLIN, stop_fd_, request_until)) return;
    const ssize_t n = ::recv(connection, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    head.append(buf, static_cast<std::size_t>(n));
  }
  std::string line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::size_t first_space = line.find(' ');
  const std::size_t second_space = line.find(' ', first_space + 1);
  if (first_space == std::string::npos || second_space == std::string::npos) {
    reply(connection, stop_fd_, "400 Bad Request", "text/plain", "bad request\n", false);
    return;
  }
  const std::string method = line.substr(0, first_space);
  std::string target = line.substr(first_space + 1, second_space - first_space - 1);
  target = target.substr(0, target.find('?'));  // Prometheus may add parameters
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    reply(connection, stop_fd_, "405 Method Not Allowed", "text/plain", "GET /metrics\n", false);
    return;
  }
  if (target != "/metrics") {
    reply(connection, stop_fd_, "404 Not Found", "text/plain",
          "densefs serves its metrics at /metrics\n", head_only);
    return;
  }
  std::string body;
  try {
    body = render_();
  } catch (const std::exception& e) {
    reply(connection, stop_fd_, "500 Internal Server Error", "text/plain",
          std::string("densefs metrics: ") + e.what() + "\n", head_only);
    return;
  }
  reply(connection, stop_fd_, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
        head_only);
}

}  // namespace densefs::fs
