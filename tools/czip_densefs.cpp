// czip pack from densefs (czip_densefs.h): the pieces of store::walk_file,
// read from the store directly or streamed by the daemon ("chunks" control
// request), turned into czip chunks one at a time.
#include "tools/czip_densefs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "fs/control_server.h"
#include "store/export.h"
#include "store/store.h"
#include "tools/cli.h"

namespace densefs::tools {
namespace {

namespace czip = codec::czip;

class piece_packer {
 public:
  explicit piece_packer(czip::writer& out) : out_(out) {}

  void add(const store::file_piece& p) {
    if (p.offset != summary_.size)
      throw std::runtime_error("piece at " + std::to_string(p.offset) +
                               " does not follow the one " + "that ended at " +
                               std::to_string(summary_.size));
    switch (p.what) {
      case store::file_piece::kind::hole:
        zeros(p.length);
        break;
      case store::file_piece::kind::plain:
        if (p.bytes.size() != p.length || p.length > czip::k_max_chunk_size)
          throw std::runtime_error("extent at " + std::to_string(p.offset) + ": " +
                                   std::to_string(p.bytes.size()) + " bytes for " +
                                   std::to_string(p.length));
        if (p.bytes.empty()) break;
        out_.write_chunk(p.bytes);
        ++summary_.encoded_chunks;
        break;
      case store::file_piece::kind::stored: {
        // Decoded for the hash of the whole original, and checked against
        // the chunk's name (its content hash), which becomes the entry's
        // plain_hash: a decoder that disagrees with the one that stored the
        // chunk (another lepton_jpeg version) must fail the pack, not
        // produce a czip that fails later.
        const std::string plain =
            codec::decode_chunk(p.codec, p.bytes, static_cast<std::size_t>(p.length));
        czip::sha256_digest name;
        std::memcpy(name.data(), p.hash.bytes.data(), name.size());
        if (czip::sha256_of(plain) != name)
          throw std::runtime_error("chunk " + p.hash.hex() + " at " + std::to_string(p.offset) +
                                   " does not decode to its content (SHA-256 mismatch)");
        out_.write_chunk(plain, name, p.codec, p.bytes);
        ++summary_.reused_chunks;
        break;
      }
    }
    summary_.size = p.offset + p.length;
  }

  densefs_pack_summary summary() const { return summary_; }

 private:
  // A hole becomes chunks of zeros of at most 4 MiB, encoded normally: the
  // writer stores one payload for all the full-size ones.
  void zeros(std::uint64_t n) {
    while (n > 0) {
      const std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(n, czip::k_max_chunk_size));
      if (zero_.size() < take) zero_.assign(czip::k_max_chunk_size, '\0');
      out_.write_chunk(std::string_view(zero_).substr(0, take));
      ++summary_.encoded_chunks;
      n -= take;
    }
  }

  czip::writer& out_;
  std::string zero_;
  densefs_pack_summary summary_;
};

std::function<bool(codec::codec_id)> reuse_fn(const densefs_reuse& reuse) {
  return [reuse](codec::codec_id c) { return reuse.accepts(c); };
}

store::file_piece::kind piece_kind(const std::string& name) {
  if (name == "hole") return store::file_piece::kind::hole;
  if (name == "plain") return store::file_piece::kind::plain;
  if (name == "stored") return store::file_piece::kind::stored;
  throw std::runtime_error("daemon sent an unknown piece kind '" + name + "'");
}

}  // namespace

densefs_pack_summary pack_from_store(const std::string& store_dir, const std::string& path,
                                     const densefs_reuse& reuse, codec::czip::writer& out) {
  const offline_file f = open_offline_file(store_dir, path);
  piece_packer packer(out);
  store::walk_file(*f.store, f.ino, reuse_fn(reuse), [&](store::file_piece& p) { packer.add(p); });
  return packer.summary();
}

densefs_pack_summary pack_from_mount(const std::string& path, const std::string& info,
                                     const densefs_reuse& reuse, codec::czip::writer& out) {
  // Opening the file is the permission check, as for `cat --encoding=br`.
  fd_guard file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) throw std::system_error(errno, std::generic_category(), path);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw std::system_error(errno, std::generic_category(), path);
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + " is not a regular file");
  // Data still staged in the daemon reaches the store first.
  if (::fsync(file.fd) != 0)
    throw std::system_error(errno, std::generic_category(), path + ": fsync");

  fs::control_client client(mount_store_dir(info, path));
  client.request({{"op", "chunks"},
                  {"ino", static_cast<std::uint64_t>(st.st_ino)},
                  {"reuse", reuse.codec ? codec::codec_name(*reuse.codec) : "keep"}});
  piece_packer packer(out);
  // One piece at a time: its record (a message), then exactly its bytes.
  std::optional<store::file_piece> piece;
  std::uint64_t expected = 0;
  const auto finish_piece = [&] {
    packer.add(*piece);
    piece.reset();
  };
  client.read_body(
      [&](std::string_view bytes) {
        if (!piece || piece->bytes.size() + bytes.size() > expected)
          throw std::runtime_error("daemon sent data outside a piece");
        piece->bytes.append(bytes);
        if (piece->bytes.size() == expected) finish_piece();
      },
      [&](const nlohmann::json& m) {
        if (piece) throw std::runtime_error("daemon sent a piece record inside a piece");
        store::file_piece p;
        p.what = piece_kind(m.at("piece").get<std::string>());
        p.offset = m.at("offset").get<std::uint64_t>();
        p.length = m.at("length").get<std::uint64_t>();
        expected = m.at("bytes").get<std::uint64_t>();
        if (expected > czip::k_max_chunk_size + (std::size_t{1} << 20))
          throw std::runtime_error("daemon announced a piece of " + std::to_string(expected) +
                                   " bytes");
        if (p.what == store::file_piece::kind::stored) {
          const auto c = codec::codec_from_name(m.at("codec").get<std::string>());
          const auto h = store::chunk_hash::from_hex(m.at("hash").get<std::string>());
          if (!c || !h) throw std::runtime_error("daemon sent a bad stored piece record");
          p.codec = *c;
          p.hash = *h;
        }
        p.bytes.reserve(static_cast<std::size_t>(expected));
        piece = std::move(p);
        if (expected == 0) finish_piece();
      });
  if (piece) throw std::runtime_error("daemon ended the answer inside a piece");
  if (packer.summary().size != static_cast<std::uint64_t>(st.st_size))
    throw std::runtime_error(path + ": the daemon's pieces cover " +
                             std::to_string(packer.summary().size) + " bytes, the file has " +
                             std::to_string(st.st_size));
  return packer.summary();
}

}  // namespace densefs::tools
