#include "store/metadata/fault_injection.h"

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "store/error.h"
#include "store/log.h"

namespace densefs::store {
namespace {

[[noreturn]] void bad_spec(std::string_view text, const std::string& why) {
  throw store_error(EINVAL, "DENSEFS_FAULT_INJECTION=\"" + std::string(text) + "\": " + why);
}

std::uint64_t parse_u64(std::string_view text, std::string_view key, std::string_view value) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size())
    bad_spec(text, std::string(key) + "=" + std::string(value) + " is not a number");
  return v;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Decides, for every call on a matching file, whether it fails. Shared by
// all files of the process: `after` and `count` count calls store-wide.
class fault_state {
 public:
  explicit fault_state(const fault_spec& spec) : spec_(spec), rng_(spec.seed) {}

  bool applies(const std::string& name) const {
    switch (spec_.which) {
      case fault_spec::files::all:
        return true;
      case fault_spec::files::blob:
        return ends_with(name, ".blob");
      case fault_spec::files::sst:
        return ends_with(name, ".sst");
      case fault_spec::files::wal:
        return ends_with(name, ".log");
    }
    return false;
  }

  // True when this call is to fail. A write under write_stall waits here
  // while the flag file exists, and then goes on.
  bool fail(fault_spec::kind k) {
    if (k == fault_spec::kind::write_eio && spec_.what == fault_spec::kind::write_stall) {
      stall_while_flagged();
      return false;
    }
    if (k != spec_.what) return false;
    std::lock_guard lock(mutex_);
    if (seen_ < spec_.after) {
      ++seen_;
      return false;
    }
    if (failed_ >= spec_.count) return false;
    if (spec_.probability < 1.0 && !std::bernoulli_distribution(spec_.probability)(rng_))
      return false;
    ++failed_;
    return true;
  }

 private:
  void stall_while_flagged() {
    if (::access(spec_.while_exists.c_str(), F_OK) != 0) return;
    // The test waits for this line to know a commit is held.
    log_warning("fault injection: a write waits while " + spec_.while_exists + " exists");
    while (::access(spec_.while_exists.c_str(), F_OK) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  const fault_spec spec_;
  std::mutex mutex_;
  std::mt19937_64 rng_;
  std::uint64_t seen_ = 0;
  std::uint64_t failed_ = 0;
};

rocksdb::IOStatus injected(const char* what) {
  // Errno-carrying text, so the store's errno mapping sees EIO as for a
  // real disk error.
  return rocksdb::IOStatus::IOError(std::string("injected fault: ") + what, "Input/output error");
}

class faulty_random_access : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  faulty_random_access(std::unique_ptr<rocksdb::FSRandomAccessFile> f, fault_state& s)
      : FSRandomAccessFileOwnerWrapper(std::move(f)), state_(s) {}

  rocksdb::IOStatus Read(std::uint64_t offset, std::size_t n, const rocksdb::IOOptions& o,
                         rocksdb::Slice* result, char* scratch,
                         rocksdb::IODebugContext* dbg) const override {
    if (state_.fail(fault_spec::kind::read_eio)) return injected("read");
    return target()->Read(offset, n, o, result, scratch, dbg);
  }
  rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, std::size_t n,
                              const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    // Each request on its own, so each can fail on its own.
    for (std::size_t i = 0; i < n; ++i)
      reqs[i].status = Read(reqs[i].offset, reqs[i].len, o, &reqs[i].result, reqs[i].scratch, dbg);
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus ReadAsync(rocksdb::FSReadRequest&, const rocksdb::IOOptions&,
                              std::function<void(const rocksdb::FSReadRequest&, void*)>, void*,
                              void**, rocksdb::IOHandleDeleter*,
                              rocksdb::IODebugContext*) override {
    // RocksDB falls back to a synchronous Read, which can fail.
    return rocksdb::IOStatus::NotSupported("async reads under fault injection");
  }

 private:
  fault_state& state_;
};

class faulty_sequential : public rocksdb::FSSequentialFileOwnerWrapper {
 public:
  faulty_sequential(std::unique_ptr<rocksdb::FSSequentialFile> f, fault_state& s)
      : FSSequentialFileOwnerWrapper(std::move(f)), state_(s) {}

  rocksdb::IOStatus Read(std::size_t n, const rocksdb::IOOptions& o, rocksdb::Slice* result,
                         char* scratch, rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::read_eio)) return injected("read");
    return target()->Read(n, o, result, scratch, dbg);
  }
  rocksdb::IOStatus PositionedRead(std::uint64_t offset, std::size_t n, const rocksdb::IOOptions& o,
                                   rocksdb::Slice* result, char* scratch,
                                   rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::read_eio)) return injected("read");
    return target()->PositionedRead(offset, n, o, result, scratch, dbg);
  }

 private:
  fault_state& state_;
};

