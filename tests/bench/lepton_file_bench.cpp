// Benchmark helper (tests/bench/lepton_file_bench.sh): JPEGs in 4 MiB chunks
// stored per chunk as today (encode_chunk with the lepton policy: Lepton on
// a chunk it takes, the fallback elsewhere) against one Lepton file per JPEG
// (codec/lepton_file.h: the file payload plus a member payload per later
// chunk). Also times one decode of each Lepton file (what a cold read of any
// chunk of that JPEG costs) in CPU seconds.
// Usage: lepton_file_bench FILE...
// Prints one line per file, then a TOTAL line:
//   name plain per_chunk lepton_file lepton_only decode_cpu_s
// (lepton_only: lepton_jpeg's output, or the plain size where it refuses
// the JPEG; decode_cpu_s: 0 for a JPEG of one chunk, which is not timed)
#include <openssl/sha.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/lepton_file.h"

namespace {

constexpr std::uint32_t k_chunk = 4u << 20;

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

std::string sha256(std::string_view s) {
  unsigned char h[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), h);
  return std::string(reinterpret_cast<const char*>(h), sizeof h);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace densefs::codec;
  std::uint64_t t_plain = 0, t_chunk = 0, t_file = 0, t_lep = 0;
  double t_dec = 0;
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a], std::ios::binary);
    const std::string jpeg{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in || jpeg.empty()) {
      std::fprintf(stderr, "%s: cannot read it, or it is empty\n", argv[a]);
      return 1;
    }

    codec_options lepton;
    lepton.preferred = codec_id::lepton;
    std::uint64_t per_chunk = 0;
    std::vector<std::string> names;
    for (std::size_t at = 0; at < jpeg.size(); at += k_chunk) {
      const std::string_view c = std::string_view(jpeg).substr(at, k_chunk);
      per_chunk += encode_chunk(c, lepton).bytes.size();
      names.push_back(sha256(c));
    }

    // What the store would hold with Lepton files: the file payload and its
    // members, or the per-chunk encoding when Lepton refuses the file. A
    // JPEG of one chunk keeps codec lepton (no header, no names).
    std::uint64_t as_file = per_chunk;
    std::uint64_t lepton_only = jpeg.size();  // lepton_jpeg alone; a refused file stays whole
    double dec = 0;
    if (names.size() == 1) {
      const encoded_chunk e = encode_chunk(jpeg, lepton);
      if (e.codec == codec_id::lepton) lepton_only = e.bytes.size();
    } else if (jpeg.size() <= k_lepton_file_max_bytes) {
      const lepton_file_encoding e = encode_lepton_file(jpeg, k_chunk, names, 0.03);
      if (e.payload) {
        const lepton_file_view v = parse_lepton_file(*e.payload);
        as_file = e.payload->size();
        for (std::uint32_t i = 1; i < names.size(); ++i)
          as_file += encode_lepton_member({names[0], i, v.chunk_plain_size(i)}).size();
        lepton_only = v.lepton.size();
        const double t0 = cpu_seconds();
        const std::string back = decode_lepton_file(v);
        dec = cpu_seconds() - t0;
        if (back != jpeg) {
          std::fprintf(stderr, "%s: decoded to other bytes\n", argv[a]);
          return 1;
        }
      }
    }
    std::printf("%s %zu %llu %llu %llu %.3f\n", argv[a], jpeg.size(),
                static_cast<unsigned long long>(per_chunk),
                static_cast<unsigned long long>(as_file),
                static_cast<unsigned long long>(lepton_only), dec);
    t_plain += jpeg.size();
    t_chunk += per_chunk;
    t_file += as_file;
    t_lep += lepton_only;
    t_dec += dec;
  }
  std::printf("TOTAL %llu %llu %llu %llu %.3f\n", static_cast<unsigned long long>(t_plain),
              static_cast<unsigned long long>(t_chunk), static_cast<unsigned long long>(t_file),
              static_cast<unsigned long long>(t_lep), t_dec);
  return 0;
}
