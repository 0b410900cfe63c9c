// Private to codec/: owns a densefs_rs_result from the Rust codecs and turns
// it into bytes or a codec_error.
#pragma once

#include <string>
#include <string_view>

#include "codec/codec.h"
#include "codec/rust/densefs_codec_rs.h"

namespace densefs::codec::detail {

class rust_result {
 public:
  explicit rust_result(densefs_rs_result r) : r_(r) {}
  ~rust_result() { densefs_rs_free(&r_); }
  rust_result(const rust_result&) = delete;
  rust_result& operator=(const rust_result&) = delete;

  int status() const { return r_.status; }
  bool ok() const { return r_.status == DENSEFS_RS_OK; }
  std::string_view bytes() const {
    return r_.data ? std::string_view(reinterpret_cast<const char*>(r_.data), r_.len)
                   : std::string_view();
  }
  std::string error() const { return r_.error ? std::string(r_.error) : "unknown error"; }

 private:
  densefs_rs_result r_;
};

inline const std::uint8_t* rust_bytes(std::string_view s) {
  return reinterpret_cast<const std::uint8_t*>(s.data());
}

}  // namespace densefs::codec::detail
