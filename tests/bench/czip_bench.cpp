// Helper for tests/bench/czip_bench.sh: the czip writer's front end alone,
// content-defined chunking plus SHA-256 of every chunk, one thread, over a
// file fed in 1 MiB pieces as `densefs czip pack` reads its input.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "codec/chunker.h"
#include "codec/czip_crypto.h"

// Written so the hashing is not optimised away.
volatile unsigned char g_sink = 0;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: czip_bench FILE ROUNDS\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int rounds = std::stoi(argv[2]);
  using densefs::codec::cdc_chunker;
  double best_chunk = 1e9, best_both = 1e9;
  std::size_t chunks = 0;
  for (int r = 0; r < rounds; ++r) {
    for (const bool hash : {false, true}) {
      const auto start = std::chrono::steady_clock::now();
      cdc_chunker chunker{densefs::codec::cdc_options{}};
      std::size_t chunk_start = 0, at = 0, n = 0;
      const auto cut = [&](std::size_t end) {
        if (hash) {
          const std::string_view chunk(data.data() + chunk_start, end - chunk_start);
          g_sink = g_sink ^ densefs::codec::czip::sha256_of(chunk)[0];
        }
        chunk_start = end;
        ++n;
      };
      while (at < data.size()) {
        std::string_view piece(data.data() + at, std::min<std::size_t>(1 << 20, data.size() - at));
        at += piece.size();
        while (auto k = chunker.feed(piece)) {
          cut(static_cast<std::size_t>(piece.data() - data.data()) + *k);
          piece.remove_prefix(*k);
        }
      }
      if (chunker.finish()) cut(data.size());
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (hash ? best_both : best_chunk) = std::min(hash ? best_both : best_chunk, s);
      chunks = n;
    }
  }
  const double gb = static_cast<double>(data.size()) / 1e9;
  std::printf("input %zu bytes, %zu chunks (mean %zu)\n", data.size(), chunks,
              chunks ? data.size() / chunks : 0);
  std::printf("chunking (cdc default), one thread:          %.2f GB/s\n", gb / best_chunk);
  std::printf("chunking + SHA-256 per chunk, one thread:    %.2f GB/s\n", gb / best_both);
  return 0;
}
