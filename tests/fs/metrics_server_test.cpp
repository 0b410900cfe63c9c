// -o metrics= without a mount (fs/metrics_server.h, fs/prometheus_text.h):
// the text format's escaping and numbers, and the HTTP server's answers,
// refusals, bounds and stop. A real Prometheus scrapes a real mount in
// tests/mount/metrics_test.sh.
#include "fs/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "fs/prometheus_text.h"

namespace densefs::fs {
namespace {

// Connects to 127.0.0.1:port; -1 on failure.
int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads the whole answer (the server closes).
std::string exchange(std::uint16_t port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    answer.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return answer;
}

TEST(prometheus_text, families_samples_and_escaping) {
  prometheus_text t;
  t.family("densefs_x_total", "counter", "Help with a \\ and a\nnewline");
  t.sample("densefs_x_total", std::uint64_t{18446744073709551615u}, {{"kind", "a\"b\\c\nd"}});
  t.sample("densefs_x_total", 0.25, {{"a", "1"}, {"b", "2"}});
  t.sample("densefs_x_total", std::uint64_t{7});
  EXPECT_EQ(t.text(),
            "# HELP densefs_x_total Help with a \\\\ and a\\nnewline\n"
            "# TYPE densefs_x_total counter\n"
            "densefs_x_total{kind=\"a\\\"b\\\\c\\nd\"} 18446744073709551615\n"
            "densefs_x_total{a=\"1\",b=\"2\"} 0.25\n"
            "densefs_x_total 7\n");
  EXPECT_EQ(prometheus_text::bound(0.00005), "5e-05");
  EXPECT_EQ(prometheus_text::bound(10), "10");
}

TEST(metrics_server, bad_addresses_are_refused_with_the_fix) {
  for (const char* address : {"9567", "127.0.0.1:", "127.0.0.1:port", "127.0.0.1:70000"}) {
    try {
      metrics_server s(address);
      ADD_FAILURE() << address << " was taken";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("-o metrics="), std::string::npos) << e.what();
    }
  }
  metrics_server first("127.0.0.1:0");
  ASSERT_NE(first.port(), 0);
  try {
    metrics_server second("127.0.0.1:" + std::to_string(first.port()));
    ADD_FAILURE() << "a port in use was bound twice";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("pick another PORT"), std::string::npos) << e.what();
  }
}

TEST(metrics_server, answers_get_metrics_and_refuses_the_rest) {
  metrics_server s("127.0.0.1:0");
  std::atomic<int> refreshed{0};
  s.serve([] { return std::string("densefs_up 1\n"); },
          [&] {
            ++refreshed;
            return std::chrono::seconds(3600);
          });
  const std::uint16_t port = s.port();
  std::string a = exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(a.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << a;
  EXPECT_NE(a.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << a;
  EXPECT_NE(a.find("Content-Length: 13\r\n"), std::string::npos) << a;
  EXPECT_EQ(a.substr(a.size() - 13), "densefs_up 1\n");
  a = exchange(port, "GET /metrics?name[]=x HTTP/1.1\r\n\r\n");
  EXPECT_EQ(a.rfind("HTTP/1.1 200 OK", 0), 0u) << a;
  a = exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(a.rfind("HTTP/1.1 200 OK", 0), 0u) << a;
  EXPECT_EQ(a.find("densefs_up"), std::string::npos) << "HEAD got a body: " << a;
  EXPECT_EQ(exchange(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(exchange(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(exchange(port, "nonsense\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  // A client that sends nothing is dropped, and the next one answered.
  const int silent = connect_to(port);
  ASSERT_GE(silent, 0);
  EXPECT_EQ(exchange(port, "GET /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  ::close(silent);
  EXPECT_EQ(refreshed.load(), 1) << "refresh runs at once, then every interval";
  s.stop();
  const int after = connect_to(port);
  EXPECT_LT(after, 0) << "the port still takes connections after stop";
  if (after >= 0) ::close(after);
}

TEST(metrics_server, every_address_takes_ipv4_and_a_bare_lf_request) {
  metrics_server s(":0");
  s.serve([] { return std::string("ok 1\n"); }, [] { return std::chrono::seconds(3600); });
  EXPECT_EQ(exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(exchange(s.port(), "GET /metrics HTTP/1.0\n\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(metrics_server, a_trickling_client_is_dropped_at_the_bound) {
  metrics_server s("127.0.0.1:0");
  s.serve([] { return std::string("ok 1\n"); }, [] { return std::chrono::seconds(3600); });
  // One byte every 300 ms, never a whole head: each read is quick, the
  // whole request is not.
  std::atomic<bool> done{false};
  std::thread trickler([&] {
    const int fd = connect_to(s.port());
    for (int i = 0; i < 30 && !done; ++i) {
      ::send(fd, "G", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    ::close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  const std::string a = exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n");
  const auto waited = std::chrono::steady_clock::now() - start;
  done = true;
  trickler.join();
  EXPECT_EQ(a.rfind("HTTP/1.1 200", 0), 0u) << a;
  EXPECT_LT(waited, std::chrono::seconds(4)) << "the trickling client held the server";
}

TEST(metrics_server, stop_returns_while_a_client_does_not_read_its_answer) {
  metrics_server s("127.0.0.1:0");
  const std::string big(16u << 20, 'x');
  s.serve([&] { return big; }, [] { return std::chrono::seconds(3600); });
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(s.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string request = "GET /metrics HTTP/1.1\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the server is sending now
  const auto start = std::chrono::steady_clock::now();
  s.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2))
      << "stop waited for a client that does not read";
  ::close(fd);
}

TEST(metrics_server, a_failing_render_is_a_500_and_the_server_goes_on) {
  metrics_server s("127.0.0.1:0");
  std::atomic<bool> fail{true};
  s.serve(
      [&]() -> std::string {
        if (fail) throw std::runtime_error("the store is gone");
        return "ok 1\n";
      },
      [] { return std::chrono::seconds(3600); });
  const std::string a = exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(a.rfind("HTTP/1.1 500", 0), 0u) << a;
  EXPECT_NE(a.find("the store is gone"), std::string::npos) << a;
  fail = false;
  EXPECT_EQ(exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

}  // namespace
}  // namespace densefs::fs