class faulty_writable : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  faulty_writable(std::unique_ptr<rocksdb::FSWritableFile> f, fault_state& s)
      : FSWritableFileOwnerWrapper(std::move(f)), state_(s) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::write_eio)) return injected("write");
    return target()->Append(data, o, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::write_eio)) return injected("write");
    return target()->Append(data, o, info, dbg);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, std::uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::write_eio)) return injected("write");
    return target()->PositionedAppend(data, offset, o, dbg);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, std::uint64_t offset,
                                     const rocksdb::IOOptions& o,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::write_eio)) return injected("write");
    return target()->PositionedAppend(data, offset, o, info, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::write_eio)) return injected("sync");
    return target()->Sync(o, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (state_.fail(fault_spec::kind::write_eio)) return injected("sync");
    return target()->Fsync(o, dbg);
  }

 private:
  fault_state& state_;
};

class faulty_file_system : public rocksdb::FileSystemWrapper {
 public:
  explicit faulty_file_system(const fault_spec& spec)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), state_(spec) {}

  const char* Name() const override { return "densefs_fault_injection"; }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& o,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewRandomAccessFile(f, o, r, dbg);
    if (s.ok() && state_.applies(f))
      *r = std::make_unique<faulty_random_access>(std::move(*r), state_);
    return s;
  }
  rocksdb::IOStatus NewSequentialFile(const std::string& f, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewSequentialFile(f, o, r, dbg);
    if (s.ok() && state_.applies(f))
      *r = std::make_unique<faulty_sequential>(std::move(*r), state_);
    return s;
  }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, r, dbg);
    if (s.ok() && state_.applies(f)) *r = std::make_unique<faulty_writable>(std::move(*r), state_);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->ReopenWritableFile(f, o, r, dbg);
    if (s.ok() && state_.applies(f)) *r = std::make_unique<faulty_writable>(std::move(*r), state_);
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->ReuseWritableFile(f, old, o, r, dbg);
    if (s.ok() && state_.applies(f)) *r = std::make_unique<faulty_writable>(std::move(*r), state_);
    return s;
  }

 private:
  fault_state state_;
};

}  // namespace

fault_spec parse_fault_spec(std::string_view text) {
  fault_spec spec;
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const auto colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  const std::string_view kind = parts[0];
  if (kind == "read_eio") {
    spec.what = fault_spec::kind::read_eio;
  } else if (kind == "write_eio") {
    spec.what = fault_spec::kind::write_eio;
  } else if (kind == "write_stall") {
    spec.what = fault_spec::kind::write_stall;
  } else {
    bad_spec(text,
             "unknown fault \"" + std::string(kind) + "\" (read_eio, write_eio, write_stall)");
  }
  std::set<std::string_view> seen;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    const auto eq = part.find('=');
    if (eq == std::string_view::npos)
      bad_spec(text, "\"" + std::string(part) + "\" is not key=value");
    const std::string_view key = part.substr(0, eq);
    const std::string_view value = part.substr(eq + 1);
    if (!seen.insert(key).second) bad_spec(text, std::string(key) + " given twice");
    if (key == "after") {
      spec.after = parse_u64(text, key, value);
    } else if (key == "count") {
      spec.count = parse_u64(text, key, value);
    } else if (key == "seed") {
      spec.seed = parse_u64(text, key, value);
    } else if (key == "p") {
      const std::string v(value);
      char* end = nullptr;
      errno = 0;
      spec.probability = std::strtod(v.c_str(), &end);
      if (v.empty() || errno != 0 || end != v.c_str() + v.size() || !(spec.probability > 0.0) ||
          spec.probability > 1.0)
        bad_spec(text, "p=" + v + " is not a probability in (0, 1]");
    } else if (key == "files") {
      if (value == "all") {
        spec.which = fault_spec::files::all;
      } else if (value == "blob") {
        spec.which = fault_spec::files::blob;
      } else if (value == "sst") {
        spec.which = fault_spec::files::sst;
      } else if (value == "wal") {
        spec.which = fault_spec::files::wal;
      } else {
        bad_spec(text, "files=" + std::string(value) + " is not one of all, blob, sst, wal");
      }
    } else if (key == "while") {
      if (value.empty() || value[0] != '/') bad_spec(text, "while= needs an absolute path");
      spec.while_exists = value;
    } else {
      bad_spec(text,
               "unknown key \"" + std::string(key) + "\" (after, count, p, seed, files, while)");
    }
  }
  if ((spec.what == fault_spec::kind::write_stall) != !spec.while_exists.empty())
    bad_spec(text, "write_stall takes while=FLAG_FILE, and only it does");
  return spec;
}

rocksdb::Env* fault_injection_env() {
  static std::once_flag once;
  static std::unique_ptr<rocksdb::Env> env;
  static std::string error;
  std::call_once(once, [] {
    const char* text = std::getenv("DENSEFS_FAULT_INJECTION");
    if (text == nullptr || *text == '\0') return;
    try {
      const fault_spec spec = parse_fault_spec(text);
      env = rocksdb::NewCompositeEnv(std::make_shared<faulty_file_system>(spec));
      log_warning(std::string("store: fault injection on (test only): DENSEFS_FAULT_INJECTION=") +
                  text);
    } catch (const store_error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw store_error(EINVAL, error);
  return env.get();
}

}  // namespace densefs::store
