#include "store/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "store/error.h"

namespace densefs::store {

void fsync_path(const std::filesystem::path& path, int open_flags) {
  const int fd = ::open(path.c_str(), open_flags | O_CLOEXEC);
  if (fd < 0) throw store_error(errno, "cannot open " + path.string() + ": " + errno_text(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) throw store_error(e, "cannot sync " + path.string() + ": " + errno_text(e));
}

void fsync_directory(const std::filesystem::path& dir) {
  fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

void write_file_durably(const std::filesystem::path& path, std::string_view content,
                        const std::filesystem::path& temporary) {
  const std::filesystem::path tmp =
      temporary.empty() ? std::filesystem::path(path.string() + ".tmp") : temporary;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw store_error(errno, "cannot create " + tmp.string() + ": " + errno_text(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw store_error(e, "cannot write " + tmp.string() + ": " + errno_text(e));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    throw store_error(e, "cannot write " + tmp.string() + ": " + errno_text(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw store_error(errno, "cannot rename " + tmp.string() + ": " + errno_text(errno));
  fsync_directory(path.parent_path());
}

}  // namespace densefs::store
