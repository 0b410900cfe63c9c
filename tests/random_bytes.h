// Test data, the same for the same seed: incompressible bytes and
// compressible text. Shared by the unit tests of every folder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>

namespace densefs::test {

inline std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, n - i));
  }
  return out;
}

// One std::mt19937 draw per byte (its low 8 bits): slower than random_bytes,
// but the data the codec and analyze tests were written and measured on.
inline std::string random_bytes_mt19937(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// splitmix64 bytes: fixed across platforms and standard libraries (unlike
// std::uniform_int_distribution), so golden values computed from them (cut
// points, container bytes) stay valid.
inline std::string splitmix_bytes(std::size_t n, std::uint64_t seed) {
  std::string d(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t z = (seed += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
    std::memcpy(&d[i], &z, std::min<std::size_t>(8, n - i));
  }
  return d;
}

// Text-like data that compresses well: `words` (each with its own
// separator) drawn by std::mt19937(seed), cut to n bytes. Each test keeps
// its own vocabulary, so its data stays what its sizes were measured on.
inline std::string word_text(std::size_t n, std::uint32_t seed,
                             std::span<const char* const> words) {
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(n + 16);
  while (s.size() < n) s += words[rng() % words.size()];
  s.resize(n);
  return s;
}

}  // namespace densefs::test
