// densefs bench: the same workloads against any set of labelled directories,
// one side-by-side table (docs/bench.md). --prepare builds the inputs from
// real files on the machine; each target gets a work directory that is
// removed afterwards.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include "tools/bench/bench.h"
#include "tools/format.h"

#ifndef DENSEFS_BENCH_JPEG_DIR
#define DENSEFS_BENCH_JPEG_DIR ""
#endif

namespace densefs::tools::bench {
namespace {

namespace stdfs = std::filesystem;

const std::set<std::string> k_families = {"walk", "read", "write", "space"};

struct options {
  std::string prepare;
  std::string input;
  std::vector<std::string> target_specs;
  std::vector<target> targets;
  std::string workloads = "walk,read,write,space";
  std::set<std::string> families;
  std::string procs_text = "1,2,4,8";
  std::vector<int> procs;
  std::string size_text = "300M";
  std::string big_size_text = "1G";
  std::vector<std::string> sources{"/usr/share"};
  std::vector<std::string> big_sources{"/usr/lib", "/usr/share"};
  std::string jpeg;  // --jpeg; empty: the corpus beside the source tree, if there
  bool warm_only = false;
  bool json = false;
  bool keep = false;
  std::string svg;
  std::string save_json;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) out.push_back(item);
  return out;
}

void check_options(options& o) {
  for (const auto& w : split(o.workloads)) {
    if (k_families.count(w) == 0)
      throw usage_error("--workloads: unknown workload '" + w + "' (walk, read, write, space)");
    o.families.insert(w);
  }
  if (o.families.empty()) throw usage_error("--workloads: empty list");
  for (const auto& p : split(o.procs_text)) {
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(p, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != p.size() || n < 1 || n > 256)
      throw usage_error("--procs: '" + p + "' is not a process count from 1 to 256");
    o.procs.push_back(n);
  }
  if (o.procs.empty()) throw usage_error("--procs: empty list");
  std::set<std::string> labels;
  for (const auto& spec : o.target_specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw usage_error("--target: expected LABEL=DIR, got '" + spec + "'");
    target t{spec.substr(0, eq), spec.substr(eq + 1)};
    if (!labels.insert(t.label).second)
      throw usage_error("--target: label '" + t.label + "' given twice");
    o.targets.push_back(t);
  }
  if (o.targets.empty() && o.prepare.empty())
    throw usage_error("nothing to do: give --prepare DIR and/or --target LABEL=DIR");
  if (!o.targets.empty() && o.input.empty() && o.prepare.empty())
    throw usage_error("--input DIR (made by --prepare) is needed to run the workloads");
  if (o.input.empty()) o.input = o.prepare;
  parse_size(o.size_text);
  parse_size(o.big_size_text);
}

// A status line on a terminal, nothing otherwise.
class progress {
 public:
  progress(const tool_io& io)
      : io_(io), shown_(&io.err == &std::cerr && ::isatty(STDERR_FILENO) == 1) {}
  ~progress() { clear(); }
  void show(const std::string& what) {
    if (!shown_) return;
    io_.err << "\r\033[Kbench: " << what << std::flush;
    dirty_ = true;
  }
  void clear() {
    if (dirty_) io_.err << "\r\033[K" << std::flush;
    dirty_ = false;
  }

