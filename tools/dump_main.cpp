// densefs dump STORE|URI FILE [--json]: every record of a volume (mounted
// or not) to one versioned, checksummed file; densefs load FILE STORE
// [--meta ...] [--data ...]: a new volume from such a file, against the
// volume's packs; densefs migrate SOURCE STORE [--meta ...] [--data ...]:
// a volume copied to another home (embedded <-> PostgreSQL + S3), its
// records and the packs they name, no file read through a mount.
// store/dump/dump.h; docs/backup.md.
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <streambuf>

#include "store/dump/dump.h"
#include "store/error.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/format.h"

namespace densefs::tools {
namespace {

using nlohmann::json;

// An ostream onto an output_file (its temporary file until commit()).
class output_file_buf final : public std::streambuf {
 public:
  explicit output_file_buf(output_file& file) : file_(file) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    file_.write(std::string_view(s, static_cast<std::size_t>(n)));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      const char ch = traits_type::to_char_type(c);
      file_.write(std::string_view(&ch, 1));
    }
    return traits_type::not_eof(c);
  }

 private:
  output_file& file_;
};

// The progress line on a terminal, at most five times a second.
class progress_line {
 public:
  progress_line(const tool_io& io, bool wanted, std::string command)
      : io_(io), wanted_(wanted), command_(std::move(command)) {}
  ~progress_line() {
    if (shown_) io_.err << "\n";
  }
  store::dump_progress_fn fn() {
    if (!wanted_) return {};
    return [this](const store::dump_progress& p) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_ < std::chrono::milliseconds(200)) return;
      last_ = now;
      shown_ = true;
      io_.err << "\r" << command_ << ": " << p.records << " records";
      if (p.bytes > 0)
        io_.err << ", " << human_size(p.bytes) << (p.phase == "packs" ? " of packs" : "");
      io_.err << "          " << std::flush;
    };
  }

 private:
  const tool_io& io_;
  bool wanted_;
  std::string command_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --meta and --data as mkfs takes them.
void add_target_options(CLI::App& app, std::string& meta, std::string& data) {
  app.add_option("--meta", meta,
                 "keep the records in this PostgreSQL database (an empty one; URI or connection "
                 "string without a password) instead of an embedded database in STORE");
  app.add_option("--data", data,
                 "with --meta: keep the packs in this S3 location "
                 "(s3://BUCKET[/PREFIX]?endpoint=URL); STORE then holds this machine's cache");
}

json load_json(const std::filesystem::path& dir, const store::load_result& r, double seconds) {
  return json{{"store", dir.string()}, {"uuid", r.uuid},   {"format_version", r.format_version},
              {"records", r.records},  {"packs", r.packs}, {"pack_bytes", r.pack_bytes},
              {"seconds", seconds}};
}

}  // namespace

int dump_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Write every record of a volume (names, inodes, xattrs and ACLs, extents, chunk "
      "references, small payloads) to FILE: one versioned, checksummed stream read from one "
      "state of the volume, mounted or not. The pack files are not in it; `densefs load` "
      "rebuilds the records against them.",
      "densefs dump"};
  std::string source;
  std::string file;
  bool as_json = false;
  app.add_option("STORE", source, "a store directory or a volume's postgresql:// URI")->required();
  app.add_option("FILE", file, "the dump to write (- for standard output); made private (0600)")
      ->required();
  app.add_flag("--json", as_json, "print the summary as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;
  const std::filesystem::path dir =
      is_volume_uri(source) ? store_path(source) : absolute_path(source);
  if (file == "-" && as_json)
    throw usage_error("--json prints to standard output: give FILE a path");

  const auto start = std::chrono::steady_clock::now();
  store::dump_totals totals;
  {
    progress_line progress(io, !as_json && file != "-" && progress_wanted(io), "dump");
    output_file out(file, io, 0600);
    output_file_buf buf(out);
    std::ostream stream(&buf);
    stream.exceptions(std::ios::badbit);
    totals = store::dump_volume(dir, stream, file == "-" ? "standard output" : file, progress.fn());
    out.commit();
  }
  if (file == "-") return k_exit_ok;
  std::uint64_t records = 0;
  json per_table = json::object();
  for (std::size_t i = 0; i < store::k_table_count; ++i) {
    records += totals.records[i];
    per_table[store::table_name(static_cast<store::table>(i))] = totals.records[i];
  }
  if (as_json) {
    io.out << json{{"store", dir.string()}, {"file", file},
                   {"records", records},    {"tables", per_table},
                   {"bytes", totals.bytes}, {"seconds", seconds_since(start)}}
                  .dump(2)
           << '\n';
  } else {
    io.out << "dumped " << records << " records of " << dir.string() << " to " << file << " ("
           << human_size(totals.bytes) << ")\n"
           << "load it with: densefs load " << file << " NEW_STORE\n";
  }
  return k_exit_ok;
}

