#include "store/payload/pack_home.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/error.h"

namespace densefs::store {

pack_file::~pack_file() {
  if (fd >= 0) ::close(fd);
}

std::shared_ptr<pack_file> open_pack_files::get(std::uint32_t id) {
  std::lock_guard lock(mutex_);
  if (auto it = files_.find(id); it != files_.end()) return it->second;
  std::filesystem::path path = path_of_(id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  auto f = std::make_shared<pack_file>(id, fd, std::move(path));
  files_[id] = f;
  return f;
}

std::shared_ptr<pack_file> open_pack_files::create(std::uint32_t id, std::filesystem::path path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    throw store_error(e, "cannot create pack " + path.string() + ": " + errno_text(e));
  }
  auto f = std::make_shared<pack_file>(id, fd, std::move(path));
  const std::string header = pack_header(id);
  for (std::size_t done = 0; done < header.size();) {
    const ssize_t n =
        ::pwrite(fd, header.data() + done, header.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A full disk, say: not kept (nor open), so no pack starts without
      // its header and the number is free again.
      const int e = n < 0 ? errno : EIO;
      ::unlink(f->path.c_str());
      throw store_error(e, "writing pack " + f->path.string() + ": " + errno_text(e));
    }
    done += static_cast<std::size_t>(n);
  }
  std::lock_guard lock(mutex_);
  files_[id] = f;
  return f;
}

bool make_private_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) return false;
  std::filesystem::create_directory(dir, ec);
  if (ec) throw store_error(ec.value(), "cannot create " + dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  return true;
}

void open_pack_files::forget(std::uint32_t id) {
  std::lock_guard lock(mutex_);
  files_.erase(id);
}

std::string read_checked_record(batched_reader& reader, const pack_file& f, const chunk_hash& hash,
                                const pack_ref& ref, const std::string& location) {
  std::string record;
  if (const int e = reader.read_one(f.fd, ref.offset, ref.length, record); e != 0)
    throw_pack_read_error(hash, location, errno_text(e));
  if (const std::string why = record_problem(hash, ref, record); !why.empty())
    throw_pack_read_error(hash, location, why);
  return record;
}

void throw_pack_read_error(const chunk_hash& hash, const std::string& location,
                           const std::string& why) {
  throw store_error(EIO, "payload of chunk " + hash.hex() + " in pack " + location + ": " + why);
}

}  // namespace densefs::store
