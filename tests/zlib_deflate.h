// Deflate data made with zlib, for the tests of the deflate codec (unit and
// mount): the real encoder whose output the codec must rebuild exactly.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <string_view>

namespace densefs::test {

// window_bits as deflateInit2 takes them: 15 + 16 for a gzip member, -15
// for raw deflate data (as zip entries hold it). `header` sets gzip fields.
inline std::string zlib_deflate(std::string_view plain, int level, int window_bits,
                                gz_header* header = nullptr) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  if (header) {
    EXPECT_EQ(deflateSetHeader(&z, header), Z_OK);
  }
  std::string out(deflateBound(&z, plain.size()) + 1024, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline std::string gzip_with_zlib(std::string_view plain, int level = 9,
                                  gz_header* header = nullptr) {
  return zlib_deflate(plain, level, 15 + 16, header);
}

}  // namespace densefs::test
