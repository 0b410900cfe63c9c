// densefs mkfs STORE [--codec SPEC]
#include <filesystem>

#include "codec/codec.h"
#include "store/store.h"
#include "tools/cli.h"

namespace densefs::tools {

int mkfs_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Create a densefs store in STORE (created if missing; must be empty).",
               "densefs mkfs"};
  std::string dir;
  std::string spec = codec::format_codec_spec(codec::codec_options{});
  app.add_option("STORE", dir, "store directory")->required();
  app.add_option("--codec", spec,
                 "codec for new chunks: raw, zstd, zstd:level=N[:min_savings=F] "
                 "(default " +
                     spec + ")");
  if (auto done = parse_cli(app, args, io)) return *done;

  codec::codec_options options;
  try {
    options = codec::parse_codec_spec(spec);
  } catch (const codec::codec_error& e) {
    print_error(io, "mkfs", std::string("--codec: ") + e.what());
    return k_exit_usage;
  }
  const std::filesystem::path path = absolute_path(dir);
  store::store::create(path, options);
  io.out << "created densefs store " << path.string() << " (codec "
         << codec::format_codec_spec(options) << ")\n"
         << "mount it with: densefs mount " << path.string() << " MOUNTPOINT\n";
  return k_exit_ok;
}

}  // namespace densefs::tools