int load_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Make a new volume in STORE from a dump (`densefs dump`): its records in an embedded "
      "database, or in PostgreSQL with --meta, against the volume's packs, which must be in "
      "STORE/packs (or the --data location) already. The new volume has a UUID of its own.",
      "densefs load"};
  std::string file;
  std::string dir_text;
  std::string meta;
  std::string data;
  bool as_json = false;
  app.add_option("FILE", file, "the dump (- for standard input)")->required();
  app.add_option("STORE", dir_text,
                 "a new or empty directory (or one holding only the volume's packs/)")
      ->required();
  add_target_options(app, meta, data);
  bool take_over = false;
  app.add_flag("--take-over-packs", take_over,
               "with --data: the location holds this dump's volume's packs and that volume is "
               "gone for good (its database lost); the new volume takes them over. Never while "
               "the old volume may be mounted again: two volumes on one set of packs overwrite "
               "and collect each other's");
  app.add_flag("--json", as_json, "print the summary as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (take_over && data.empty()) throw usage_error("--take-over-packs goes with --data");

  std::ifstream in_file;
  std::istream* in = &std::cin;
  if (file != "-") {
    in_file.open(file, std::ios::binary);
    if (!in_file)
      throw store::store_error(errno != 0 ? errno : ENOENT,
                               "cannot open " + file + ": " + std::strerror(errno));
    in = &in_file;
  }
  const std::filesystem::path dir = absolute_path(dir_text);
  const auto start = std::chrono::steady_clock::now();
  store::load_result result;
  {
    progress_line progress(io, !as_json && progress_wanted(io), "load");
    store::dump_reader reader(*in, file == "-" ? "standard input" : file);
    result = store::load_volume(reader, {dir, meta, data}, take_over, progress.fn());
  }
  if (as_json) {
    io.out << load_json(dir, result, seconds_since(start)).dump(2) << '\n';
  } else {
    io.out << "loaded " << result.records << " records into " << dir.string() << " (volume "
           << result.uuid << ", format " << result.format_version << ", " << result.packs
           << " pack files named, all present)\n"
           << "check it with: densefs fsck " << dir.string() << "\n";
  }
  return k_exit_ok;
}

int migrate_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Copy a volume that no writer has mounted to a new, empty home: an embedded store to "
      "PostgreSQL and "
      "S3 (--meta, --data) or back, without reading any file through a mount. Its records "
      "are copied as `densefs dump` and `densefs load` would, and the pack files they name "
      "from where SOURCE keeps them to where STORE keeps them. SOURCE is left as it was.",
      "densefs migrate"};
  std::string source;
  std::string dir_text;
  std::string meta;
  std::string data;
  bool as_json = false;
  app.add_option("SOURCE", source, "the volume: a store directory or postgresql:// URI")
      ->required();
  app.add_option("STORE", dir_text, "a new or empty directory for the copy")->required();
  add_target_options(app, meta, data);
  app.add_flag("--json", as_json, "print the summary as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;
  const std::filesystem::path from =
      is_volume_uri(source) ? store_path(source) : absolute_path(source);
  const std::filesystem::path dir = absolute_path(dir_text);
  if (from == dir) throw usage_error("SOURCE and STORE are the same directory");

  const auto start = std::chrono::steady_clock::now();
  store::load_result result;
  {
    progress_line progress(io, !as_json && progress_wanted(io), "migrate");
    result = store::migrate_volume(from, {dir, meta, data}, progress.fn());
  }
  if (as_json) {
    io.out << load_json(dir, result, seconds_since(start)).dump(2) << '\n';
  } else {
    io.out << "migrated " << from.string() << " to " << dir.string() << " (volume " << result.uuid
           << ", format " << result.format_version << ", " << result.records << " records, "
           << result.packs << " pack files, " << human_size(result.pack_bytes) << " copied)\n"
           << "check it with: densefs fsck " << dir.string() << "\n";
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
