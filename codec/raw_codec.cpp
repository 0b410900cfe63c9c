// raw: the stored bytes are the plain bytes. The fallback for every chunk
// another codec cannot shrink enough.
#include <string>

#include "codec/codec_impl.h"

namespace densefs::codec::detail {
namespace {

class raw_codec final : public chunk_codec {
 public:
  codec_id id() const override { return codec_id::raw; }
  std::string_view name() const override { return "raw"; }

  bool encode(std::string_view plain, const codec_options&, std::size_t,
              std::string& out) const override {
    out.assign(plain);
    return true;
  }

  std::string decode(std::string_view stored, std::size_t plain_size) const override {
    if (stored.size() != plain_size) {
      throw codec_error("raw chunk holds " + std::to_string(stored.size()) + " bytes, expected " +
                        std::to_string(plain_size));
    }
    return std::string(stored);
  }

  void apply_option(std::string_view key, std::string_view, codec_options&) const override {
    throw codec_error("codec raw has no option '" + std::string(key) + "'");
  }

  std::string format_options(const codec_options&) const override { return {}; }
};

}  // namespace

std::unique_ptr<chunk_codec> make_raw_codec() {
  return std::make_unique<raw_codec>();
}

}  // namespace densefs::codec::detail
