#include "tools/mount_args.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "codec/codec.h"
#include "codec/policy.h"
#include "store/payload/batched_reader.h"
#include "store/records.h"
#include "tools/tool_main.h"

namespace densefs::tools {

const char* const k_mount_usage =
    R"(usage: densefs mount STORE MOUNTPOINT [-f] [-d] [-s] [-o OPTION[,OPTION...]]
       densefs STORE MOUNTPOINT [-o OPTION[,OPTION...]]   (mount.fuse3, fstab)

  STORE                 a store directory, or a scale-out volume's
                        postgresql:// URI (docs/scale-out.md)

  -f, --foreground      stay in the foreground, log to stderr
  -d, --debug           trace FUSE requests (implies -f)
  -s                    single-threaded FUSE loop
  -o OPTIONS            comma-separated, may be repeated:
     ro / rw            read-only / read-write (default rw)
     allow_other        let other users access the mount
     codec=SPEC         codec policy for new chunks (docs/policy.md): default,
                        one codec (raw, zstd:level=N, broccoli:quality=Q, lepton)
                        or changes such as default/text=zstd:level=9
     lepton=background|sync  JPEGs: store fast and re-encode with Lepton in
                        the background (default), or encode before commit
     ingest=auto|strong|fast  fast: zstd -1 at write time, the policy codec
                        in the background when idle; strong: the policy
                        codec at write time; auto (default): fast for files
                        up to 1 MiB, strong for larger ones (docs/policy.md)
     recompress_threads=N  background re-encoding threads, idle priority
                        (default 1; 0 leaves queued work for later)
     idle_spin=N        threads that keep N cores awake, at idle priority,
                        for 1 ms after each request, so that a burst of
                        requests is not slowed by cores waking from idle
                        (default 0 = off; docs/read-path.md, "Idle cores")
     chunk_cache=SIZE   decoded chunks kept in memory (default 256M; 0 = none)
     cache_size=SIZE    volumes with packs in object storage: the local cache
                        of payloads (default 10G; docs/scale-out.md)
     key_file=FILE      an encrypted volume's key file (mode 0600; else
                        DENSEFS_PASSPHRASE, else a terminal asks before
                        the mount starts; docs/encryption.md)
     snapshot=NAME      the volume as snapshot NAME holds it, read-only
                        (densefs snapshot list; docs/backup.md)
     cache_dir=DIR      where that cache is (default STORE/cache; mounting a
                        postgresql:// URI: DIR/UUID holds the volume's
                        FORMAT, lock and cache, default /var/cache/densefs
                        for root, else ~/.cache/densefs)
     io=auto|uring|pread  how payload files are read: io_uring, falling back
                        to pread with a log line where the kernel refuses it
                        (default auto), or one of them (uring fails the mount
                        without io_uring)
     transport=auto|uring|device  how FUSE requests reach densefs: io_uring
                        where libfuse and the kernel offer it (default auto:
                        /sys/module/fuse/parameters/enable_uring is Y), or
                        one of them (uring fails the mount without it)
     metrics=ADDR:PORT  serve Prometheus metrics at http://ADDR:PORT/metrics
                        (e.g. 127.0.0.1:9567; docs/metrics.md)
     shared             a volume in PostgreSQL: write beside its other shared
                        writers, each mount on its own machine or client
                        directory (default: write alone; docs/scale-out.md,
                        "Several writers")
     entry_timeout=SEC  kernel dentry cache (default 86400)
     attr_timeout=SEC   kernel attribute cache (default 86400)
     negative_timeout=SEC  cache of missing names (default 86400)
     writeback_cache / no_writeback_cache   kernel write-back caching (default off;
                        refused where other clients write: -o shared, or -o ro
                        of a volume in PostgreSQL)
     open_requests      with ro: every open and close of a file is a request
                        to densefs (default: a read-only mount of a volume
                        that is not in PostgreSQL lets the kernel open files
                        alone; writable mounts always ask; docs/read-path.md,
                        "Opens")
     local_locks        flock and fcntl locks stay in this machine's kernel
                        (default: a volume in PostgreSQL keeps them where
                        every client sees them; docs/scale-out.md, "Locks
                        across clients")
     relatime           reads update atime when it is not newer than mtime or
                        ctime, or a day old (default: reads never update it,
                        as with noatime)
     strictatime        every read updates atime
     acl / noacl        POSIX ACLs, enforced by the kernel (default acl; with
                        noacl setfacl is refused: docs/testing.md, "POSIX ACLs")
     encode_threads=N   compression threads (default: one per core)
     max_staged=SIZE    file data staged in memory before writers wait
                        (default 256M; K/M/G suffixes)
     commit=SEC         closed files' data is committed in groups at least
                        this often (default 1; fsync, densefs sync and
                        umount commit at once; docs/design.md)
     debug, foreground  as -d, -f
  fstab noise (nofail, _netdev, auto, noauto, user, users, defaults, comment=,
  x-*, subtype=, fsname=) is ignored; other options go to FUSE as they are.
)";

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

