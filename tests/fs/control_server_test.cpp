// The control socket protocol (fs/control_server.h) without a mount: a
// server with test handlers in a temporary directory and the client.
#include "fs/control_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "tests/temp_dir.h"

namespace densefs::fs {
namespace {

using nlohmann::json;
using test::temp_dir;

std::string collect(control_client& c, json* end = nullptr, std::vector<json>* messages = nullptr) {
  std::string data;
  const json e = c.read_body([&](std::string_view b) { data.append(b); },
                             [&](const json& m) {
                               if (messages) messages->push_back(m);
                             });
  if (end) *end = e;
  return data;
}

class control : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<control_server>(tmp_.path(), 2, 2000);
    server_->register_handler("echo", [](const json& request, control_response& response) {
      response.header({{"size", request.value("text", std::string()).size()}});
      response.message({{"progress", 0.5}, {"ok", "dropped: ok would end the answer"}});
      response.data(request.value("text", std::string()));
      response.summary({{"echoed", true}});
    });
    server_->register_handler("big", [](const json& request, control_response& response) {
      const std::string data(3 * k_max_frame + 17, 'b');
      response.data(data);
    });
    server_->register_handler("fail_early", [](const json&, control_response&) {
      throw control_error(ENOENT, "no such thing");
    });
    server_->register_handler("fail_late", [](const json&, control_response& response) {
      response.data("partial");
      throw std::runtime_error("broke in the middle");
    });
    server_->register_handler("slow", [this](const json&, control_response& response) {
      response.header();
      ++slow_running_;
      while (!release_) {
        response.message({{"waiting", true}});  // fails once stop() shuts us down
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    server_->start();
  }

  temp_dir tmp_;
  std::unique_ptr<control_server> server_;
  std::atomic<int> slow_running_{0};
  std::atomic<bool> release_{false};
};

TEST_F(control, socket_is_owner_only_and_removed_by_stop) {
  struct stat st {};
  ASSERT_EQ(::lstat((tmp_ / k_control_socket_name).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  server_->stop();
  EXPECT_FALSE(std::filesystem::exists(tmp_ / k_control_socket_name));
  try {
    control_client c(tmp_.path());
    FAIL() << "connected to a stopped server";
  } catch (const control_error& e) {
    EXPECT_EQ(e.error_number(), ENOENT) << e.what();
  }
}

TEST_F(control, header_data_messages_and_summary) {
  control_client c(tmp_.path());
  const json header = c.request({{"op", "echo"}, {"text", "hello"}});
  EXPECT_EQ(header["ok"], true);
  EXPECT_EQ(header["size"], 5);
  json end;
  std::vector<json> messages;
  EXPECT_EQ(collect(c, &end, &messages), "hello");
  EXPECT_EQ(end["ok"], true);
  EXPECT_EQ(end["echoed"], true);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0]["progress"], 0.5);
}

TEST_F(control, data_larger_than_a_frame_arrives_whole) {
  control_client c(tmp_.path());
  c.request({{"op", "big"}});
  EXPECT_EQ(collect(c), std::string(3 * k_max_frame + 17, 'b'));
}

TEST_F(control, errors_before_and_after_the_header) {
  {
    control_client c(tmp_.path());
    try {
      c.request({{"op", "fail_early"}});
      FAIL() << "no error";
    } catch (const control_error& e) {
      EXPECT_EQ(e.error_number(), ENOENT);
      EXPECT_STREQ(e.what(), "no such thing");
    }
  }
  {
    control_client c(tmp_.path());
    c.request({{"op", "fail_late"}});
    std::string data;
    try {
      c.read_body([&](std::string_view b) { data.append(b); });
      FAIL() << "no error";
    } catch (const control_error& e) {
      EXPECT_EQ(e.error_number(), EIO);
      EXPECT_STREQ(e.what(), "broke in the middle");
    }
    EXPECT_EQ(data, "partial");
  }
  for (const json& bad : {json{{"op", "nope"}}, json{{"no_op", 1}}, json::array({1, 2})}) {
    control_client c(tmp_.path());
    EXPECT_THROW(c.request(bad), control_error) << bad.dump();
  }
}

TEST_F(control, stop_interrupts_running_requests_and_extra_clients_are_refused) {
  control_client a(tmp_.path());
  a.request({{"op", "slow"}});
  control_client b(tmp_.path());
  b.request({{"op", "slow"}});
  while (slow_running_ < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // max_clients is 2: a third is told the daemon is busy.
  {
    control_client c(tmp_.path());
    try {
      c.request({{"op", "echo"}});
      FAIL() << "a third client was served";
    } catch (const control_error& e) {
      EXPECT_EQ(e.error_number(), EBUSY);
    }
  }
  server_->stop();  // must return although the handlers never finish
  EXPECT_THROW(collect(a), control_error);
  EXPECT_THROW(collect(b), control_error);
}

TEST_F(control, a_client_that_never_asks_times_out) {
  // Occupies a slot without sending anything; the server gives up after
  // its request timeout (2 s here) and the slot is free again.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string p = (tmp_ / k_control_socket_name).string();
  std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  char buf[256];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, n).find(std::to_string(ETIMEDOUT)), std::string::npos);
}

TEST_F(control, the_connection_closes_after_the_answer) {
  // A client that reads to the end of the stream (socat, a script) gets it
  // right after the end line, not when some later client connects. Found
  // by tests/fuzz/control_request_fuzz.cpp, which reads answers that way.
  for (const std::string request : {"{\"op\":\"nope\"}\n", "{\"op\":\"echo\"}\n"}) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string p = (tmp_ / k_control_socket_name).string();
    std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    const timeval five_seconds{5, 0};
    ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof five_seconds), 0);
    std::string answer;
    char buf[256];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) answer.append(buf, n);
    const int recv_errno = errno;
    ::close(fd);
    EXPECT_EQ(n, 0) << request << ": no end of stream, recv: " << std::strerror(recv_errno);
    EXPECT_FALSE(answer.empty()) << request;
    EXPECT_EQ(answer.back(), '\n') << request;
  }
}

}  // namespace
}  // namespace densefs::fs

namespace densefs::fs {
namespace {

TEST(control_long_path, a_store_path_longer_than_sun_path_works) {
  // sun_path holds 108 bytes; longer store paths go through
  // /proc/self/fd/N/control.sock on both sides.
  test::temp_dir tmp;
  const std::filesystem::path dir = tmp / (std::string(100, 'd') + "/" + std::string(100, 'e'));
  std::filesystem::create_directories(dir);
  control_server server(dir);
  server.register_handler(
      "ping", [](const nlohmann::json&, control_response& response) { response.data("pong"); });
  server.start();
  EXPECT_TRUE(std::filesystem::exists(dir / k_control_socket_name));
  control_client c(dir);
  c.request({{"op", "ping"}});
  EXPECT_EQ(collect(c), "pong");
  server.stop();
  EXPECT_FALSE(std::filesystem::exists(dir / k_control_socket_name));
}

}  // namespace
}  // namespace densefs::fs
