// densefs czip pack|unpack|info|verify|cat: the CZIP single-file container
// (codec/czip.h; format in docs/format.md, usage in docs/czip.md).
//
// pack writes header mode to a file (the header rewritten at the end) and
// footer mode to standard output (the header as a trailer). Readers need
// random access: a czip on standard input that is not a regular file is
// first copied to an unlinked temporary file in $TMPDIR.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <system_error>

#include "codec/czip.h"
#include "codec/policy.h"
#include "fs/control_server.h"
#include "fs/mount.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/czip_densefs.h"

namespace densefs::tools {
namespace {

namespace czip = codec::czip;
using nlohmann::json;

// Pieces read from the input while packing: big enough for few syscalls,
// small next to a chunk.
constexpr std::size_t k_read_piece = std::size_t{1} << 20;
// A passphrase file holds one line; anything bigger is the wrong file.
constexpr std::size_t k_max_passphrase_file = 4096;
constexpr const char* k_passphrase_env = "DENSEFS_CZIP_PASSPHRASE";

std::string shown_name(const std::string& path) {
  return path == "-" ? "standard input" : path;
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// A czip to read: a file, or standard input (used in place when it is a
// regular file, spooled to an unlinked temporary file otherwise).
class czip_input : public czip::byte_source {
 public:
  explicit czip_input(const std::string& path) : name_(shown_name(path)) {
    if (path == "-") {
      struct stat st {};
      if (::fstat(STDIN_FILENO, &st) != 0) throw_errno(name_);
      if (S_ISREG(st.st_mode)) {
        fd_ = STDIN_FILENO;
        size_ = static_cast<std::uint64_t>(st.st_size);
      } else {
        spool_stdin();
      }
      return;
    }
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw_errno(path);
    owned_ = true;
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw_errno(path);
    if (!S_ISREG(st.st_mode)) {
      errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
      throw_errno(path + " (a czip must be a regular file or standard input)");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~czip_input() override {
    if (owned_) ::close(fd_);
  }
  czip_input(const czip_input&) = delete;
  czip_input& operator=(const czip_input&) = delete;

  std::uint64_t size() const override { return size_; }

  void read_at(std::uint64_t offset, char* out, std::size_t n) const override {
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw_errno(name_);
      }
      if (got == 0) throw std::runtime_error(name_ + ": file shrank while reading it");
      out += got;
      n -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
  }

  const std::string& name() const { return name_; }

 private:
  void spool_stdin() {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/densefs-czip-XXXXXX";
    fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
    if (fd_ < 0) throw_errno(pattern);
    owned_ = true;
    ::unlink(pattern.c_str());  // gone when closed, whatever happens
    input_file in("-");
    for (;;) {
      const std::string piece = in.read(k_read_piece);
      std::string_view rest = piece;
      while (!rest.empty()) {
        const ssize_t n = ::write(fd_, rest.data(), rest.size());
        if (n < 0) {
          if (errno == EINTR) continue;
          throw_errno("temporary copy of standard input in " + pattern);
        }
        rest.remove_prefix(static_cast<std::size_t>(n));
      }
      size_ += piece.size();
      if (piece.size() < k_read_piece) break;
    }
  }

  std::string name_;
  int fd_ = -1;
  bool owned_ = false;
  std::uint64_t size_ = 0;
};

class output_sink : public czip::byte_sink {
 public:
  explicit output_sink(output_file& out) : out_(out) {}
  void write(std::string_view bytes) override { out_.write(bytes); }
  bool seekable() const override { return out_.seekable(); }
  void write_at(std::uint64_t offset, std::string_view bytes) override {
    out_.write_at(offset, bytes);
  }

 private:
  output_file& out_;
};

// The passphrase: from --passphrase-file (one line; a trailing newline is
// not part of it), else from the environment. Never from the command line,
// where every user sees it in ps.
std::optional<std::string> find_passphrase(const std::string& file) {
  if (!file.empty()) {
    std::string text = input_file(file).read_all(k_max_passphrase_file);
    if (text.ends_with('\n')) text.pop_back();
    if (text.ends_with('\r')) text.pop_back();
    if (text.empty()) throw usage_error("passphrase file " + file + " is empty");
    return text;
  }
  if (const char* env = std::getenv(k_passphrase_env); env != nullptr && *env != '\0')
    return std::string(env);
  return std::nullopt;
}

// A progress line on a terminal, at most five times a second.
class progress_line {
 public:
  progress_line(const tool_io& io, const char* verb, bool wanted)
      : io_(io), verb_(verb), wanted_(wanted && progress_wanted(io)) {}
  ~progress_line() {
    if (shown_) io_.err << "\n";
  }
  czip::progress_fn callback() {
    if (!wanted_) return {};
    return [this](std::uint64_t done, std::uint64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_ < std::chrono::milliseconds(200)) return;
      last_ = now;
      shown_ = true;
      io_.err << "\rczip " << verb_ << ": " << (done >> 20) << " MiB";
      if (total > 0) io_.err << " of " << (total >> 20) << " MiB";
      io_.err << "          " << std::flush;
    };
  }

 private:
  const tool_io& io_;
  const char* verb_;
  bool wanted_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::string hex(const czip::sha256_digest& d) {
  return store::chunk_hash{d}.hex();
}

// Opens IN; an encrypted czip needs the passphrase unless `header_only`.
std::unique_ptr<czip::reader> open_reader(const czip_input& in,
                                          const std::optional<std::string>& passphrase,
                                          bool header_only) {
  czip::reader_options options;
  options.passphrase = passphrase;
  auto r = std::make_unique<czip::reader>(in, options);
  if (!header_only && !r->has_chunks())
    throw czip::czip_error(std::string("encrypted czip: give the passphrase (--passphrase-file F "
                                       "or ") +
                           k_passphrase_env + ")");
  return r;
}

void print_pack_summary(const czip::header& h, const densefs_pack_summary* from_densefs,
                        const std::string& out_path, const tool_io& io) {
  json j;
  j["original_size"] = h.original_size;
  j["czip_size"] = h.czip_size;
  j["chunks"] = h.chunk_count;
  j["unique_chunks"] = h.unique_chunk_count;
  if (from_densefs) {
    j["reused_chunks"] = from_densefs->reused_chunks;
    j["encoded_chunks"] = from_densefs->encoded_chunks;
  }
  (out_path == "-" ? io.err : io.out) << j.dump(2) << '\n';
}

// `cut_as_a_mount_would`: no --chunker was given, so the chunks are cut
// as a mount cuts a file of this type (the default policy's chunker for
// what codec::classify makes of the first bytes and the name;
// docs/policy.md), and a czip of a file shares its chunks' cuts with the
// file system.
int pack(const std::string& in_path, const std::string& out_path, czip::writer_options options,
         bool cut_as_a_mount_would, bool as_json, const tool_io& io) {
  input_file in(in_path);
  std::uint64_t total = 0;
  struct stat st {};
  if (in_path != "-" && ::stat(in_path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    total = static_cast<std::uint64_t>(st.st_size);
  std::string piece = in.read(k_read_piece);
  if (cut_as_a_mount_would) {
    const std::string name =
        in_path == "-" ? std::string() : std::filesystem::path(in_path).filename().string();
    options.chunker = codec::default_policy().chunker_for(codec::classify(piece, name));
  }
  output_file out(out_path, io);
  output_sink sink(out);
  czip::writer w(sink, options);
  progress_line progress(io, "pack", true);
  const auto report = progress.callback();
  std::uint64_t done = 0;
  for (bool first = true;; first = false) {
    if (!first) piece = in.read(k_read_piece);
    w.write(piece);
    done += piece.size();
    if (report) report(done, total);
    if (piece.size() < k_read_piece) break;
  }
  const czip::header h = w.finish();
  out.commit();
  if (as_json) print_pack_summary(h, nullptr, out_path, io);
  return k_exit_ok;
}

// Where pack reads from: a byte stream, or a file stored in densefs whose
// extents become the chunks.
struct pack_source {
  std::string store_dir;                  // --store: PATH is inside this store
  std::optional<std::string> mount_info;  // PATH is on a live mount (its info xattr)
  bool keep_codecs = false;               // --codec keep
  bool from_densefs() const { return !store_dir.empty() || mount_info.has_value(); }
};

int pack_densefs(const std::string& in_path, const std::string& out_path,
                 const czip::writer_options& options, const pack_source& source, bool as_json,
                 const tool_io& io) {
  densefs_reuse reuse;
  if (!source.keep_codecs) reuse.codec = options.codec.preferred;
  output_file out(out_path, io);
  output_sink sink(out);
  czip::writer w(sink, options);
  const densefs_pack_summary sum = source.store_dir.empty()
                                       ? pack_from_mount(in_path, *source.mount_info, reuse, w)
                                       : pack_from_store(source.store_dir, in_path, reuse, w);
  const czip::header h = w.finish();
  out.commit();
  if (as_json) {
    print_pack_summary(h, &sum, out_path, io);
  } else {
    (out_path == "-" ? io.err : io.out)
        << shown_name(in_path) << ": " << h.original_size << " bytes to " << h.czip_size << ", "
        << h.chunk_count << " chunks: " << sum.reused_chunks << " reused as stored, "
        << sum.encoded_chunks << " encoded\n";
  }
  return k_exit_ok;
}

int unpack(const std::string& in_path, const std::string& out_path,
           const std::optional<std::string>& passphrase, const tool_io& io) {
  const czip_input in(in_path);
  const auto r = open_reader(in, passphrase, false);
  output_file out(out_path, io);
  progress_line progress(io, "unpack", true);
  r->unpack([&](std::string_view bytes) { out.write(bytes); }, progress.callback());
  out.commit();
  return k_exit_ok;
}

json info_json(const czip::reader& r) {
  const czip::header& h = r.info();
  json j;
  j["version"] = czip::k_version;
  j["layout"] = h.footer ? "footer" : "header";
  j["original_size"] = h.original_size;
  j["czip_size"] = h.czip_size;
  j["chunks"] = h.chunk_count;
  j["unique_chunks"] = h.unique_chunk_count;
  j["payload_size"] = h.payload_size;
  j["chunker"] = czip::chunker_name(h.chunker);
  j["codec"] = codec::codec_name(h.codec);
  j["encryption"] = h.encrypted() ? "convergent-aes256gcm-scrypt" : "none";
  if (h.encrypted()) {
    j["scrypt"] = {{"log2_n", h.scrypt.log2_n}, {"r", h.scrypt.r}, {"p", h.scrypt.p}};
  }
  if (const auto original = r.original_hash()) j["original_sha256"] = hex(*original);
  j["czip_sha256"] = hex(h.czip_hash);
  if (r.has_chunks()) {
    json codecs = json::object();
    for (const auto& e : r.chunks()) {
      const std::string name = codec::codec_name(e.codec);
      codecs[name] = codecs.value(name, 0) + 1;
    }
    j["chunk_codecs"] = codecs;
  }
  return j;
}

int info(const std::string& in_path, bool as_json, const std::optional<std::string>& passphrase,
         const tool_io& io) {
  const czip_input in(in_path);
  const auto r = open_reader(in, passphrase, true);
  const json j = info_json(*r);
  if (as_json) {
    io.out << j.dump(2) << '\n';
    return k_exit_ok;
  }
  const czip::header& h = r->info();
  const double ratio =
      h.czip_size == 0 ? 0.0
                       : static_cast<double>(h.original_size) / static_cast<double>(h.czip_size);
  char ratio_text[32];
  std::snprintf(ratio_text, sizeof ratio_text, "%.2f", ratio);
  io.out << in.name() << ": CZIP version " << czip::k_version << ", "
         << (h.footer ? "footer" : "header") << " mode\n"
         << "  original size    " << h.original_size << " bytes\n"
         << "  czip size        " << h.czip_size << " bytes (ratio " << ratio_text << ")\n"
         << "  chunks           " << h.chunk_count << " (" << h.unique_chunk_count
         << " unique), chunker " << czip::chunker_name(h.chunker) << "\n"
         << "  codec            " << codec::codec_name(h.codec);
  if (j.contains("chunk_codecs")) {
    io.out << " (";
    bool first = true;
    for (const auto& [name, count] : j["chunk_codecs"].items()) {
      io.out << (first ? "" : ", ") << name << " " << count.get<std::uint64_t>();
      first = false;
    }
    io.out << ")";
  }
  io.out << "\n  encryption       ";
  if (h.encrypted()) {
    io.out << "convergent AES-256-GCM, chunk array sealed with scrypt (N=2^" << int{h.scrypt.log2_n}
           << ", r=" << int{h.scrypt.r} << ", p=" << int{h.scrypt.p} << ")\n";
  } else {
    io.out << "none\n";
  }
  io.out << "  original sha256  "
         << (r->original_hash() ? hex(*r->original_hash()) : "(sealed: needs the passphrase)")
         << "\n  czip sha256      " << hex(h.czip_hash) << "\n";
  return k_exit_ok;
}

int verify(const std::string& in_path, bool as_json, const std::optional<std::string>& passphrase,
           const tool_io& io) {
  const czip_input in(in_path);
  const auto r = open_reader(in, passphrase, true);
  progress_line progress(io, "verify", !as_json);
  const czip::verify_report report = r->verify(progress.callback());
  if (as_json) {
    json j;
    j["ok"] = report.ok();
    j["content_checked"] = report.content_checked;
    j["chunks_checked"] = report.chunks_checked;
    j["bytes_checked"] = report.bytes_checked;
    j["error_count"] = report.error_count;
    j["errors"] = report.errors;
    io.out << j.dump(2) << '\n';
  } else {
    for (const auto& e : report.errors) io.out << in.name() << ": " << e << '\n';
    if (report.error_count > report.errors.size())
      io.out << in.name() << ": ... and " << report.error_count - report.errors.size()
             << " more errors\n";
    if (report.ok()) {
      io.out << in.name() << ": ok, " << report.chunks_checked << " chunks, "
             << report.bytes_checked << " bytes checked";
      if (!report.content_checked)
        io.out << " (encrypted: only the file hash was checked; give the passphrase to check "
                  "the chunks)";
      io.out << '\n';
    } else {
      io.out << in.name() << ": " << report.error_count << " errors\n";
    }
  }
  return report.ok() ? k_exit_ok : k_exit_failure;
}

int cat(const std::string& in_path, std::uint64_t offset, std::optional<std::uint64_t> length,
        const std::string& out_path, const std::optional<std::string>& passphrase,
        const tool_io& io) {
  const czip_input in(in_path);
  const auto r = open_reader(in, passphrase, false);
  if (offset > r->info().original_size)
    throw usage_error("--offset " + std::to_string(offset) + " is past the end (" +
                      std::to_string(r->info().original_size) + " bytes)");
  output_file out(out_path, io);
  r->read(offset, length.value_or(r->info().original_size - offset),
          [&](std::string_view bytes) { out.write(bytes); });
  out.commit();
  return k_exit_ok;
}

}  // namespace

int czip_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "CZIP: one file packed into a single chunked, deduplicated, compressed and "
      "optionally encrypted container (docs/czip.md).",
      "densefs czip"};
  app.require_subcommand(1);
  std::string in_path, out_path, passphrase_file, codec_spec = "zstd", chunker_spec = "cdc";
  bool encrypt = false, as_json = false;
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> length;
  const auto add_passphrase = [&](CLI::App* c) {
    c->add_option("--passphrase-file", passphrase_file,
                  "read the passphrase from this file (first line); default: $" +
                      std::string(k_passphrase_env));
  };

  auto* p = app.add_subcommand("pack", "pack IN into the czip OUT (- for stdin/stdout)");
  p->add_option("IN", in_path, "input file, - for standard input")->required();
  p->add_option("OUT", out_path,
                "czip to write, - for standard output (then the header is a trailer)")
      ->required();
  p->add_option("--codec", codec_spec,
                "codec spec for each chunk (default zstd, level 3); for a densefs file also "
                "keep: every stored encoding as it is");
  p->add_option(
      "--chunker", chunker_spec,
      "cdc[:min=8K:avg=32K:max=128K], fixed (4M) or fixed:size=SIZE (64 .. 4M); default: as a "
      "mount cuts the file's type");
  p->add_flag("--encrypt", encrypt,
              "encrypt (convergent per chunk; the chunk array sealed under the passphrase)");
  add_passphrase(p);
  std::string store_dir;
  p->add_option("--store", store_dir,
                "IN is a path inside this unmounted densefs store (/dir/file): its extents "
                "become the chunks");
  p->add_flag("--json", as_json,
              "print a summary as JSON: sizes, chunks, and for a densefs file reused_chunks and "
              "encoded_chunks (on standard error when OUT is -)");

  auto* u = app.add_subcommand("unpack", "unpack the czip IN into OUT (- for stdin/stdout)");
  u->add_option("IN", in_path, "czip file, - for standard input")->required();
  u->add_option("OUT", out_path, "output file, - for standard output")->required();
  add_passphrase(u);

  auto* i = app.add_subcommand("info", "show a czip's header: sizes, chunks, codec, encryption");
  i->add_option("IN", in_path, "czip file, - for standard input")->required();
  i->add_flag("--json", as_json, "print the information as JSON");
  add_passphrase(i);

  auto* v = app.add_subcommand(
      "verify", "check every chunk's hashes, the original's hash and the czip file's hash");
  v->add_option("IN", in_path, "czip file, - for standard input")->required();
  v->add_flag("--json", as_json, "print the report as JSON");
  add_passphrase(v);

  auto* c = app.add_subcommand("cat", "write a byte range of the original to standard output");
  c->add_option("IN", in_path, "czip file, - for standard input")->required();
  c->add_option("--offset", offset, "first byte (default 0)");
  c->add_option("--length", length, "number of bytes (default: to the end)");
  c->add_option("-o,--output", out_path, "write here instead of standard output");
  add_passphrase(c);

  if (auto done = parse_cli(app, args, io)) return *done;

  // Errors about the czip being read name it; pack's name its input.
  std::string subject = shown_name(in_path);
  try {
    const std::optional<std::string> passphrase = find_passphrase(passphrase_file);
    if (p->parsed()) {
      czip::writer_options options;
      pack_source source;
      source.store_dir = store_dir;
      // A file on a densefs mount is packed by its extents unless a chunker
      // is asked for: then it is read like any file.
      if (store_dir.empty() && in_path != "-" && p->get_option("--chunker")->count() == 0)
        source.mount_info = read_xattr(in_path, fs::k_xattr_info);
      source.keep_codecs = codec_spec == "keep";
      if (source.keep_codecs && !source.from_densefs())
        throw usage_error("--codec keep is for a file stored in densefs (on a mount, or --store)");
      if (!store_dir.empty() && p->get_option("--chunker")->count() > 0)
        throw usage_error("--chunker does not apply to --store: the chunks are the file's extents");
      try {
        if (!source.keep_codecs) options.codec = codec::parse_codec_spec(codec_spec);
        options.chunker = codec::parse_chunker_spec(chunker_spec);
      } catch (const codec::codec_error& e) {
        throw usage_error(e.what());
      }
      if (encrypt || !passphrase_file.empty()) {
        if (!passphrase)
          throw usage_error(std::string("--encrypt needs a passphrase: --passphrase-file F or $") +
                            k_passphrase_env);
        options.passphrase = passphrase;
      }
      if (source.from_densefs())
        return pack_densefs(in_path, out_path, options, source, as_json, io);
      return pack(in_path, out_path, options, p->get_option("--chunker")->count() == 0, as_json,
                  io);
    }
    if (u->parsed()) return unpack(in_path, out_path, passphrase, io);
    if (i->parsed()) return info(in_path, as_json, passphrase, io);
    if (v->parsed()) return verify(in_path, as_json, passphrase, io);
    return cat(in_path, offset, length, out_path.empty() ? "-" : out_path, passphrase, io);
  } catch (const usage_error& e) {
    print_error(io, "czip", e.what());
    return k_exit_usage;
  } catch (const codec::codec_error& e) {
    print_error(io, "czip", subject + ": " + e.what());
  } catch (const std::system_error& e) {
    print_error(io, "czip", e.what());
  } catch (const store::store_error& e) {
    print_error(io, "czip", subject + ": " + e.what());
  } catch (const fs::control_error& e) {
    print_error(io, "czip", subject + ": " + e.what());
  } catch (const std::runtime_error& e) {
    print_error(io, "czip", e.what());
  }
  return k_exit_failure;
}

}  // namespace densefs::tools
