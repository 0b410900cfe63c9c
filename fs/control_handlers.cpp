// The control requests every densefs daemon answers (control_server.h).
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <functional>

#include "fs/control_server.h"
#include "fs/recompressor.h"
#include "store/check/scrub.h"
#include "store/export.h"
#include "store/store.h"

namespace densefs::fs {

namespace {

// A br export is built in memory before it is sent (store/export.h); the
// daemon serves the mount, so one export must not take all its memory.
// Twice this is the peak (the pieces, then the joined stream).
constexpr std::uint64_t k_max_br_export = 512u << 20;

// {"op":"cat","ino":N,"encoding":"br"|"identity"}: the file's bytes, as
// store::export_file makes them. The client has fsync()ed the file, so
// what the store holds is what it wrote.
void cat(const store::store& s, const nlohmann::json& request, control_response& response) {
  if (!request.contains("ino") || !request["ino"].is_number_unsigned())
    throw control_error(EINVAL, "cat: \"ino\" must be an inode number");
  const auto ino = request["ino"].get<std::uint64_t>();
  std::string name = "identity";
  if (request.contains("encoding")) {
    if (!request["encoding"].is_string())
      throw control_error(EINVAL, "cat: \"encoding\" must be a string");
    name = request["encoding"].get<std::string>();
  }
  const auto encoding = store::export_encoding_from_name(name);
  if (!encoding) throw control_error(EINVAL, "cat: unknown encoding '" + name + "' (br, identity)");

  // Checked before the header so that these come back as the header's error.
  const auto record = s.get_inode(ino);
  if (!record) throw control_error(ENOENT, "cat: inode " + std::to_string(ino) + " does not exist");
  if (S_ISDIR(record->mode))
    throw control_error(EISDIR, "cat: inode " + std::to_string(ino) + " is a directory");
  if (!S_ISREG(record->mode))
    throw control_error(EINVAL, "cat: inode " + std::to_string(ino) + " is not a regular file");
  response.header({{"size", record->size}, {"encoding", name}});

  store::export_options options;
  options.max_br_bytes = k_max_br_export;
  const auto summary = store::export_file(
      s, ino, *encoding, [&](std::string_view bytes) { response.data(bytes); }, options);
  response.summary({{"bytes", summary.bytes_out},
                    {"pieces", summary.pieces},
                    {"reused_pieces", summary.reused_pieces},
                    {"encoded_pieces", summary.encoded_pieces}});
}

const char* piece_kind_name(store::file_piece::kind k) {
  switch (k) {
    case store::file_piece::kind::hole:
      return "hole";
    case store::file_piece::kind::plain:
      return "plain";
    case store::file_piece::kind::stored:
      return "stored";
  }
  return "?";
}

// {"op":"chunks","ino":N,"reuse":"keep"|"NAME"}: the file's pieces in order
// (store::walk_file), for `densefs czip pack` to reuse stored encodings. Per
// piece, a message {"piece":"hole"|"plain"|"stored","offset":N,"length":N,
// "bytes":N} (stored adds "codec" and "hash") followed by data frames
// holding exactly "bytes" bytes: the plain bytes (plain), the stored bytes
// of a whole chunk whose codec is NAME, or any codec for "keep" (stored),
// nothing for a hole. One chunk in memory at a time; the socket's back
// pressure paces the walk. The client has fsync()ed the file.
void chunks(const store::store& s, const nlohmann::json& request, control_response& response) {
  if (!request.contains("ino") || !request["ino"].is_number_unsigned())
    throw control_error(EINVAL, "chunks: \"ino\" must be an inode number");
  const auto ino = request["ino"].get<std::uint64_t>();
  if (!request.contains("reuse") || !request["reuse"].is_string())
    throw control_error(EINVAL, "chunks: \"reuse\" must be \"keep\" or a codec name");
  const auto reuse_name = request["reuse"].get<std::string>();
  std::function<bool(codec::codec_id)> reuse = [](codec::codec_id) { return true; };
  if (reuse_name != "keep") {
    const auto id = codec::codec_from_name(reuse_name);
    if (!id) throw control_error(EINVAL, "chunks: unknown codec '" + reuse_name + "'");
    reuse = [id = *id](codec::codec_id c) { return c == id; };
  }
  const auto record = s.get_inode(ino);
  if (!record)
    throw control_error(ENOENT, "chunks: inode " + std::to_string(ino) + " does not exist");
  if (!S_ISREG(record->mode))
    throw control_error(S_ISDIR(record->mode) ? EISDIR : EINVAL,
                        "chunks: inode " + std::to_string(ino) + " is not a regular file");
  response.header({{"size", record->size}});

  std::uint64_t pieces = 0, stored = 0;
  store::walk_file(s, ino, reuse, [&](store::file_piece& p) {
    nlohmann::json m = {{"piece", piece_kind_name(p.what)},
                        {"offset", p.offset},
                        {"length", p.length},
                        {"bytes", p.bytes.size()}};
    if (p.what == store::file_piece::kind::stored) {
      m["codec"] = codec::codec_name(p.codec);
      m["hash"] = p.hash.hex();
      ++stored;
    }
    response.message(m);
    response.data(p.bytes);
    ++pieces;
  });
  response.summary({{"pieces", pieces}, {"stored_pieces", stored}});
}

// {"op":"scrub"}: store/check/scrub.h on this control thread, at nice 19 and the
// lowest best-effort I/O priority so that the mount's users do not wait
// for it (fs/recompressor.h, nice_own_thread: not SCHED_IDLE, which could
// starve it while it holds a lock a writer needs). Messages
// {"done":N,"total":N,"bytes":N} at most five times a second; the end line
// carries the report (store::to_json(scrub_report)). A client that goes
// away, or an unmount, ends it at the next message.
void scrub(const store::store& s, control_response& response) {
  nice_own_thread();  // this thread serves only this request
  response.header();
  auto last = std::chrono::steady_clock::now();
  store::scrub_options options;
  options.stop = [&] { return response.cancelled(); };  // unmounting, or the client left
  options.progress = [&](std::uint64_t done, std::uint64_t total, std::uint64_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(200)) return;
    last = now;
    response.message({{"done", done}, {"total", total}, {"bytes", bytes}});
  };
  response.summary(nlohmann::json::parse(store::to_json(store::scrub(s, options))));
}

}  // namespace

void register_store_handlers(control_server& server, const store::store& s) {
  server.register_handler("cat", [&s](const nlohmann::json& request, control_response& response) {
    cat(s, request, response);
  });
  server.register_handler("chunks",
                          [&s](const nlohmann::json& request, control_response& response) {
                            chunks(s, request, response);
                          });
  server.register_handler(
      "scrub", [&s](const nlohmann::json&, control_response& response) { scrub(s, response); });
  // {"op":"drop_caches"}: empties the daemon's decoded-chunk and metadata
  // block caches (densefs bench, before each cold row), as
  // /proc/sys/vm/drop_caches does for the kernel's.
  server.register_handler("drop_caches", [&s](const nlohmann::json&, control_response& response) {
    s.drop_caches();
    response.header();
  });
}

}  // namespace densefs::fs
