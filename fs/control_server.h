// The daemon's control socket: STORE/control.sock, a unix stream socket
// through which the mount owner asks the running daemon for things a file
// system call cannot express (`densefs cat --encoding=br` on a live mount).
// The daemon holds the store's exclusive lock, so this is the only way to
// reach the store while it is mounted. Protocol and permission model:
// docs/export.md.
//
// Protocol (version 1), per connection, one request:
//   client -> one JSON object on one line: {"op":"cat",...}
//   daemon -> header line: {"ok":true,...} or {"ok":false,"error":"...","errno":N}
//             (after an error header the connection closes);
//             then body records until an end line:
//               "N\n" + N bytes      a data frame (N decimal, at most k_max_frame)
//               {...}\n without "ok"  a message: progress for the client to show,
//                                    or a record that says what the next data
//                                    frames hold ("chunks")
//               {"ok":true,...}\n     the end: success (fields: a summary)
//               {"ok":false,"error":"...","errno":N}\n   the end: failure
// A connection that closes before an end line is a failure.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace densefs::store {
class store;
}

namespace densefs::fs {

inline constexpr const char* k_control_socket_name = "control.sock";
// Data frames are at most this big (the client refuses larger ones).
inline constexpr std::size_t k_max_frame = 1u << 20;
// A request line is at most this long.
inline constexpr std::size_t k_max_request = 64u << 10;

// An error with the errno a handler or the client reports.
class control_error : public std::runtime_error {
 public:
  control_error(int error_number, const std::string& what)
      : std::runtime_error(what), errno_(error_number) {}
  int error_number() const { return errno_; }

 private:
  int errno_;
};

// What a handler writes its answer to. Everything it sends goes out in
// protocol order: the header is sent (as {"ok":true}) before the first data
// or message if the handler did not send one itself. Writes throw
// control_error when the client went away or the server is stopping: let it
// propagate.
class control_response {
 public:
  explicit control_response(int fd) : fd_(fd) {}

  // The header line: {"ok":true} plus `fields` (an object). At most once.
  void header(const nlohmann::json& fields = nlohmann::json::object());
  // Bytes of the answer, sent as data frames.
  void data(std::string_view bytes);
  // A progress message (a JSON object without "ok").
  void message(const nlohmann::json& fields);
  // Fields for the success end line (merged; sent by the server).
  void summary(const nlohmann::json& fields);
  // Whether the client went away or the server is stopping (it shuts the
  // connection down): a handler that works long between writes asks now
  // and then, and ends early.
  bool cancelled() const;

 private:
  friend class control_server;
  void send(std::string_view bytes);
  int fd_;
  bool header_sent_ = false;
  nlohmann::json summary_ = nlohmann::json::object();
};

// A handler gets the parsed request (an object with "op") and answers on
// `response`. It runs on a control thread, never on a FUSE thread; it may
// take long (the client waits), but must use only thread-safe store calls.
// Errors: throw control_error (or store::store_error, which carries an
// errno); any other exception is reported as EIO.
using control_handler =
    std::function<void(const nlohmann::json& request, control_response& response)>;

class control_server {
 public:
  // At most `max_clients` requests run at once; more are answered with
  // EBUSY. A client must send its request within `request_timeout_ms`.
  explicit control_server(std::filesystem::path store_dir, unsigned max_clients = 4,
                          int request_timeout_ms = 10000);
  ~control_server();  // stop()
  control_server(const control_server&) = delete;
  control_server& operator=(const control_server&) = delete;

  // Adds the handler for requests {"op": op, ...}. Call before start().
  void register_handler(const std::string& op, control_handler handler);

  // Replaces a stale socket, binds STORE/control.sock with mode 0600,
  // listens, and starts the accepting thread. Call after daemonizing
  // (threads do not survive the fork). Throws control_error.
  void start();
  // Stops accepting, interrupts running requests (their clients see a
  // failure), waits for the threads and removes the socket. Idempotent.
  void stop();

  const std::filesystem::path& socket_path() const { return socket_path_; }

 private:
  struct impl;
  std::filesystem::path socket_path_;
  std::unique_ptr<impl> impl_;
};

// The requests every densefs daemon answers (docs/export.md):
//   "cat": {"op":"cat","ino":N,"encoding":"br"|"identity"} -> header
//          {"ok":true,"size":N,"encoding":E}, the bytes, end line with
//          "bytes", "pieces", "reused_pieces", "encoded_pieces".
//   "chunks": {"op":"chunks","ino":N,"reuse":"keep"|CODEC} -> header
//          {"ok":true,"size":N}; per piece of store::walk_file a message
//          {"piece":"hole"|"plain"|"stored","offset":N,"length":N,"bytes":N
//          [,"codec":C,"hash":H]} then "bytes" bytes of data frames; end line
//          with "pieces", "stored_pieces" (control_handlers.cpp).
//   drop_caches: {"op":"drop_caches"} -> empties the daemon's decoded-chunk
//          and block caches; a header only.
// `s` must outlive the server (stop() before closing the store).
void register_store_handlers(control_server& server, const store::store& s);

// The client side: one request per connection.
class control_client {
 public:
  // Connects to STORE/control.sock. Throws control_error with the errno:
  // ENOENT / ECONNREFUSED (no daemon serving this store), EACCES (not the
  // mount owner).
  explicit control_client(const std::filesystem::path& store_dir);
  ~control_client();
  control_client(const control_client&) = delete;
  control_client& operator=(const control_client&) = delete;

  // Sends `request` and reads the header: returns its fields, or throws
  // control_error with the daemon's error and errno.
  nlohmann::json request(const nlohmann::json& request);
  // Reads the body to its end line: data frames go to on_data, messages to
  // on_message. Returns the end line's fields on success; throws
  // control_error on a failure end or a connection lost before the end.
  nlohmann::json read_body(const std::function<void(std::string_view)>& on_data,
                           const std::function<void(const nlohmann::json&)>& on_message = {});

 private:
  std::string read_line();
  void read_exact(char* out, std::size_t n);
  int fd_ = -1;
  std::string buffer_;  // bytes received and not yet consumed
  std::size_t start_ = 0;
};

}  // namespace densefs::fs