 private:
  const tool_io& io_;
  bool shown_;
  bool dirty_ = false;
};

// --prepare: the inputs, from real files on the machine.
void prepare(const options& o, const tool_io& io, progress& p) {
  const stdfs::path dir(o.prepare);
  std::error_code ec;
  if (stdfs::exists(dir, ec) && !stdfs::is_empty(dir, ec))
    throw std::runtime_error(o.prepare + " exists and is not empty (remove it or pick another)");
  // An explicit --jpeg must exist; the default (the project's corpus, found
  // beside the source tree a build came from) may not on an installed copy.
  std::string jpeg = o.jpeg;
  if (!jpeg.empty() && !stdfs::is_directory(jpeg, ec))
    throw std::runtime_error("--jpeg " + jpeg + ": not a directory");

  stdfs::create_directories(dir);
  const std::uint64_t cap = parse_size(o.size_text);
  std::uint64_t tree_bytes = 0;
  stdfs::create_directories(dir / "tree");
  for (const auto& src : o.sources) {
    if (tree_bytes >= cap) break;
    if (!stdfs::is_directory(src, ec))
      throw std::runtime_error("--source " + src + ": not a directory");
    p.show("prepare: copying " + src);
    const std::string name = stdfs::path(src).lexically_normal().filename().string();
    tree_bytes +=
        copy_tree(src, (dir / "tree" / (name.empty() ? "root" : name)).string(), cap - tree_bytes);
  }
  std::uint64_t jpeg_bytes = 0;
  std::size_t jpeg_files = 0;
  stdfs::create_directories(dir / "jpeg");
  if (jpeg.empty() && stdfs::is_directory(DENSEFS_BENCH_JPEG_DIR, ec))
    jpeg = DENSEFS_BENCH_JPEG_DIR;
  if (!jpeg.empty()) {
    p.show("prepare: copying " + jpeg);
    jpeg_bytes = copy_tree(jpeg, (dir / "jpeg").string(), cap);
    jpeg_files = list_files((dir / "jpeg").string()).size();
  } else {
    io.err << "note: no JPEGs (the corpus is not here; give --jpeg DIR): the read-jpeg rows "
              "will say n/a\n";
  }
  // big.bin: real files one after another, each behind a 512-byte header as
  // in a tar archive: compressible the way a backup or an image is.
  const std::uint64_t big = parse_size(o.big_size_text);
  std::ofstream out(dir / "big.bin", std::ios::binary);
  std::uint64_t big_bytes = 0;
  std::vector<char> buffer(1 << 20);
  for (const auto& src : o.big_sources) {
    if (big_bytes >= big) break;
    p.show("prepare: listing " + src);
    for (const auto& f : list_files(src)) {
      if (big_bytes >= big) break;
      std::ifstream in(f, std::ios::binary);
      if (!in) continue;
      std::string header = f + "\n";
      header.resize(512, '\0');
      out.write(header.data(), static_cast<std::streamsize>(
                                   std::min<std::uint64_t>(header.size(), big - big_bytes)));
      big_bytes += std::min<std::uint64_t>(header.size(), big - big_bytes);
      while (big_bytes < big && in) {
        in.read(buffer.data(), static_cast<std::streamsize>(
                                   std::min<std::uint64_t>(buffer.size(), big - big_bytes)));
        out.write(buffer.data(), in.gcount());
        big_bytes += static_cast<std::uint64_t>(in.gcount());
      }
      if ((big_bytes & ((64u << 20) - 1)) < (1u << 20))
        p.show("prepare: big.bin " + human_size(big_bytes));
    }
  }
  out.close();
  if (!out) throw std::system_error(errno, std::generic_category(), (dir / "big.bin").string());
  p.clear();
  io.err << "prepared " << o.prepare << ": tree " << human_size(tree_bytes) << ", big.bin "
         << human_size(big_bytes) << ", jpeg " << jpeg_files << " files " << human_size(jpeg_bytes)
         << '\n';
  if (big_bytes < big)
    io.err << "note: the --big-source trees hold only " << human_size(big_bytes)
           << ": big.bin is smaller than --big-size\n";
}

// One target's work directory and what is on it.
struct work {
  target t;
  std::string dir;
  std::uint64_t tree_bytes = 0;
};

result make_result(const std::string& workload, const std::string& cache, int procs,
                   const std::string& label) {
  result r;
  r.workload = workload;
  r.cache = cache;
  r.procs = procs;
  r.target = label;
  return r;
}

result not_available(const std::string& workload, const std::string& label,
                     const std::string& why) {
  result r = make_result(workload, "", 1, label);
  r.available = false;
  r.note = why;
  return r;
}

// SIGINT or SIGTERM while the harness runs: the workers die with it (they
// keep the default action), and the parent stops after the current row,
// removes its work directories and exits.
std::atomic<int> g_interrupted{0};

extern "C" void on_interrupt(int signal) {
  g_interrupted = signal;
}

class interrupt_guard {
 public:
  interrupt_guard() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~interrupt_guard() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

class interrupted : public std::runtime_error {
 public:
  explicit interrupted(int signal)
      : std::runtime_error(std::string("interrupted by ") + ::strsignal(signal)), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

void check_interrupted() {
  if (const int s = g_interrupted.load()) throw interrupted(s);
}

class runner {
 public:
  runner(const options& o, progress& p) : o_(o), p_(p) {
    r_.input = o.input;
    for (const auto& t : o.targets) r_.targets.push_back(t.label);
    r_.cold = !o.warm_only && can_drop_caches(r_.cold_note);
    if (o.warm_only) r_.cold_note = "warm only (--warm-only)";
  }

