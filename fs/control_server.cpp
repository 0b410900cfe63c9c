// The control socket server and client (protocol: control_server.h).
#include "fs/control_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "store/error.h"
#include "store/log.h"

namespace densefs::fs {
namespace {

using nlohmann::json;
using store::errno_text;

// One JSON line. Error messages may carry file names that are not UTF-8:
// replace what JSON cannot hold instead of throwing.
std::string json_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
}

std::string error_line(int error_number, const std::string& message) {
  return json_line({{"ok", false}, {"error", message}, {"errno", error_number}});
}

// The socket's address. sun_path holds 108 bytes; a longer store path is
// reached through the directory's descriptor (/proc/self/fd/N/control.sock),
// which the kernel resolves like the path itself (permission checks too).
sockaddr_un socket_address(const std::filesystem::path& dir, int dir_fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = (dir / k_control_socket_name).string();
  if (path.size() >= sizeof addr.sun_path) {
    path = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + k_control_socket_name;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

void set_timeout(int fd, int option, int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

void send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw control_error(errno, std::string("control client went away: ") + errno_text(errno));
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

// ---------------------------------------------------------------- response

void control_response::send(std::string_view bytes) {
  send_all(fd_, bytes);
}

void control_response::header(const json& fields) {
  if (header_sent_) throw std::logic_error("control response header sent twice");
  json h = fields.is_object() ? fields : json::object();
  h["ok"] = true;
  header_sent_ = true;
  send(json_line(h));
}

void control_response::data(std::string_view bytes) {
  if (!header_sent_) header();
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), k_max_frame);
    send(std::to_string(n) + '\n');
    send(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
}

bool control_response::cancelled() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void control_response::message(const json& fields) {
  if (!header_sent_) header();
  json m = fields.is_object() ? fields : json::object();
  m.erase("ok");  // "ok" would end the answer
  send(json_line(m));
}

void control_response::summary(const json& fields) {
  if (fields.is_object()) summary_.update(fields);
}

// ------------------------------------------------------------------ server

struct control_server::impl {
  std::filesystem::path dir;
  unsigned max_clients;
  int request_timeout_ms;
  std::map<std::string, control_handler, std::less<>> handlers;
  int dir_fd = -1;
  int listen_fd = -1;
  int wake[2] = {-1, -1};  // stop() writes here to wake the accepting thread
  std::thread acceptor;

  struct client {
    std::thread thread;
    int fd;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mutex;  // guards clients and stopping
  std::list<client> clients;
  bool stopping = false;
  bool started = false;

  void accept_loop();
  void serve(int fd);
  void reap(bool all);
  void close_fds();
};

control_server::control_server(std::filesystem::path store_dir, unsigned max_clients,
                               int request_timeout_ms)
    : socket_path_(store_dir / k_control_socket_name), impl_(std::make_unique<impl>()) {
  impl_->dir = std::move(store_dir);
  impl_->max_clients = std::max(1u, max_clients);
  impl_->request_timeout_ms = request_timeout_ms;
}

control_server::~control_server() {
  stop();
}

void control_server::register_handler(const std::string& op, control_handler handler) {
  impl_->handlers[op] = std::move(handler);
}

void control_server::start() {
  impl& m = *impl_;
  if (m.started) return;
  auto fail = [&](const std::string& what) {
    const int e = errno;
    m.close_fds();
    throw control_error(
        e, "control socket " + socket_path_.string() + ": " + what + ": " + errno_text(e));
  };
  m.dir_fd = ::open(m.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (m.dir_fd < 0) fail("cannot open the store directory");
  // We hold the store's lock: a socket left here is a dead daemon's.
  if (::unlinkat(m.dir_fd, k_control_socket_name, 0) != 0 && errno != ENOENT)
    fail("cannot remove the stale socket");
  if (::pipe2(m.wake, O_CLOEXEC) != 0) fail("pipe");
  m.listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (m.listen_fd < 0) fail("socket");
  const sockaddr_un addr = socket_address(m.dir, m.dir_fd);
  if (::bind(m.listen_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) fail("bind");
  // Owner only. Nobody can connect before listen(), and the store directory
  // is 0700 besides; the peer's uid is checked on every connection too.
  if (::fchmodat(m.dir_fd, k_control_socket_name, 0600, 0) != 0) fail("chmod");
  if (::listen(m.listen_fd, 16) != 0) fail("listen");
  m.stopping = false;
  m.acceptor = std::thread([&m] { m.accept_loop(); });
  m.started = true;
  log_debug("control socket " + socket_path_.string() + " ready");
}

void control_server::stop() {
  impl& m = *impl_;
  if (!m.started) return;
  {
    std::lock_guard lock(m.mutex);
    m.stopping = true;
    // Running requests fail at their next read or write.
    for (auto& c : m.clients) ::shutdown(c.fd, SHUT_RDWR);
  }
  const char byte = 0;
  (void)!::write(m.wake[1], &byte, 1);
  if (m.acceptor.joinable()) m.acceptor.join();
  m.reap(true);
  ::unlinkat(m.dir_fd, k_control_socket_name, 0);
  m.close_fds();
  m.started = false;
}

void control_server::impl::close_fds() {
  for (int* fd : {&listen_fd, &wake[0], &wake[1], &dir_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void control_server::impl::reap(bool all) {
  std::list<client> finished;
  {
    std::lock_guard lock(mutex);
    for (auto it = clients.begin(); it != clients.end();) {
      if (all || it->done->load()) {
        finished.splice(finished.end(), clients, it++);
      } else {
        ++it;
      }
    }
  }
  // The fd is closed only after its thread ended, so stop() never shuts
  // down a descriptor number that was reused.
  for (auto& c : finished) {
    if (c.thread.joinable()) c.thread.join();
    ::close(c.fd);
  }
}

void control_server::impl::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log_error("control socket: poll: " + errno_text(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      log_error("control socket: accept: " + errno_text(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // EMFILE: do not spin
      continue;
    }
    reap(false);
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != ::geteuid() && cred.uid != 0)) {
      try {
        send_all(fd, error_line(EACCES, "only the mount owner may use the control socket"));
      } catch (const control_error&) {
      }
      ::close(fd);
      continue;
    }
    std::lock_guard lock(mutex);
    if (stopping) {
      ::close(fd);
      return;
    }
    if (clients.size() >= max_clients) {
      try {
        send_all(fd, error_line(EBUSY, "the daemon is busy with " + std::to_string(clients.size()) +
                                           " control requests; try again"));
      } catch (const control_error&) {
      }
      ::close(fd);
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    clients.push_back({std::thread([this, fd, done] {
                         serve(fd);
                         // The answer is complete: the client sees the end
                         // of the stream now, not when the next connection
                         // reaps this one (the fd stays ours until then).
                         ::shutdown(fd, SHUT_RDWR);
                         done->store(true);
                       }),
                       fd, done});
  }
}

void control_server::impl::serve(int fd) {
  control_response response(fd);
  std::string op = "?";
  auto fail = [&](int error_number, const std::string& message) {
    log_warning("control request '" + op + "' failed: " + message);
    try {
      // Before the header the error is the header; after it, the end line.
      // Both have the same shape.
      response.send(error_line(error_number, message));
    } catch (const control_error&) {
    }
  };
  try {
    set_timeout(fd, SO_RCVTIMEO, request_timeout_ms);
    std::string line;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        throw control_error(ETIMEDOUT, "no request received in time");
      if (n < 0) throw control_error(errno, "reading the request: " + errno_text(errno));
      if (n == 0) return;  // the client left without asking
      line.append(buf, static_cast<std::size_t>(n));
      const auto newline = line.find('\n');
      if (newline != std::string::npos) {
        line.resize(newline);
        break;
      }
      if (line.size() > k_max_request) throw control_error(E2BIG, "request line too long");
    }
    const json request = json::parse(line, nullptr, false);
    if (!request.is_object() || !request.contains("op") || !request["op"].is_string())
      throw control_error(EINVAL, "a request is one JSON object with a string \"op\"");
    op = request["op"].get<std::string>();
    const auto it = handlers.find(op);
    if (it == handlers.end()) throw control_error(EOPNOTSUPP, "unknown request '" + op + "'");
    it->second(request, response);
    if (!response.header_sent_) response.header();
    json end = response.summary_;
    end["ok"] = true;
    response.send(json_line(end));
  } catch (const control_error& e) {
    fail(e.error_number(), e.what());
  } catch (const store::store_error& e) {
    fail(e.error_number(), e.what());
  } catch (const std::exception& e) {
    fail(EIO, e.what());
  }
}

// ------------------------------------------------------------------ client

control_client::control_client(const std::filesystem::path& store_dir) {
  const std::string where = (store_dir / k_control_socket_name).string();
  const int dir_fd = ::open(store_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) throw control_error(errno, where + ": " + errno_text(errno));
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    const int e = errno;
    ::close(dir_fd);
    throw control_error(e, "socket: " + errno_text(e));
  }
  const sockaddr_un addr = socket_address(store_dir, dir_fd);
  int rc;
  do {
    rc = ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  const int e = errno;
  ::close(dir_fd);
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
    throw control_error(e, where + ": " + errno_text(e));
  }
}

control_client::~control_client() {
  if (fd_ >= 0) ::close(fd_);
}

void control_client::read_exact(char* out, std::size_t n) {
  const std::size_t have = std::min(n, buffer_.size() - start_);
  std::memcpy(out, buffer_.data() + start_, have);
  start_ += have;
  std::size_t done = have;
  while (done < n) {
    const ssize_t got = ::recv(fd_, out + done, n - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw control_error(errno, "reading from the daemon: " + errno_text(errno));
    if (got == 0)
      throw control_error(ECONNRESET,
                          "the daemon closed the connection in the middle of the answer");
    done += static_cast<std::size_t>(got);
  }
}

std::string control_client::read_line() {
  for (;;) {
    const auto newline = buffer_.find('\n', start_);
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(start_, newline - start_);
      start_ = newline + 1;
      return line;
    }
    if (buffer_.size() - start_ > k_max_request)
      throw control_error(EPROTO, "the daemon sent an over-long line");
    buffer_.erase(0, start_);
    start_ = 0;
    char buf[65536];
    const ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw control_error(errno, "reading from the daemon: " + errno_text(errno));
    if (got == 0)
      throw control_error(ECONNRESET,
                          "the daemon closed the connection before the end of the answer");
    buffer_.append(buf, static_cast<std::size_t>(got));
  }
}

namespace {

json parse_line(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (!j.is_object()) throw control_error(EPROTO, "the daemon sent a malformed line");
  return j;
}

[[noreturn]] void throw_reported(const json& j) {
  int error_number = EIO;
  if (j.contains("errno") && j["errno"].is_number_integer()) error_number = j["errno"].get<int>();
  std::string message = "the daemon reported an error";
  if (j.contains("error") && j["error"].is_string()) message = j["error"].get<std::string>();
  throw control_error(error_number, message);
}

}  // namespace

json control_client::request(const json& request) {
  std::optional<control_error> send_failed;
  try {
    send_all(fd_, json_line(request));
  } catch (const control_error& e) {
    // A daemon that refuses the connection (busy, not the owner) answers
    // and closes without reading: its answer is the better error.
    send_failed = e;
  }
  std::string line;
  try {
    line = read_line();
  } catch (const control_error&) {
    if (send_failed) throw *send_failed;
    throw;
  }
  json header = parse_line(line);
  if (!header.contains("ok") || !header["ok"].is_boolean())
    throw control_error(EPROTO, "the daemon's answer has no \"ok\"");
  if (!header["ok"].get<bool>()) throw_reported(header);
  return header;
}

json control_client::read_body(const std::function<void(std::string_view)>& on_data,
                               const std::function<void(const json&)>& on_message) {
  std::string frame;
  for (;;) {
    const std::string line = read_line();
    if (!line.empty() && line.front() == '{') {
      json j = parse_line(line);
      if (j.contains("ok")) {
        if (j["ok"] == true) return j;
        throw_reported(j);
      }
      if (on_message) on_message(j);
      continue;
    }
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), n);
    if (line.empty() || ec != std::errc{} || end != line.data() + line.size() || n > k_max_frame)
      throw control_error(EPROTO, "the daemon sent a malformed data frame");
    frame.resize(n);
    read_exact(frame.data(), n);
    if (on_data) on_data(frame);
  }
}

}  // namespace densefs::fs
