// The densefs CLI as functions, so tests run it in-process. Each subcommand
// is an `X_main(args, io)`; args are the words after the subcommand name.
// Return value: the process exit status (0 ok, 1 runtime error, 2 usage).
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace densefs::tools {

struct tool_io {
  std::ostream& out;
  std::ostream& err;
  bool out_is_terminal = false;  // human output may abbreviate for a terminal
};

inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_failure = 1;
inline constexpr int k_exit_usage = 2;

// Bad command line: the top level prints it as one line and exits 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int densefs_main(int argc, char** argv, const tool_io& io);
int densefs_main(const std::vector<std::string>& args, const tool_io& io);  // args without argv[0]

int mkfs_main(const std::vector<std::string>& args, const tool_io& io);
int mount_main(const std::vector<std::string>& args, const tool_io& io);
int umount_main(const std::vector<std::string>& args, const tool_io& io);
int stats_main(const std::vector<std::string>& args, const tool_io& io);
int info_main(const std::vector<std::string>& args, const tool_io& io);
int analyze_main(const std::vector<std::string>& args, const tool_io& io);
int codec_main(const std::vector<std::string>& args, const tool_io& io);
int cat_main(const std::vector<std::string>& args, const tool_io& io);
int recompress_main(const std::vector<std::string>& args, const tool_io& io);
int fsck_main(const std::vector<std::string>& args, const tool_io& io);
int czip_main(const std::vector<std::string>& args, const tool_io& io);
int gc_main(const std::vector<std::string>& args, const tool_io& io);
int sync_main(const std::vector<std::string>& args, const tool_io& io);
int bench_main(const std::vector<std::string>& args, const tool_io& io);
int status_main(const std::vector<std::string>& args, const tool_io& io);
int scrub_main(const std::vector<std::string>& args, const tool_io& io);
int dump_main(const std::vector<std::string>& args, const tool_io& io);
int load_main(const std::vector<std::string>& args, const tool_io& io);
int migrate_main(const std::vector<std::string>& args, const tool_io& io);
int key_main(const std::vector<std::string>& args, const tool_io& io);
int snapshot_main(const std::vector<std::string>& args, const tool_io& io);

}  // namespace densefs::tools
