// Benchmark helper for tests/bench/cdc_bench.sh (not a test).
//   cdc_bench speed FILE ROUNDS
//     chunking throughput (cut_points, default options and avg 8K..128K) and
//     SHA-256 (OpenSSL) throughput over FILE, best of ROUNDS, one thread.
//   cdc_bench dedup V1 V2 CONFIG...
//     CONFIG is a chunker spec ("cdc:min=16K:avg=64K:max=256K") or
//     "fixed:SIZE" (e.g. fixed:4M). Per config: store V1, then V2, chunks
//     named by SHA-256; prints one row with the chunk counts, the new bytes
//     V2 needed, the duplication inside V1, and the zstd -3 ratio of all
//     unique chunks, each compressed on its own (as the store does).
#include <openssl/evp.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "codec/chunker.h"

using namespace densefs::codec;

namespace {

std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot read ") + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

using digest = std::array<unsigned char, 32>;

struct digest_hash {
  std::size_t operator()(const digest& d) const {
    std::size_t h;
    std::memcpy(&h, d.data(), sizeof h);
    return h;
  }
};

digest sha256(std::string_view data) {
  digest d{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("EVP_Digest failed");
  }
  return d;
}

// Chunk end offsets for a config: CDC, or a fixed grid for "fixed:SIZE".
std::vector<std::size_t> cuts_for(const std::string& config, std::string_view data) {
  if (config.starts_with("fixed:")) {
    const auto size = parse_cdc_spec("cdc:min=64:avg=128:max=" + config.substr(6)).max_size;
    std::vector<std::size_t> cuts;
    for (std::size_t end = size; end < data.size() + size; end += size) {
      cuts.push_back(std::min(end, data.size()));
    }
    return cuts;
  }
  return cut_points(data, parse_cdc_spec(config));
}

int speed(const char* file, int rounds) {
  const auto data = slurp(file);
  const double gb = static_cast<double>(data.size()) / 1e9;
  std::printf("%-34s %8s %10s\n", "(one thread, best of rounds)", "GB/s", "mean chunk");
  std::vector<std::string> configs = {format_cdc_spec(cdc_options{})};
  for (const std::size_t avg : {8, 16, 32, 64, 128}) {
    configs.push_back(format_cdc_spec({avg << 8, avg << 10, avg << 12}));
  }
  for (const auto& config : configs) {
    double best = 1e9;
    std::size_t chunks = 0;
    for (int r = 0; r < rounds; ++r) {
      const auto t = std::chrono::steady_clock::now();
      chunks = cut_points(data, parse_cdc_spec(config)).size();
      best = std::min(best, seconds_since(t));
    }
    std::printf("%-34s %8.2f %10.0f\n", config.c_str(), gb / best,
                static_cast<double>(data.size()) / static_cast<double>(chunks));
  }
  double best = 1e9;
  for (int r = 0; r < rounds; ++r) {
    const auto t = std::chrono::steady_clock::now();
    std::string_view rest = data;
    while (!rest.empty()) {  // in 64 KiB chunks, as the store would hash them
      sha256(rest.substr(0, 64 << 10));
      rest.remove_prefix(std::min<std::size_t>(rest.size(), 64 << 10));
    }
    best = std::min(best, seconds_since(t));
  }
  std::printf("%-34s %8.2f\n", "sha256 (OpenSSL, 64K pieces)", gb / best);
  return 0;
}

int dedup(const char* v1_path, const char* v2_path, const std::vector<std::string>& configs) {
  const auto v1 = slurp(v1_path);
  const auto v2 = slurp(v2_path);
  std::printf("v1 %zu bytes, v2 %zu bytes\n", v1.size(), v2.size());
  std::printf("%-32s %9s %9s %8s %8s %8s %7s %7s %9s %7s\n", "config", "chunks v2", "unique",
              "mean", "v1 dup%", "v2 new%", "zstd3", "meta%", "v1 total%", "total%");
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
  std::string out;
  for (const auto& config : configs) {
    std::unordered_set<digest, digest_hash> seen;
    std::size_t unique_plain = 0, unique_stored = 0;
    // Stores every chunk of `data` not seen yet; returns the plain bytes added.
    const auto store = [&](std::string_view data, std::size_t& chunks) {
      std::size_t added = 0, start = 0;
      const auto cuts = cuts_for(config, data);
      chunks = cuts.size();
      for (const auto end : cuts) {
        const auto chunk = data.substr(start, end - start);
        start = end;
        if (!seen.insert(sha256(chunk)).second) continue;
        added += chunk.size();
        out.resize(ZSTD_compressBound(chunk.size()));
        const auto n = ZSTD_compress2(cctx, out.data(), out.size(), chunk.data(), chunk.size());
        if (ZSTD_isError(n)) throw std::runtime_error(ZSTD_getErrorName(n));
        unique_plain += chunk.size();
        unique_stored += std::min(n, chunk.size());  // "not worth it" -> stored raw
      }
      return added;
    };
    std::size_t chunks1 = 0, chunks2 = 0;
    const auto added1 = store(v1, chunks1);
    const double stored1 =
        static_cast<double>(unique_stored) + 100.0 * static_cast<double>(seen.size() + chunks1);
    const auto added2 = store(v2, chunks2);
    // ~100 bytes of metadata per unique chunk (key, hash, codec, refcount,
    // location) plus one extent per chunk reference.
    const double meta = 100.0 * static_cast<double>(seen.size() + chunks1 + chunks2);
    const double both = static_cast<double>(v1.size() + v2.size());
    std::printf("%-32s %9zu %9zu %8.0f %8.2f %8.3f %7.3f %7.3f %9.2f %7.2f\n", config.c_str(),
                chunks2, seen.size(), static_cast<double>(v2.size()) / static_cast<double>(chunks2),
                100.0 * (1.0 - static_cast<double>(added1) / static_cast<double>(v1.size())),
                100.0 * static_cast<double>(added2) / static_cast<double>(v2.size()),
                static_cast<double>(unique_plain) / static_cast<double>(unique_stored),
                100.0 * meta / static_cast<double>(unique_stored),
                100.0 * stored1 / static_cast<double>(v1.size()),
                100.0 * (static_cast<double>(unique_stored) + meta) / both);
    std::fflush(stdout);
  }
  ZSTD_freeCCtx(cctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "speed" && argc == 4) return speed(argv[2], std::stoi(argv[3]));
    if (mode == "dedup" && argc >= 5) return dedup(argv[2], argv[3], {argv + 4, argv + argc});
    std::fprintf(stderr, "usage: cdc_bench speed FILE ROUNDS | cdc_bench dedup V1 V2 CONFIG...\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cdc_bench: %s\n", e.what());
    return 1;
  }
}
