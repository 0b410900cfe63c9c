#include "store/object/directory_object_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include "store/durable_file.h"
#include "store/error.h"

namespace densefs::store {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t k_max_name_part = 255;  // NAME_MAX

// Each put's temporary file has a name of its own: two puts of one object
// at once must not write into one file.
std::string temporary_name(const fs::path& object) {
  static std::atomic<std::uint64_t> next{0};
  return ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(next++) + "-" +
         object.filename().string();
}

}  // namespace

directory_object_store::directory_object_store(fs::path root)
    : root_(std::move(root)), where_("directory " + root_.string()) {
  std::error_code ec;
  if (fs::create_directories(root_, ec); ec)
    throw store_error(ec.value(), "cannot create " + where_ + ": " + ec.message());
}

fs::path directory_object_store::path_of(std::string_view name) const {
  fs::path out = root_;
  std::size_t at = 0;
  while (true) {
    const std::size_t slash = name.find('/', at);
    const std::string_view part =
        name.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    if (part.empty() || part.size() > k_max_name_part || part == "." || part == ".." ||
        part.front() == '.' || part.find('\0') != std::string_view::npos)
      throw store_error(EINVAL, "object name \"" + std::string(name) + "\" is not one " + where_ +
                                    " keeps (parts of 1-255 bytes, none starting with '.')");
    out /= std::string(part);
    if (slash == std::string_view::npos) return out;
    at = slash + 1;
  }
}

void directory_object_store::put(std::string_view name, std::string_view bytes) {
  const fs::path path = path_of(name);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    throw store_error(ec.value(),
                      "cannot create " + path.parent_path().string() + ": " + ec.message());
  write_file_durably(path, bytes, path.parent_path() / temporary_name(path));
}

std::string directory_object_store::get_range(std::string_view name, std::uint64_t offset,
                                              std::uint32_t length) {
  const fs::path path = path_of(name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw store_error(EIO, "object " + path.string() + ": " +
                               (e == ENOENT ? std::string("missing") : errno_text(e)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw store_error(EIO, "object " + path.string() + ": " + errno_text(e));
  }
  const auto object_size = static_cast<std::uint64_t>(st.st_size);
  if (offset > object_size || length > object_size - offset) {
    ::close(fd);
    throw store_error(EIO, "object " + path.string() + " is " + std::to_string(object_size) +
                               " bytes; the read asked for " + std::to_string(length) + " at " +
                               std::to_string(offset));
  }
  std::string out(length, '\0');
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n =
        ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      ::close(fd);
      throw store_error(EIO, "object " + path.string() + ": " +
                                 (n < 0 ? errno_text(e) : std::string("shorter than it was")));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return out;
}

std::optional<std::uint64_t> directory_object_store::size(std::string_view name) {
  const fs::path path = path_of(name);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw store_error(EIO, "object " + path.string() + ": " + errno_text(errno));
  }
  if (!S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_size);
}

void directory_object_store::remove(std::string_view name) {
  const fs::path path = path_of(name);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return;
    throw store_error(EIO, "cannot remove object " + path.string() + ": " + errno_text(errno));
  }
  fsync_directory(path.parent_path());
}

std::vector<object_store::object_info> directory_object_store::list(std::string_view prefix) {
  std::vector<object_info> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root_, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    // A file removed while the walk passes it is just not listed, as S3
    // lists what exists when each page is read.
    std::error_code entry_ec;
    const std::string part = it->path().filename().string();
    if (!part.empty() && part.front() == '.') {
      // A temporary file of a put, or a directory no name can reach.
      if (it->is_directory(entry_ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(entry_ec)) continue;
    const std::uintmax_t bytes = it->file_size(entry_ec);
    if (entry_ec == std::errc::no_such_file_or_directory) continue;
    if (entry_ec) {
      ec = entry_ec;
      break;
    }
    std::string name = it->path().lexically_relative(root_).generic_string();
    if (name.starts_with(prefix))
      out.push_back({std::move(name), static_cast<std::uint64_t>(bytes)});
  }
  if (ec) throw store_error(EIO, "listing " + where_ + ": " + ec.message());
  // Byte order of the whole name, as S3 lists ('/' sorts after '-').
  std::sort(out.begin(), out.end(),
            [](const object_info& a, const object_info& b) { return a.name < b.name; });
  return out;
}

}  // namespace densefs::store
