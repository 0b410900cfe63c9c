// The control socket's request parser (fs/control_server.cpp) and the store
// handlers' request fields (fs/control_handlers.cpp): the bytes a client
// sends. The request line is read inside the server's connection loop, so
// the harness drives a real server on a temporary store through its socket:
// it writes the input, closes its sending side and reads the whole answer.
// The store holds one small file (ino 2, zstd and broccoli chunks) so "cat"
// and "chunks" requests do real work.
//
// Properties: the server answers every request that has a newline within
// the size limit with a first line that is a JSON object with a boolean
// "ok", ends every answer, and never crashes.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "fs/control_server.h"
#include "store/store.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs;

namespace {

struct fixture {
  std::filesystem::path dir;
  std::unique_ptr<store::store> s;
  std::unique_ptr<fs::control_server> server;
  int lock_fd = -1;

  fixture() {
    std::string pattern = (std::filesystem::temp_directory_path() / "densefs-fuzz-XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    store::store::create(dir / "store");
    lock_fd = store::store::lock(dir / "store");
    s = store::store::open(dir / "store");
    add_file();
    // Requests run one at a time here; a short timeout bounds inputs that
    // never send a newline (the harness closes its side anyway).
    server = std::make_unique<fs::control_server>(dir / "store", 4, 2000);
    fs::register_store_handlers(*server, *s);
    server->start();
  }
  ~fixture() {
    server->stop();
    s.reset();
    ::close(lock_fd);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  void add_file() {
    std::string a, b;
    for (int i = 0; a.size() < 5000; ++i) a += "line " + std::to_string(i) + " of densefs text\n";
    b = a.substr(0, 3000);
    codec::codec_options zstd, broccoli;
    broccoli.preferred = codec::codec_id::broccoli;
    broccoli.broccoli_quality = 1;
    const store::prepared_chunk ca = s->prepare_chunk(a, zstd);
    const store::prepared_chunk cb = s->prepare_chunk(b, broccoli);
    store::inode_record r;
    r.ino = 2;
    r.mode = 0100644;
    r.nlink = 1;
    r.size = a.size() + 10000 + b.size();  // a hole between the chunks
    store::transaction txn;
    txn.put_inode(r);
    txn.put_dirent(store::k_root_ino, "f", {2, 0100000});
    txn.put_extent(2, 0, {ca.hash, 0, static_cast<std::uint32_t>(a.size())});
    txn.put_extent(2, a.size() + 10000, {cb.hash, 0, static_cast<std::uint32_t>(b.size())});
    txn.ref_chunk(ca);
    txn.ref_chunk(cb);
    s->commit(txn);
  }
};

std::string ask(const std::filesystem::path& socket, std::string_view request) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
  FUZZ_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server stopped reading (request too long): fine
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fixture* f = new fixture;  // lives until exit: the server's threads use it
  const std::string_view request(reinterpret_cast<const char*>(data), size);
  const std::string answer = ask(f->server->socket_path(), request);
  const std::size_t newline = request.find('\n');
  if (newline == std::string_view::npos || newline > fs::k_max_request) return 0;
  const std::size_t end = answer.find('\n');
  FUZZ_CHECK(end != std::string::npos);
  const nlohmann::json header = nlohmann::json::parse(answer.substr(0, end), nullptr, false);
  FUZZ_CHECK(header.is_object() && header.contains("ok") && header["ok"].is_boolean());
  // Every answer ends with an end line ({"ok":...}) after its header.
  FUZZ_CHECK(answer.back() == '\n');
  if (header["ok"] == false) FUZZ_CHECK(answer.size() == end + 1);
  return 0;
}