[[noreturn]] void bad_value(std::string_view option, std::string_view value,
                            std::string_view expected) {
  throw usage_error("bad value in -o " + std::string(option) + "=" + std::string(value) +
                    ": expected " + std::string(expected));
}

double parse_seconds(std::string_view option, std::string_view value) {
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() ||
      !std::isfinite(v) || v < 0) {
    bad_value(option, value, "a number of seconds >= 0");
  }
  return v;
}

unsigned parse_count(std::string_view option, std::string_view value, unsigned max) {
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || v > max) {
    bad_value(option, value, "an integer from 0 to " + std::to_string(max));
  }
  return v;
}

// fstab and mount(8) add these; they mean nothing to a FUSE file system, and
// subtype/fsname are set by fs::mount itself.
bool is_dropped(std::string_view opt) {
  static const std::string_view exact[] = {"nofail", "_netdev", "auto",    "noauto",
                                           "user",   "users",   "defaults"};
  for (const auto e : exact) {
    if (opt == e) return true;
  }
  return starts_with(opt, "comment=") || starts_with(opt, "x-") || starts_with(opt, "subtype=") ||
         starts_with(opt, "fsname=");
}

void apply_option(std::string_view opt, fs::mount_options& o) {
  if (opt.empty()) return;  // "-o a,,b"
  if (is_dropped(opt)) return;

  const auto eq = opt.find('=');
  const std::string_view key = opt.substr(0, eq);
  const std::string_view value =
      eq == std::string_view::npos ? std::string_view{} : opt.substr(eq + 1);
  const bool has_value = eq != std::string_view::npos;

  auto flag = [&](bool& field, bool to) {
    if (has_value) throw usage_error("-o " + std::string(key) + " takes no value");
    field = to;
  };

  if (key == "allow_other") {
    flag(o.allow_other, true);
  } else if (key == "ro") {
    flag(o.read_only, true);
  } else if (key == "rw") {
    flag(o.read_only, false);
  } else if (key == "acl") {
    flag(o.posix_acl, true);
  } else if (key == "noacl") {
    flag(o.posix_acl, false);
  } else if (key == "remount") {
    flag(o.remount, true);
  } else if (key == "writeback_cache") {
    flag(o.writeback_cache, true);
  } else if (key == "no_writeback_cache") {
    flag(o.writeback_cache, false);
  } else if (key == "shared" || key == "shared_writer") {
    // shared_writer: the name for fstab and mount units, where mount(8)
    // takes "shared" for itself (a propagation flag) and never passes it on.
    flag(o.shared_writer, true);
  } else if (key == "open_requests") {
    flag(o.open_requests, true);
  } else if (key == "local_locks") {
    flag(o.local_locks, true);
  } else if (key == "relatime") {
    // Not for libfuse, which knows only noatime among the atime options;
    // the kernel mounts relatime by default and leaves atime to densefs.
    // The atime options exclude each other: the last one given counts (a
    // remount adds its option to those of fstab).
    flag(o.relatime, true);
    o.strictatime = false;
  } else if (key == "strictatime") {
    // Not for libfuse either (it knows only nostrictatime).
    flag(o.strictatime, true);
    o.relatime = false;
  } else if (key == "noatime" && !has_value) {
    o.relatime = o.strictatime = false;
    o.fuse_options.emplace_back(opt);
  } else if (key == "debug") {
    flag(o.debug, true);
    o.foreground = true;
  } else if (key == "foreground") {
    flag(o.foreground, true);
  } else if (key == "codec") {
    try {
      o.codec_spec = codec::format_policy(codec::parse_policy(value));
    } catch (const codec::codec_error& e) {
      throw usage_error("bad value in -o codec=" + std::string(value) + ": " + e.what());
    }
  } else if (key == "lepton" && has_value) {
    if (value == "sync") {
      o.lepton_sync = true;
    } else if (value == "background") {
      o.lepton_sync = false;
    } else {
      throw usage_error("bad value in -o lepton=" + std::string(value) +
                        ": expected background or sync");
    }
  } else if (key == "ingest" && has_value) {
    if (value == "fast") {
      o.fast_ingest = true;
    } else if (value == "strong") {
      o.fast_ingest = false;
      o.fast_ingest_small_bytes = 0;
    } else if (value == "auto") {
      o.fast_ingest = false;
      o.fast_ingest_small_bytes = fs::mount_options{}.fast_ingest_small_bytes;
    } else {
      throw usage_error("bad value in -o ingest=" + std::string(value) +
                        ": expected auto, strong or fast");
    }
  } else if (key == "recompress_threads" && has_value) {
    o.recompress_threads = parse_count(key, value, 64);
  } else if (key == "idle_spin" && has_value) {
    o.idle_spin_threads = parse_count(key, value, 64);
  } else if (key == "entry_timeout" && has_value) {
    o.entry_timeout = parse_seconds(key, value);
  } else if (key == "attr_timeout" && has_value) {
    o.attr_timeout = parse_seconds(key, value);
  } else if (key == "negative_timeout" && has_value) {
    o.negative_timeout = parse_seconds(key, value);
  } else if (key == "encode_threads" && has_value) {
    // More threads than this is a typo, not a machine.
    o.encode_threads = parse_count(key, value, 1024);
  } else if (key == "max_staged" && has_value) {
    const std::size_t bytes = parse_size(key, value);
    // Writers wait for the encoder once this much is staged; below one chunk
    // a single write could never be staged at all.
    if (bytes < store::k_chunk_size) {
      bad_value(key, value, "at least one chunk (4M)");
    }
    o.max_staged_bytes = bytes;
  } else if (key == "commit" && has_value) {
    const double seconds = parse_seconds(key, value);
    // Longer only holds more memory (max_staged bounds it) and risks more
    // at a crash; ext4 allows any, but a typo of minutes is likelier.
    if (seconds > 300) bad_value(key, value, "at most 300 seconds");
    o.commit_interval = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  } else if (key == "chunk_cache" && has_value) {
    o.chunk_cache_bytes = parse_size(key, value);
  } else if (key == "cache_size" && has_value) {
    o.cache_bytes = parse_size(key, value);
  } else if (key == "snapshot" && has_value) {
    if (value.empty()) bad_value(key, value, "a snapshot's name (densefs snapshot list)");
    o.snapshot = std::string(value);
    o.read_only = true;
  } else if (key == "key_file" && has_value) {
    if (value.empty()) bad_value(key, value, "a file's path");
    o.key_file = std::string(value);
  } else if (key == "cache_dir" && has_value) {
    if (value.empty() || value.front() != '/') bad_value(key, value, "an absolute path");
    o.cache_dir = std::string(value);
  } else if (key == "metrics" && has_value) {
    if (value.find(':') == std::string_view::npos)
      bad_value(key, value, "ADDR:PORT, e.g. 127.0.0.1:9567 (docs/metrics.md)");
    o.metrics_address = std::string(value);
  } else if (key == "io" && has_value) {
    const auto mode = store::parse_io_mode(value);
    if (!mode) bad_value(key, value, "auto, uring or pread");
    o.io = *mode;
  } else if (key == "transport" && has_value) {
    if (value == "auto") {
      o.transport = fs::fuse_transport::automatic;
    } else if (value == "uring") {
      o.transport = fs::fuse_transport::uring;
    } else if (value == "device") {
      o.transport = fs::fuse_transport::device;
    } else {
      bad_value(key, value, "auto, uring or device");
    }
  } else if (key == "entry_timeout" || key == "attr_timeout" || key == "negative_timeout" ||
             key == "encode_threads" || key == "max_staged" || key == "chunk_cache" ||
             key == "io" || key == "lepton" || key == "ingest" || key == "recompress_threads" ||
             key == "idle_spin" || key == "commit" || key == "cache_size" || key == "cache_dir" ||
             key == "transport" || key == "key_file" || key == "snapshot" || key == "metrics") {
    throw usage_error("-o " + std::string(key) + " needs a value (" + std::string(key) + "=...)");
  } else {
    // libfuse and the kernel know the rest (noatime, nosuid, max_read=, ...)
    // and reject what they do not.
    o.fuse_options.emplace_back(opt);
  }
}

