// The top level: picks the subcommand and turns every escaping error into
// one line on stderr and an exit status.
#include <filesystem>
#include <string_view>

#include "codec/codec.h"
#include "store/error.h"
#include "tools/cli.h"

#ifndef DENSEFS_VERSION
#define DENSEFS_VERSION "unknown"
#endif

namespace densefs::tools {
namespace {

using command_main = int (*)(const std::vector<std::string>&, const tool_io&);

struct command {
  std::string_view name;
  command_main main;
};

constexpr command k_commands[] = {
    {"mkfs", mkfs_main},       {"mount", mount_main}, {"umount", umount_main},
    {"stats", stats_main},     {"info", info_main},   {"analyze", analyze_main},
    {"cat", cat_main},         {"codec", codec_main}, {"recompress", recompress_main},
    {"fsck", fsck_main},       {"czip", czip_main},   {"gc", gc_main},
    {"bench", bench_main},     {"sync", sync_main},   {"status", status_main},
    {"scrub", scrub_main},     {"dump", dump_main},   {"load", load_main},
    {"migrate", migrate_main}, {"key", key_main},     {"snapshot", snapshot_main},
};

const char* const k_usage = R"(usage: densefs COMMAND [ARGS...]

commands:
  mkfs STORE [--codec SPEC] [--payloads pack|blob] [--meta CONNINFO [--data s3://...]]
       [--encrypt [--key-file FILE]] create a store (records in PostgreSQL and
                                     packs in S3: a scale-out volume; encrypted
                                     at rest: docs/encryption.md)
  mount STORE MOUNTPOINT [-f] [-o OPTIONS]
                                     mount a store (as a daemon unless -f)
  umount MOUNTPOINT                  unmount; returns once the store is written
  sync PATH [--json]                 make everything written through PATH's mount
                                     durable (closed files' data included)
  stats STORE|MOUNTPOINT [--json]    logical and stored size, ratio, dedup savings
  status STORE [--json]              which clients have the volume mounted
  info PATH [--json]                 how one file is stored: chunks and codecs
  analyze DIR [--json] [--codec SPEC] [--full]
                                     what densefs would save on a directory (a dry run)
  recompress STORE|PATH [--json]     re-encode chunks under the codec policy: an
                                     unmounted store, or PATH on a live mount
  fsck STORE [--repair] [--deep] [--repair-from DIR] [--json]
                                     check an unmounted store; --repair fixes what
                                     needs no guessing, --repair-from heals damaged
                                     data from a source tree (docs/fsck.md)
  scrub STORE [--json]               read and check every chunk, mounted or not, at
                                     low priority; names damaged files (docs/fsck.md)
  gc STORE [--dry-run] [--json]      give back the space of deleted data (docs/gc.md)
  dump STORE FILE [--json]           every record of a volume, mounted or not, to one
                                     checksummed file (docs/backup.md)
  load FILE STORE [--meta CONNINFO [--data s3://...]]
                                     a new volume from a dump, against its packs
  migrate SOURCE STORE [--meta CONNINFO [--data s3://...]]
                                     copy an unmounted volume to a new home (embedded
                                     <-> PostgreSQL + S3), records and packs
  snapshot create|list|delete|forget PATH [NAME...] [--keep-daily N ...]
                                     instant read-only states of a volume, mounted or
                                     not; mount one with -o snapshot=NAME
                                     (docs/backup.md)
  key change STORE [--key-file F] [--new-key-file F]
                                     seal an encrypted volume's key under a new
                                     secret (no data re-encrypted)
  cat [--encoding br|identity] [--store STORE] [-o OUT] PATH
                                     a file's bytes, or one Brotli stream of them
                                     built from its stored chunks (docs/export.md)
  codec compress|decompress|concat   the codecs on standalone files
  czip pack|unpack|info|verify|cat   one file as a chunked, deduplicated, compressed,
                                     optionally encrypted container (docs/czip.md)
  bench --prepare DIR | --input DIR --target LABEL=DIR...
                                     the same workloads on several directories,
                                     side by side (docs/bench.md)
  help [COMMAND]                     this text, or a command's options

`densefs STORE MOUNTPOINT -o OPTIONS` mounts too (mount -t fuse.densefs, fstab).
)";

const command* find_command(std::string_view name) {
  for (const auto& c : k_commands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

int dispatch(const std::vector<std::string>& args, const tool_io& io, std::string& what) {
  if (args.empty()) {
    io.err << k_usage;
    return k_exit_usage;
  }
  const std::string& first = args.front();
  if (first == "--version" || first == "-V" || first == "version") {
    io.out << "densefs " << DENSEFS_VERSION << '\n';
    return k_exit_ok;
  }
  if (first == "help" || first == "--help" || first == "-h") {
    if (args.size() >= 2 && first == "help") {
      const command* c = find_command(args[1]);
      if (c == nullptr) {
        print_error(io, "help", "unknown command '" + args[1] + "'");
        return k_exit_usage;
      }
      return c->main({"--help"}, io);
    }
    io.out << k_usage;
    return k_exit_ok;
  }

  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (const command* c = find_command(first)) {
    what = std::string(c->name);
    return c->main(rest, io);
  }

  // mount.fuse3 and fstab run helpers as `densefs STORE MNT -o opts`: with no
  // subcommand, exactly two paths mean mount.
  std::size_t paths = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o") {
      ++i;
    } else if (args[i].empty() || args[i].front() != '-') {
      ++paths;
    }
  }
  if (paths == 2 && !first.empty()) {
    what = "mount";
    return mount_main(args, io);
  }
  if (first.empty()) {
    print_error(io, "densefs", "empty command (see densefs help)");
  } else {
    print_error(io, first,
                first.front() == '-' ? "unknown option (see densefs help)"
                                     : "unknown command (see densefs help)");
  }
  return k_exit_usage;
}

}  // namespace

int densefs_main(const std::vector<std::string>& args, const tool_io& io) {
  std::string what = args.empty() ? "densefs" : args.front();
  try {
    return dispatch(args, io, what);
  } catch (const usage_error& e) {
    print_error(io, what, e.what());
    return k_exit_usage;
  } catch (const store::store_error& e) {
    print_error(io, what, e.what());
  } catch (const codec::codec_error& e) {
    print_error(io, what, e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    // Its what() repeats the paths in brackets; the code's message is enough.
    std::string why = e.code().message();
    if (!e.path1().empty()) why = e.path1().string() + ": " + why;
    print_error(io, what, why);
  } catch (const std::exception& e) {
    print_error(io, what, e.what());
  }
  return k_exit_failure;
}

int densefs_main(int argc, char** argv, const tool_io& io) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return densefs_main(args, io);
}

}  // namespace densefs::tools
