// densefs codec compress|decompress|concat: the chunk codecs on whole files,
// for standalone use and tests. Outputs are each codec's own stream format:
// concatenated zstd frames (a zstd stream), one Brotli stream (Broccoli
// pieces joined; stock `brotli -d` decodes it), or one Lepton file.
#include <system_error>

#include "codec/codec.h"
#include "codec/stream.h"
#include "store/records.h"
#include "tools/cli.h"

namespace densefs::tools {
namespace {

// compress cuts its input into pieces of one chunk: the size the store
// encodes, so the codecs' per-call limits hold and memory stays bounded.
constexpr std::size_t k_piece_size = store::k_chunk_size;
// Lepton takes a whole JPEG in one piece; photos are well below this.
constexpr std::size_t k_max_lepton_input = 64u << 20;

codec::codec_id parse_codec(const std::string& name) {
  if (name == "zstd" || name == "broccoli" || name == "lepton") {
    if (auto id = codec::codec_from_name(name)) return *id;
    throw usage_error("codec '" + name + "' is not built into this densefs");
  }
  throw usage_error("--codec must be lepton, broccoli or zstd, not '" + name + "'");
}

int compress(codec::codec_id id, const codec::codec_options& options, const std::string& in_path,
             const std::string& out_path, const tool_io& io) {
  input_file in(in_path);
  output_file out(out_path, io);
  const std::string shown = in_path == "-" ? "standard input" : in_path;
  if (id == codec::codec_id::lepton) {
    const std::string jpeg = in.read_all(k_max_lepton_input);
    if (jpeg.size() < 2 || static_cast<unsigned char>(jpeg[0]) != 0xFF ||
        static_cast<unsigned char>(jpeg[1]) != 0xD8) {
      throw codec::codec_error(shown + " is not a JPEG (lepton takes JPEG files only)");
    }
    try {
      out.write(codec::encode_stream_piece(id, jpeg, options));
    } catch (const codec::codec_error& e) {
      throw codec::codec_error(shown + ": lepton cannot take this JPEG: " + e.what());
    }
    out.commit();
    return k_exit_ok;
  }
  std::vector<std::string> pieces;  // broccoli: joined at the end
  for (bool first = true;; first = false) {
    const std::string plain = in.read(k_piece_size);
    // An empty input still gets one (empty) stream.
    if (plain.empty() && !first) break;
    std::string encoded = codec::encode_stream_piece(id, plain, options);
    if (id == codec::codec_id::broccoli) {
      pieces.push_back(std::move(encoded));
    } else {
      out.write(encoded);  // zstd frames concatenate into a zstd stream
    }
    if (plain.size() < k_piece_size) break;
  }
  if (id == codec::codec_id::broccoli) {
    const std::vector<std::string_view> views(pieces.begin(), pieces.end());
    out.write(codec::concat_broccoli(views));
  }
  out.commit();
  return k_exit_ok;
}

int decompress(codec::codec_id id, std::uint64_t max_size, const std::string& in_path,
               const std::string& out_path, const tool_io& io) {
  input_file in(in_path);
  // A stream never decodes to less than itself by much; reading more than
  // max_size stored bytes is a mistake either way.
  const std::string stored = in.read_all(max_size + (64u << 20));
  const std::string shown = in_path == "-" ? "standard input" : in_path;
  std::string plain;
  try {
    plain = codec::decode_any_size(id, stored, max_size);
  } catch (const codec::codec_error& e) {
    throw codec::codec_error(shown + ": " + e.what());
  }
  output_file out(out_path, io);
  out.write(plain);
  out.commit();
  return k_exit_ok;
}

int concat(const std::string& out_path, const std::vector<std::string>& in_paths,
           std::uint64_t max_size, const tool_io& io) {
  std::vector<std::string> pieces;
  for (const auto& p : in_paths) pieces.push_back(input_file(p).read_all(std::size_t{1} << 34));
  const std::vector<std::string_view> views(pieces.begin(), pieces.end());
  std::string joined;
  try {
    joined = codec::concat_broccoli(views);
  } catch (const codec::codec_error& e) {
    throw codec::codec_error(std::string("cannot join: ") + e.what());
  }
  // concat_broccoli checks only the pieces' headers: decode the result, so
  // a file that is not a Broccoli stream never yields a corrupt OUT.
  try {
    (void)codec::decode_any_size(codec::codec_id::broccoli, joined, max_size);
  } catch (const codec::codec_error& e) {
    throw codec::codec_error(
        std::string("cannot join: the joined stream does not decode (is every IN made by "
                    "`densefs codec compress --codec broccoli`?): ") +
        e.what());
  }
  output_file out(out_path, io);
  out.write(joined);
  out.commit();
  return k_exit_ok;
}

}  // namespace

int codec_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Compress, decompress and join files with the densefs codecs.", "densefs codec"};
  app.require_subcommand(1);