void apply_option_list(std::string_view list, fs::mount_options& o) {
  while (true) {
    const auto comma = list.find(',');
    apply_option(list.substr(0, comma), o);
    if (comma == std::string_view::npos) return;
    list = list.substr(comma + 1);
  }
}

}  // namespace

std::size_t parse_size(std::string_view option, std::string_view text) {
  std::uint64_t number = 0;
  const char* const first = text.data();
  const char* const last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, number);
  auto fail = [&] {
    throw usage_error("bad value in -o " + std::string(option) + "=" + std::string(text) +
                      ": expected a size such as 512M or 2G");
  };
  if (text.empty() || ec != std::errc{} || end == first) fail();
  std::string_view suffix(end, static_cast<std::size_t>(last - end));
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (suffix.front()) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      default:
        fail();
    }
    suffix.remove_prefix(1);
    // "256M", "256MB", "256MiB" all mean 256 * 2^20.
    if (!(suffix.empty() || suffix == "B" || suffix == "iB")) fail();
  }
  if (shift != 0 && number > (std::numeric_limits<std::size_t>::max() >> shift)) fail();
  return static_cast<std::size_t>(number) << shift;
}

fs::mount_options parse_mount_args(const std::vector<std::string>& args) {
  fs::mount_options o;
  std::vector<std::string_view> positional;
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (options_done || a.empty() || a.front() != '-' || a == "-") {
      positional.push_back(a);
    } else if (a == "--") {
      options_done = true;
    } else if (a == "-f" || a == "--foreground") {
      o.foreground = true;
    } else if (a == "-d" || a == "--debug") {
      o.debug = true;
      o.foreground = true;
    } else if (a == "-s") {
      o.single_threaded = true;
    } else if (a == "-o") {
      if (i + 1 >= args.size()) throw usage_error("-o needs a value");
      apply_option_list(args[++i], o);
    } else if (starts_with(a, "-o")) {
      apply_option_list(a.substr(2), o);
    } else {
      throw usage_error("unknown option '" + std::string(a) + "'");
    }
  }
  if (positional.size() != 2) {
    throw usage_error("expected STORE and MOUNTPOINT, got " + std::to_string(positional.size()) +
                      " path" + (positional.size() == 1 ? "" : "s"));
  }
  o.store_dir = std::string(positional[0]);
  o.mountpoint = std::string(positional[1]);
  return o;
}

}  // namespace densefs::tools
