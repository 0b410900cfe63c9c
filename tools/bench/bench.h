// densefs bench: the same workloads against labelled directories, side by
// side (docs/bench.md). Private to tools/bench/. Everything here except
// densefs_hooks is portable POSIX: the harness also builds alone
// (DENSEFS_BENCH_ONLY) on macOS to measure APFS.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tools/tool_main.h"

namespace densefs::tools::bench {

// One labelled directory under test; the first one is the baseline.
struct target {
  std::string label;
  std::string dir;
};

// What the parent measured around N worker processes.
struct measure {
  double wall = 0;  // seconds, parent's monotonic clock from start to last exit
  double user = 0;  // seconds, RUSAGE_CHILDREN delta
  double sys = 0;
  std::uint64_t entries = 0;  // summed over the workers
  std::uint64_t bytes = 0;
  std::uint64_t errors = 0;  // entries that failed (lstat, open, read)
  int failed_workers = 0;    // nonzero exit status
};

// One row cell: a workload at one cache state and process count on one target.
struct result {
  std::string workload;  // walk, read-small, read-jpeg, read-large, write-big, write-cp,
                         // write-rsync, rsync-again, rsync-1pct, write-tar
  std::string cache;     // warm, cold, or "" for writes
  int procs = 1;
  std::string target;
  bool available = true;
  std::string note;  // why not available
  measure m;
};

// Logical bytes vs what the target uses, for one kind of file.
struct space_result {
  std::string target;
  std::string type;
  std::uint64_t files = 0;
  std::uint64_t logical = 0;
  std::uint64_t allocated = 0;            // sum of st_blocks * 512 as the target reports it
  std::int64_t used = 0;                  // statvfs used-bytes delta around writing + sync
  std::optional<std::int64_t> fs_stored;  // densefs stats stored_bytes delta (densefs only)
};

struct report {
  std::vector<std::string> targets;  // labels, baseline first
  std::vector<result> results;
  std::vector<space_result> space;
  // Figures that are not a file system's: the Lepton library's own decode
  // rate (workload "lepton-decode", target "library"), which a read of
  // Lepton-stored JPEGs is compared with.
  std::vector<result> references;
  std::vector<std::string> notes;  // said under the table
  bool cold = false;               // cold rows were measured
  std::string cold_note;           // why not, when not
  std::string input;
};

// Runs `work(i)` in n forked processes that start together (a pipe is the
// start barrier) and measures them from the parent. `work` returns counts
// that the parent sums; a worker whose `work` throws exits 1.
struct worker_counts {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t errors = 0;
};
measure run_processes(int n, const std::function<worker_counts(int index)>& work);

// Runs a command (argv[0] looked up in PATH) as one measured process.
// Nothing when the program is not installed.
std::optional<measure> run_command(const std::vector<std::string>& argv);
bool program_available(const std::string& name);

// Linux and root: sync and drop the page, dentry and inode caches. False (and
// `why`) elsewhere.
bool can_drop_caches(std::string& why);
void drop_caches();

// The workloads (walk.cpp, read.cpp). Each worker walks the whole tree.
worker_counts walk_tree(const std::string& root);
// Regular files under root, sorted (lstat, no symlinks followed).
std::vector<std::string> list_files(const std::string& root);
// Reads files i, i+n, i+2n, ... of `files`.
worker_counts read_files(const std::vector<std::string>& files, int index, int n);
worker_counts read_file(const std::string& path);

// write.cpp: copies `from` to `to`, and fsyncs it when `synced`.
worker_counts write_file(const std::string& from, const std::string& to, bool synced);
// A portable cp -R of regular files, directories and symlinks (the fallback
// when cp or rsync are missing, and --prepare's copier). Stops copying files
// once `cap` bytes were copied; returns the bytes copied.
std::uint64_t copy_tree(const std::string& from, const std::string& to, std::uint64_t cap);

// space.cpp.
std::string file_kind(const std::string& path);    // classifier or extension
std::uint64_t used_bytes(const std::string& dir);  // statvfs (blocks - free) * frsize
// Writes the files under `inputs` (files or trees) to work_dir/KIND/, one
// kind at a time, and measures each kind.
std::vector<space_result> run_space(const std::vector<std::string>& inputs, const target& t,
                                    const std::string& work_dir);

// Densefs-specific figures and steps; the standalone build has none.
std::optional<std::int64_t> densefs_stored_bytes(const std::string& dir);
// Waits until a densefs mount has re-encoded everything under `dir` that
// its background re-encoder will (Lepton for JPEGs, ...), so that reads and
// sizes measure how the data is finally stored, then collects the payloads
// that re-encoding replaced (the daemon's collector would do it during the
// next rows). Nothing elsewhere. Returns why it could not, or "".
std::string settle(const std::string& dir);
// Empties a densefs daemon's own caches (decoded chunks, metadata blocks)
// for a cold row; /proc/sys/vm/drop_caches does not reach them. Nothing
// elsewhere. Returns why it could not, or "".
std::string drop_fs_caches(const std::string& dir);
// The Lepton library's own decode of `files`, encoded in memory beforehand,
// in n processes: the ones Lepton refuses count their bytes at no cost (a
// reader gets them from a fast codec), so the rate is the best a read of all
// of them could reach. Nothing in the standalone build or when Lepton
// accepts none.
std::optional<measure> lepton_library_decode(const std::vector<std::string>& files, int n);

// report.cpp.
std::string format_seconds(double s);
std::string render_table(const report& r);
std::string render_json(const report& r);
std::string render_svg(const report& r);

// Parses "300M", "1G", "4096" (binary units). Throws usage_error.
std::uint64_t parse_size(const std::string& text);

}  // namespace densefs::tools::bench