  std::string codec_name, in_path, out_path;
  std::uint64_t max_size = std::uint64_t{1} << 30;
  std::optional<int> quality, window, level;
  auto* c = app.add_subcommand("compress", "compress IN into OUT (- for stdin/stdout)");
  c->add_option("--codec", codec_name, "lepton, broccoli or zstd")->required();
  c->add_option("--quality", quality, "broccoli: brotli quality 0..11 (default 5)");
  c->add_option("--window", window, "broccoli: log2 of the window 10..24 (default 22)");
  c->add_option("--level", level, "zstd: level (default 3)");
  c->add_option("IN", in_path, "input file, - for standard input")->required();
  c->add_option("OUT", out_path, "output file, - for standard output")->required();

  auto* d = app.add_subcommand("decompress", "decompress IN into OUT (- for stdin/stdout)");
  d->add_option("--codec", codec_name, "lepton, broccoli or zstd")->required();
  d->add_option("--max-size", max_size, "refuse outputs larger than this (bytes, default 1 GiB)");
  d->add_option("IN", in_path, "input file, - for standard input")->required();
  d->add_option("OUT", out_path, "output file, - for standard output")->required();

  std::vector<std::string> inputs;
  auto* j = app.add_subcommand("concat", "join broccoli files into one Brotli stream");
  j->add_option("OUT", out_path, "output file, - for standard output")->required();
  j->add_option("--max-size", max_size,
                "the joined stream is decoded to check it: refuse more than this (bytes, "
                "default 1 GiB)");
  j->add_option("IN", inputs, "files made by `densefs codec compress --codec broccoli`")
      ->required();

  if (auto done = parse_cli(app, args, io)) return *done;

  try {
    if (j->parsed()) return concat(out_path, inputs, max_size, io);
    const codec::codec_id id = parse_codec(codec_name);
    if (d->parsed()) return decompress(id, max_size, in_path, out_path, io);

    // Options are checked by the codec's own spec parser (ranges and all).
    std::string spec = codec_name;
    if ((quality || window) && id != codec::codec_id::broccoli)
      throw usage_error("--quality and --window are broccoli options");
    if (level && id != codec::codec_id::zstd) throw usage_error("--level is a zstd option");
    if (quality) spec += ":quality=" + std::to_string(*quality);
    if (window) spec += ":window=" + std::to_string(*window);
    if (level) spec += ":level=" + std::to_string(*level);
    codec::codec_options options;
    try {
      options = codec::parse_codec_spec(spec);
    } catch (const codec::codec_error& e) {
      throw usage_error(e.what());
    }
    return compress(id, options, in_path, out_path, io);
  } catch (const usage_error& e) {
    print_error(io, "codec", e.what());
    return k_exit_usage;
  } catch (const std::system_error& e) {
    print_error(io, "codec", e.what());
  } catch (const codec::codec_error& e) {
    print_error(io, "codec", e.what());
  }
  return k_exit_failure;
}

}  // namespace densefs::tools
