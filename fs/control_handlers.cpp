// The control requests every densefs daemon answers (control_server.h).
#include <sys/stat.h>

#include <cerrno>

#include "fs/control_server.h"
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

}  // namespace

void register_store_handlers(control_server& server, const store::store& s) {
  server.register_handler("cat", [&s](const nlohmann::json& request, control_response& response) {
    cat(s, request, response);
  });
}

}  // namespace densefs::fs
