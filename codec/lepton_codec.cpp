// lepton: lossless JPEG recompression by Microsoft's `lepton_jpeg` (Rust,
// codec/rust). The stored bytes are one Lepton file. Only chunks that start
// like a JPEG reach this codec, and encode_chunk() decodes every encoding
// and compares it with the input before admitting it (lepton_jpeg can write
// a file that decodes to different bytes without reporting an error).
#include <atomic>
#include <string>

#include "codec/codec_impl.h"
#include "codec/rust/rust_result.h"

namespace densefs::codec::detail {
namespace {

// lepton_jpeg's own threads per JPEG. 1: everything on the calling thread;
// densefs parallelises across chunks instead.
std::atomic<unsigned> g_lepton_threads{1};

class lepton_codec final : public chunk_codec {
 public:
  codec_id id() const override { return codec_id::lepton; }
  std::string_view name() const override { return "lepton"; }

  bool encode(std::string_view plain, const codec_options&, std::size_t max_stored,
              std::string& out) const override {
    const rust_result r(
        densefs_rs_lepton_encode(rust_bytes(plain), plain.size(), g_lepton_threads.load()));
    // Any failure, including a panic caught in Rust, is "lepton does not
    // take this JPEG": the writer falls back instead of failing the write.
    if (!r.ok()) throw codec_rejected(r.error());
    if (r.bytes().size() > max_stored) return false;
    out.assign(r.bytes());
    return true;
  }

  std::string decode(std::string_view stored, std::size_t plain_size) const override {
    std::string out = lepton_decode_any_size(stored, plain_size);
    check_decoded_size("lepton", out.size(), plain_size);
    return out;
  }

  void apply_option(std::string_view key, std::string_view value,
                    codec_options& options) const override {
    if (key == "min_savings") {
      options.min_savings = parse_min_savings("lepton", value);
    } else {
      throw codec_error("codec lepton has no option '" + std::string(key) + "'");
    }
  }

  std::string format_options(const codec_options& options) const override {
    return format_min_savings(options);
  }
};

}  // namespace

std::string lepton_decode_any_size(std::string_view stored, std::size_t max_plain_size) {
  const rust_result r(densefs_rs_lepton_decode(rust_bytes(stored), stored.size(), max_plain_size,
                                               g_lepton_threads.load()));
  if (!r.ok()) throw codec_error(r.error());
  return std::string(r.bytes());
}

unsigned lepton_thread_count() {
  return g_lepton_threads.load();
}

std::unique_ptr<chunk_codec> make_lepton_codec() {
  return std::make_unique<lepton_codec>();
}

}  // namespace densefs::codec::detail

namespace densefs::codec {

void set_lepton_threads(unsigned threads) {
  detail::g_lepton_threads.store(threads == 0 ? 1 : threads);
}

}  // namespace densefs::codec
