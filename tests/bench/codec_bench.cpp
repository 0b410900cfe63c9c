// Benchmark helper for tests/bench/codec_bench.sh (not a test): densefs'
// codec API on the same inputs the script gives lepton_jpeg and brotli.
//   codec_bench lepton THREADS ROUNDS LIST_OUT FILE...
//     encode_chunk (encode + verify) and decode_chunk per JPEG; writes the
//     files Lepton took to LIST_OUT; prints "bytes encode_s decode_s" (CPU
//     seconds) of the best round over those files.
//   codec_bench broccoli FILE OUT.br
//     4 MiB chunks through encode_chunk at the default broccoli options,
//     concatenated with concat_broccoli into OUT.br; prints
//     "plain stored seconds_encode seconds_decode".
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codec/codec.h"

using namespace densefs::codec;

namespace {

std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// CPU seconds of this process, all threads: the machines are shared, so
// wall time would measure the neighbours (lepton_direct measures the same).
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int lepton(int argc, char** argv) {
  const unsigned threads = static_cast<unsigned>(std::stoul(argv[2]));
  const int rounds = std::stoi(argv[3]);
  set_lepton_threads(threads);
  codec_options o;
  o.preferred = codec_id::lepton;
  o.min_savings = 0;
  std::vector<std::pair<std::string, std::string>> files;  // path, bytes
  for (int i = 5; i < argc; ++i) files.emplace_back(argv[i], slurp(argv[i]));
  double best_enc = 1e300, best_dec = 1e300;
  std::size_t total = 0;
  std::vector<std::string> accepted;
  // Which files Lepton takes (the comparison covers only those).
  for (const auto& [path, plain] : files) {
    if (encode_chunk(plain, o).codec == codec_id::lepton) {
      accepted.push_back(path);
      total += plain.size();
    }
  }
  for (int r = 0; r < rounds; ++r) {
    std::vector<encoded_chunk> encoded;
    double t = cpu_now();
    for (const auto& [path, plain] : files) {
      if (std::find(accepted.begin(), accepted.end(), path) == accepted.end()) continue;
      encoded.push_back(encode_chunk(plain, o));
    }
    best_enc = std::min(best_enc, cpu_now() - t);
    t = cpu_now();
    std::size_t i = 0;
    for (const auto& [path, plain] : files) {
      if (std::find(accepted.begin(), accepted.end(), path) == accepted.end()) continue;
      const encoded_chunk& e = encoded[i++];
      if (e.codec != codec_id::lepton || decode_chunk(e.codec, e.bytes, plain.size()) != plain) {
        std::fprintf(stderr, "%s: not a lepton round trip\n", path.c_str());
        return 1;
      }
    }
    best_dec = std::min(best_dec, cpu_now() - t);
  }
  std::ofstream list(argv[4]);
  for (const auto& p : accepted) list << p << '\n';
  std::printf("%zu %.4f %.4f\n", total, best_enc, best_dec);
  return 0;
}

int broccoli(char** argv) {
  const std::string plain = slurp(argv[2]);
  const codec_options o = parse_codec_spec("broccoli");
  constexpr std::size_t k_chunk = 4u << 20;
  std::vector<std::string> stored;
  double t = now();
  for (std::size_t off = 0; off < plain.size(); off += k_chunk) {
    const std::string_view chunk = std::string_view(plain).substr(off, k_chunk);
    encoded_chunk e = encode_chunk(chunk, o);
    if (e.codec != codec_id::broccoli) {
      std::fprintf(stderr, "chunk at %zu stored as %s\n", off, codec_name(e.codec).c_str());
      return 1;
    }
    stored.push_back(std::move(e.bytes));
  }
  const double enc = now() - t;
  t = now();
  std::size_t stored_bytes = 0, off = 0;
  for (const auto& s : stored) {
    const std::size_t n = std::min(k_chunk, plain.size() - off);
    if (decode_chunk(codec_id::broccoli, s, n) != std::string_view(plain).substr(off, n)) {
      std::fprintf(stderr, "chunk at %zu: wrong bytes\n", off);
      return 1;
    }
    off += n;
    stored_bytes += s.size();
  }
  const double dec = now() - t;
  const std::string joined = concat_broccoli({stored.begin(), stored.end()});
  std::ofstream(argv[3], std::ios::binary).write(joined.data(), joined.size());
  std::printf("%zu %zu %.4f %.4f\n", plain.size(), stored_bytes, enc, dec);
  return 0;
}

// Small files, as rsync and cp -a write them: each file encoded whole,
// ROUNDS times, with the codec SPEC; prints "files bytes stored
// microseconds_per_file" (wall, one thread).
int small(int argc, char** argv) {
  const codec_options options = parse_codec_spec(argv[2]);
  const int rounds = std::stoi(argv[3]);
  std::vector<std::string> files;
  for (int i = 4; i < argc; ++i) files.push_back(slurp(argv[i]));
  std::size_t bytes = 0, stored = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (const auto& f : files) {
      const encoded_chunk e = encode_chunk(f, options);
      if (r == 0) {
        bytes += f.size();
        stored += e.bytes.size();
      }
    }
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      (static_cast<double>(rounds) * static_cast<double>(files.size()));
  std::printf("%zu %zu %zu %.1f\n", files.size(), bytes, stored, us);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "lepton" && argc >= 5) return lepton(argc, argv);
  if (mode == "broccoli" && argc == 4) return broccoli(argv);
  if (mode == "small" && argc >= 5) return small(argc, argv);
  std::fprintf(stderr,
               "usage: codec_bench lepton THREADS ROUNDS LIST_OUT FILE...\n"
               "       codec_bench broccoli FILE OUT.br\n"
               "       codec_bench small SPEC ROUNDS FILE...\n");
  return 2;
}
