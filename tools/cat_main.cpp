// densefs cat [--encoding br|identity] [--store STORE] [-o OUT] PATH: a file's
// bytes, or one Brotli stream of them made from its stored Broccoli chunks
// without recompressing them (what a web server sends with
// Content-Encoding: br). docs/export.md.
//
// A live mount is asked through the daemon's control socket (the daemon
// holds the store's lock); --store reads an unmounted store directly.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <system_error>

#include "fs/control_server.h"
#include "fs/mount.h"
#include "store/export.h"
#include "store/store.h"
#include "tools/cli.h"

namespace densefs::tools {
namespace {

int cat_offline(const std::string& store_dir, const std::string& path,
                store::export_encoding encoding, output_file& out) {
  const offline_file f = open_offline_file(store_dir, path);
  store::export_file(*f.store, f.ino, encoding, [&](std::string_view bytes) { out.write(bytes); });
  out.commit();
  return k_exit_ok;
}

int cat_live(const std::string& path, store::export_encoding encoding, output_file& out) {
  // Opening the file is the permission check: the kernel decides whether
  // the caller may read it.
  fd_guard file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) throw std::system_error(errno, std::generic_category(), path);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw std::system_error(errno, std::generic_category(), path);
  if (S_ISDIR(st.st_mode)) throw std::system_error(EISDIR, std::generic_category(), path);
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + " is not a regular file");
  const auto info = read_xattr(file.fd, path, fs::k_xattr_info);
  if (!info) throw std::runtime_error(path + " is not on a densefs mount (try --store STORE)");

  if (encoding == store::export_encoding::identity) {
    // Plain bytes need no daemon: read the file like any reader.
    std::string buf(1u << 20, '\0');
    for (;;) {
      const ssize_t got = ::read(file.fd, buf.data(), buf.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw std::system_error(errno, std::generic_category(), path);
      if (got == 0) break;
      out.write(std::string_view(buf).substr(0, static_cast<std::size_t>(got)));
    }
    out.commit();
    return k_exit_ok;
  }

  // Data still staged in the daemon reaches the store first: the export
  // reads committed chunks.
  if (::fsync(file.fd) != 0)
    throw std::system_error(errno, std::generic_category(), path + ": fsync");
  const std::string store_dir = mount_store_dir(*info, path);

  std::unique_ptr<fs::control_client> client;
  try {
    client = std::make_unique<fs::control_client>(store_dir);
  } catch (const fs::control_error& e) {
    if (e.error_number() == EACCES)
      throw std::runtime_error(std::string(e.what()) +
                               " (--encoding=br on a live mount is for the mount owner; "
                               "--encoding=identity works for every reader)");
    if (e.error_number() == ENOENT || e.error_number() == ECONNREFUSED)
      throw std::runtime_error(std::string(e.what()) + " (the daemon serving " + path +
                               " has no control socket)");
    throw;
  }
  client->request(
      {{"op", "cat"}, {"ino", static_cast<std::uint64_t>(st.st_ino)}, {"encoding", "br"}});
  client->read_body([&](std::string_view bytes) { out.write(bytes); });
  out.commit();
  return k_exit_ok;
}

}  // namespace

int cat_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Write a file's bytes, or (--encoding=br) one Brotli stream made of its stored "
      "Broccoli chunks.",
      "densefs cat"};
  std::string path, encoding_name = "identity", store_dir, out_path = "-";
  app.add_option("PATH", path,
                 "a file on a densefs mount, or with --store a path inside the store "
                 "(/dir/file)")
      ->required();
  app.add_option("--encoding", encoding_name, "identity (plain bytes, default) or br (Brotli)");
  app.add_option("--store", store_dir, "read an unmounted store directory");
  app.add_option("-o,--output", out_path, "write here instead of standard output");
  if (auto done = parse_cli(app, args, io)) return *done;

  const auto encoding = store::export_encoding_from_name(encoding_name);
  if (!encoding) {
    print_error(io, "cat", "--encoding must be br or identity, not '" + encoding_name + "'");
    return k_exit_usage;
  }
  try {
    output_file out(out_path, io);
    if (!store_dir.empty()) return cat_offline(store_dir, path, *encoding, out);
    return cat_live(path, *encoding, out);
  } catch (const std::system_error& e) {
    print_error(io, "cat", e.what());
  } catch (const fs::control_error& e) {
    print_error(io, "cat", path + ": " + e.what());
  } catch (const store::store_error& e) {
    print_error(io, "cat", e.what());
  } catch (const codec::codec_error& e) {
    print_error(io, "cat", e.what());
  } catch (const std::runtime_error& e) {
    print_error(io, "cat", e.what());
  }
  return k_exit_failure;
}

}  // namespace densefs::tools