  report run() {
    check_input();
    // Every target is checked before any work directory is made, and a work
    // directory made before a failure is removed: a failed or interrupted
    // run leaves nothing behind.
    for (const auto& t : o_.targets) {
      struct stat st {};
      if (::stat(t.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw std::runtime_error("--target " + t.label + "=" + t.dir + ": not a directory");
    }
    try {
      for (const auto& t : o_.targets) {
        work w{t, t.dir + "/densefs-bench." + std::to_string(::getpid())};
        if (::mkdir(w.dir.c_str(), 0755) != 0)
          throw std::system_error(errno, std::generic_category(), w.dir);
        works_.push_back(w);
      }
      if (o_.families.count("write") != 0) writes();
      if (o_.families.count("walk") != 0 || o_.families.count("read") != 0) stage();
      if (o_.families.count("walk") != 0) walks();
      if (o_.families.count("read") != 0) reads();
      if (o_.families.count("space") != 0) space();
    } catch (...) {
      cleanup();
      throw;
    }
    cleanup();
    p_.clear();
    return r_;
  }

 private:
  std::string in(const std::string& name) const { return o_.input + "/" + name; }
  static int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

  void check_input() {
    struct stat st {};
    if (::stat(in("tree").c_str(), &st) != 0 || ::stat(in("big.bin").c_str(), &st) != 0)
      throw std::runtime_error("--input " + o_.input +
                               ": no tree/ and big.bin (make it with densefs bench --prepare)");
    std::uint64_t bytes = 0;
    for (const auto& f : list_files(in("tree"))) {
      if (::stat(f.c_str(), &st) == 0) bytes += static_cast<std::uint64_t>(st.st_size);
    }
    tree_bytes_ = bytes;
    // The sources are read warm by every write workload: the same for all.
    for (const auto& f : list_files(o_.input)) read_file(f);
  }

  void cleanup() {
    if (o_.keep) return;
    for (const auto& w : works_) {
      p_.show("removing " + w.dir);
      std::error_code ec;
      stdfs::remove_all(w.dir, ec);
    }
  }

  void add(result r) {
    r_.results.push_back(std::move(r));
    check_interrupted();
  }

  void writes() {
    for (auto& w : works_) {
      p_.show("write-big on " + w.t.label);
      result r = make_result("write-big", "", 1, w.t.label);
      r.m = run_processes(1,
                          [&](int) { return write_file(in("big.bin"), w.dir + "/big.bin", true); });
      add(r);
    }
    // A deduplicating target (densefs) would store a second copy of the same
    // bytes for free: each copy lands on a target that does not hold those
    // bytes any more, so rsync's copy is removed before cp's is made.
    for (auto& w : works_) {
      const std::string copy = w.dir + "/rsync/";
      p_.show("write-rsync (rsync -a) on " + w.t.label);
      auto m = run_command({"rsync", "-a", in("tree"), copy});
      add_command("write-rsync", w, m, "rsync");
      if (m && m->failed_workers == 0) {
        // The nightly backup: the same tree again with nothing changed
        // (rsync compares sizes and times, and writes nothing) ...
        p_.show("rsync-again (nothing changed) on " + w.t.label);
        add_command("rsync-again", w, run_command({"rsync", "-a", in("tree"), copy}), "rsync");
        // ... and with 1% of the files changed: every 100th file's copy
        // gets another mtime, so rsync reads it, sends it again and
        // renames a new copy over it.
        p_.show("rsync-1pct (1% of the files changed) on " + w.t.label);
        age_every_nth_file(copy, 100);
        add_command("rsync-1pct", w, run_command({"rsync", "-a", in("tree"), copy}), "rsync");
      }
      remove(w.dir + "/rsync");
    }
    for (auto& w : works_) {
      p_.show("write-cp (cp -a) on " + w.t.label);
      auto m = run_command({"cp", "-a", in("tree"), w.dir + "/tree"});
      add_command("write-cp", w, m, "cp");
    }
    // Unpacking a source tarball: the tree as one tar (made once, untimed).
    const std::string tarball = in("tree.tar");
    struct stat st {};
    if (::stat(tarball.c_str(), &st) != 0 && program_available("tar")) {
      p_.show("making " + tarball);
      const auto made = run_command({"tar", "-cf", tarball + ".part", "-C", o_.input, "tree"});
      if (made && made->failed_workers == 0) stdfs::rename(tarball + ".part", tarball);
    }
    for (auto& w : works_) {
      p_.show("write-tar (tar -x) on " + w.t.label);
      const std::string out = w.dir + "/untar";
      std::optional<measure> m;
      if (::stat(tarball.c_str(), &st) == 0 && ::mkdir(out.c_str(), 0755) == 0)
        m = run_command({"tar", "-xf", tarball, "-C", out});
      add_command("write-tar", w, m, "tar");
      remove(out);
    }
  }

  // Sets an old mtime on every nth regular file under `root` (in the
  // order list_files gives), so that rsync sees them changed.
  static void age_every_nth_file(const std::string& root, std::size_t nth) {
    const std::vector<std::string> files = list_files(root);
    const timespec old_times[2] = {{0, UTIME_OMIT}, {1'000'000'000, 0}};
    for (std::size_t i = 0; i < files.size(); i += nth)
      if (::utimensat(AT_FDCWD, files[i].c_str(), old_times, AT_SYMLINK_NOFOLLOW) != 0)
        throw std::system_error(errno, std::generic_category(), files[i]);
  }

  void remove(const std::string& path) {
    std::error_code ec;
    stdfs::remove_all(path, ec);
    if (ec) throw std::system_error(ec, path);
    ::sync();
  }

  void add_command(const std::string& workload, const work& w, std::optional<measure> m,
                   const std::string& program) {
    if (!m) {
      add(not_available(workload, w.t.label, program + " is not installed"));
      return;
    }
    result r = make_result(workload, "", 1, w.t.label);
    r.m = *m;
    r.m.bytes = tree_bytes_;
    if (r.m.failed_workers != 0) {
      r.available = false;
      r.note = program + " failed";
    }
    add(r);
  }

  // Whatever the write workloads did not leave on a target, copied untimed.
  void stage() {
    for (auto& w : works_) {
      struct stat st {};
      if (::stat((w.dir + "/tree").c_str(), &st) != 0) {
        p_.show("copying the tree to " + w.t.label);
        copy_tree(in("tree"), w.dir + "/tree", UINT64_MAX);
      }
      if (::stat((w.dir + "/big.bin").c_str(), &st) != 0)
        write_file(in("big.bin"), w.dir + "/big.bin", true);
      p_.show("copying the JPEGs to " + w.t.label);
      copy_tree(in("jpeg"), w.dir + "/jpeg", UINT64_MAX);
    }
  }

  // The kernel's caches, and a densefs daemon's own (a note if it cannot).
  void drop_all_caches() {
    drop_caches();
    for (const auto& w : works_) {
      const std::string why = drop_fs_caches(w.dir);
      if (!why.empty()) r_.notes.push_back("cold rows on " + w.t.label + ": " + why);
    }
  }

  std::vector<std::string> caches() const {
    if (r_.cold) return {"warm", "cold"};
    return {"warm"};
  }

  // Runs `workload` for every cache state, process count and target, the
  // targets in turn for each row so drift on a shared machine hits all.
  void rows(const std::string& workload, const std::vector<int>& procs,
            const std::function<measure(const work&, int)>& once,
            const std::function<void(const work&)>& warm_up) {
    for (const auto& cache : caches()) {
      if (cache == "warm") {
        for (const auto& w : works_) {
          p_.show(workload + ": warming " + w.t.label);
          warm_up(w);
        }
      }
      for (const int n : procs) {
        for (const auto& w : works_) {
          p_.show(workload + " " + cache + " " + std::to_string(n) + "p on " + w.t.label);
          if (cache == "cold") drop_all_caches();
          result r = make_result(workload, cache, n, w.t.label);
          r.m = once(w, n);
          add(r);
        }
      }
    }
  }

  // Waits for every target's background re-encoding of `sub` (settle); a
  // note for `workload` where it could not.
  void settle_all(const std::string& sub, const std::string& workload) {
    for (const auto& w : works_) {
      p_.show("waiting for background re-encoding of " + sub + " on " + w.t.label);
      const std::string why = settle(w.dir + "/" + sub);
      if (!why.empty()) r_.notes.push_back(workload + " on " + w.t.label + ": not settled: " + why);
    }
  }

  void walks() {
    rows(
        "walk", o_.procs,
        [](const work& w, int n) {
          const std::string root = w.dir + "/tree";
          return run_processes(n, [&](int) { return walk_tree(root); });
        },
        [](const work& w) { walk_tree(w.dir + "/tree"); });
  }

  void reads() {
    std::map<std::string, std::vector<std::string>> files;
    for (const auto& w : works_) {
      files[w.t.label + "/tree"] = list_files(w.dir + "/tree");
      files[w.t.label + "/jpeg"] = list_files(w.dir + "/jpeg");
    }
    const auto read_tree = [&](const std::string& sub) {
      return [&, sub](const work& w, int n) {
        const auto& list = files[w.t.label + "/" + sub];
        return run_processes(n, [&](int i) { return read_files(list, i, n); });
      };
    };
    const auto warm_tree = [&](const std::string& sub) {
      return [&, sub](const work& w) { read_files(files[w.t.label + "/" + sub], 0, 1); };
    };
    // The tree is read as it is finally stored: a densefs mount re-encodes
    // what was written fast (ingest=auto) and gives gzip files the deflate
    // codec in the background, and a read during that pass would time the
    // faster interim form with the re-encoder beside it.
    settle_all("tree", "read-small");
    rows("read-small", o_.procs, read_tree("tree"), warm_tree("tree"));
    // No JPEGs prepared (no corpus on this machine): a row of zero files
    // would time only fork and exit.
    if (files[works_.front().t.label + "/jpeg"].empty()) {
      for (const auto& w : works_)
        add(not_available("read-jpeg", w.t.label, "no JPEGs in the prepared input (--jpeg)"));
    } else {
      // JPEGs are read as they are finally stored (densefs: re-encoded with
      // Lepton in the background), by one process and by one per core, and
      // compared with the Lepton library decoding the same files in memory.
      settle_all("jpeg", "read-jpeg");
      std::vector<int> procs{1};
      if (cores() > 1) procs.push_back(cores());
      rows("read-jpeg", procs, read_tree("jpeg"), warm_tree("jpeg"));
      p_.show("lepton-decode: the Lepton library on the same JPEGs");
      if (auto m = lepton_library_decode(list_files(in("jpeg")), cores())) {
        result r = make_result("lepton-decode", "", cores(), "library");
        r.m = *m;
        r_.references.push_back(r);
      }
    }
    rows(
        "read-large", {1},
        [](const work& w, int) {
          const std::string path = w.dir + "/big.bin";
          return run_processes(1, [&](int) { return read_file(path); });
        },
        [](const work& w) { read_file(w.dir + "/big.bin"); });
  }

  void space() {
    for (const auto& w : works_) {
      // The same bytes still on the target would be deduplicated by densefs.
      p_.show("space on " + w.t.label);
      for (const char* name : {"tree", "jpeg", "big.bin", "rsync"}) remove(w.dir + "/" + name);
      auto rows = run_space({in("tree"), in("jpeg"), in("big.bin")}, w.t, w.dir + "/space");
      r_.space.insert(r_.space.end(), rows.begin(), rows.end());
    }
  }

  const options& o_;
  progress& p_;
  report r_;
  std::vector<work> works_;
  std::uint64_t tree_bytes_ = 0;
};

void write_text(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream f(temp, std::ios::binary);
    f << text;
    f.close();
    if (!f) throw std::system_error(errno, std::generic_category(), path);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    throw std::system_error(errno, std::generic_category(), path);
}

int run(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Run the same file-system workloads (walk, read, write, space) against labelled "
      "directories and print them side by side; the first target is the baseline, the last "
      "the file system under test, and any between are peers it is also compared with "
      "(docs/bench.md).",
      "densefs bench"};
  options o;
  app.add_option("--prepare", o.prepare,
                 "build the inputs in DIR from real files, then exit "
                 "(or run with --target)");
  app.add_option("--input", o.input, "inputs made by --prepare");
  app.add_option("--target", o.target_specs, "LABEL=DIR: a directory to measure (repeat)");
  app.add_option("--workloads", o.workloads, "comma list of walk, read, write, space")
      ->capture_default_str();
  app.add_option("--procs", o.procs_text, "process counts for walk and read-small")
      ->capture_default_str();
  app.add_option("--size", o.size_text, "--prepare: cap of the tree (and of the JPEGs)")
      ->capture_default_str();
  app.add_option("--big-size", o.big_size_text, "--prepare: size of big.bin")
      ->capture_default_str();
  app.add_option("--source", o.sources, "--prepare: trees to copy (repeat)")->capture_default_str();
  app.add_option("--big-source", o.big_sources, "--prepare: trees big.bin is built from (repeat)")
      ->capture_default_str();
  app.add_option(
      "--jpeg", o.jpeg,
      // Not the corpus's path: the help becomes the packaged man page, which
      // must not name the machine the package was built on.
      "--prepare: a directory of JPEGs (default: the project's corpus, "
      "shared/corpus/jpeg beside the source tree densefs was built from, when it exists)");
  app.add_flag("--warm-only", o.warm_only, "skip the cold runs (which drop caches as root)");
  app.add_flag("--json", o.json, "print all figures as JSON instead of the table");
  app.add_option("--svg", o.svg, "also write a bar chart of the ratios to FILE");
  app.add_option("--save-json", o.save_json, "also write all figures as JSON to FILE");
  app.add_flag("--keep", o.keep, "keep the work directories on the targets");

  // Not tools::parse_cli: the standalone harness (docs/bench.md) builds
  // without tools/cli.cpp (tests/lint/bench_only_test.sh).
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    io.out << app.help();
    return k_exit_ok;
  } catch (const CLI::ParseError& e) {
    throw usage_error(e.what());
  }
  check_options(o);
  progress p(io);
  if (!o.prepare.empty()) prepare(o, io, p);
  if (o.targets.empty()) return k_exit_ok;
  const interrupt_guard guard;
  runner r(o, p);
  report rep;
  try {
    rep = r.run();
  } catch (const interrupted& e) {
    p.clear();
    io.err << "densefs: bench: " << e.what() << "; work directories removed\n";
    return 128 + e.signal();
  }
  io.out << (o.json ? render_json(rep) : render_table(rep));
  if (!o.svg.empty()) write_text(o.svg, render_svg(rep));
  if (!o.save_json.empty()) write_text(o.save_json, render_json(rep));
  return k_exit_ok;
}

}  // namespace

std::uint64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw usage_error("'" + text + "' is not a size (like 300M or 1G)");
  }
  const std::string unit = text.substr(used);
  static const std::map<std::string, unsigned> k_shift = {
      {"", 0}, {"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20}, {"G", 30}, {"GiB", 30}};
  const auto it = k_shift.find(unit);
  // stoull skips blanks and takes a sign: a size starts with a digit.
  if (it == k_shift.end() || text.empty() || text[0] < '0' || text[0] > '9' ||
      n > (std::numeric_limits<std::uint64_t>::max() >> it->second))
    throw usage_error("'" + text + "' is not a size (like 300M or 1G)");
  return static_cast<std::uint64_t>(n) << it->second;
}

}  // namespace densefs::tools::bench

namespace densefs::tools {

int bench_main(const std::vector<std::string>& args, const tool_io& io) {
  // Errors are reported here rather than by densefs_main so the standalone
  // densefs-bench prints them the same way.
  const auto say = [&](const std::string& why) {
    std::string line = why;
    std::replace(line.begin(), line.end(), '\n', ' ');
    io.err << "densefs: bench: " << line << '\n';
  };
  try {
    return bench::run(args, io);
  } catch (const usage_error& e) {
    say(e.what());
    return k_exit_usage;
  } catch (const std::exception& e) {
    say(e.what());
    return k_exit_failure;
  }
}

}  // namespace densefs::tools
