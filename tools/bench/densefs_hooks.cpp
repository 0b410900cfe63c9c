// The harness inside the densefs CLI: the project's classifier names the
// kinds of file, and a densefs target reports its stored bytes.
#include <sys/xattr.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "codec/classify.h"
#include "codec/codec.h"
#include "fs/control_server.h"
#include "fs/mount.h"
#include "tools/bench/bench.h"
#include "tools/cli.h"
#include "tools/tool_main.h"

namespace densefs::tools::bench {

std::string file_kind(const std::string& path) {
  std::string head(codec::k_classify_head_bytes, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  const auto slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return std::string(codec::file_type_name(codec::classify(head, name)));
}

std::optional<std::int64_t> densefs_stored_bytes(const std::string& dir) {
  std::string value(64 * 1024, '\0');
  const ssize_t n = ::getxattr(dir.c_str(), fs::k_xattr_stats, value.data(), value.size());
  if (n < 0) return std::nullopt;  // not a densefs mount
  value.resize(static_cast<std::size_t>(n));
  const auto j = nlohmann::json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("stored_bytes")) return std::nullopt;
  return j["stored_bytes"].get<std::int64_t>();
}

std::string settle(const std::string& dir) {
  if (!densefs_stored_bytes(dir)) return "";
  std::ostringstream out;
  std::ostringstream err;
  const auto why = [&] {
    std::string text = err.str();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  };
  // `densefs recompress PATH` on a mount queues what is not yet in its
  // policy's codec and waits until the daemon has re-encoded it.
  if (recompress_main({dir}, {out, err, false}) != k_exit_ok) return why();
  // Re-encoding replaced payloads: the daemon's collector would start on
  // them within seconds and rewrite the live ones while the next rows run
  // (measured: read-small warm 1p 8.4x ext4 against 2.2x at 2p). A
  // collection now, waited for, leaves nothing for it.
  try {
    const std::optional<std::string> info = read_xattr(dir, fs::k_xattr_info);
    if (!info) return "";
    if (gc_main({mount_store_dir(*info, dir), "--json"}, {out, err, false}) != k_exit_ok)
      return why();
  } catch (const std::exception& e) {
    return std::string("gc: ") + e.what();
  }
  return "";
}

std::string drop_fs_caches(const std::string& dir) {
  try {
    const std::optional<std::string> info = read_xattr(dir, fs::k_xattr_info);
    if (!info) return "";  // not a densefs mount
    fs::control_client client(mount_store_dir(*info, dir));
    client.request({{"op", "drop_caches"}});
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::optional<measure> lepton_library_decode(const std::vector<std::string>& files, int n) {
  std::vector<std::string> plains;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    // The size densefs puts in one chunk: a JPEG is one chunk up to 4 MiB.
    if (in && s.str().size() <= (4u << 20)) plains.push_back(std::move(s).str());
  }
  // Encoding (with its verifying decode) is slow: one thread per core.
  // A JPEG Lepton refuses is stored by densefs with a fast codec: here it
  // costs nothing, so the rate is the best a reader of all the files could
  // get from the library.
  std::vector<std::optional<std::string>> lepton(plains.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> accepted{0};
  std::vector<std::thread> threads;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < cores; ++t) {
    threads.emplace_back([&] {
      codec::codec_options o;
      o.preferred = codec::codec_id::lepton;
      for (std::size_t i; (i = next++) < plains.size();) {
        codec::encoded_chunk e = codec::encode_chunk(plains[i], o);
        if (e.codec == codec::codec_id::lepton) {
          lepton[i] = std::move(e.bytes);
          ++accepted;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (accepted == 0) return std::nullopt;
  return run_processes(n, [&](int index) {
    worker_counts c;
    for (std::size_t i = static_cast<std::size_t>(index); i < plains.size();
         i += static_cast<std::size_t>(n)) {
      if (lepton[i]) {
        const std::string plain =
            codec::decode_chunk(codec::codec_id::lepton, *lepton[i], plains[i].size());
        if (plain != plains[i]) throw std::runtime_error("Lepton decoded different bytes");
      }
      c.bytes += plains[i].size();
      ++c.entries;
    }
    return c;
  });
}

}  // namespace densefs::tools::bench
