#include "store/payload/local_pack_home.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/durable_file.h"
#include "store/error.h"

namespace densefs::store {
namespace fs = std::filesystem;

local_pack_home::local_pack_home(fs::path dir)
    : dir_(std::move(dir)), files_([this](std::uint32_t id) { return dir_ / pack_file_name(id); }) {
  const std::vector<std::uint32_t> ids = list_pack_files(dir_);
  next_id_ = ids.empty() ? 1 : ids.back() + 1;
}

std::string local_pack_home::location(std::uint32_t id) const {
  return (dir_ / pack_file_name(id)).string();
}

std::shared_ptr<pack_file> local_pack_home::create() {
  if (make_private_directory(dir_)) fsync_directory(dir_.parent_path());
  std::lock_guard lock(create_mutex_);
  const std::uint32_t id = next_id_;
  try {
    std::shared_ptr<pack_file> f = files_.create(id, dir_ / pack_file_name(id));
    ++next_id_;
    return f;
  } catch (const store_error& e) {
    // A file of that number exists (left by a run that crashed while it
    // created it, or made meanwhile): never appended to; the next try
    // takes the next number. Other failures try the same number again.
    if (e.error_number() == EEXIST) ++next_id_;
    throw;
  }
}

void local_pack_home::make_durable(packs_to_make_durable& p) {
  // On a failure everything stays for the next call: a failed fdatasync may
  // have dropped the dirty pages, but the commit that needed them fails now
  // with this error.
  for (const std::shared_ptr<pack_file>& f : p.packs) {
    if (::fdatasync(f->fd) != 0) {
      const int e = errno;
      throw store_error(e, "syncing pack " + f->path.string() + ": " + errno_text(e));
    }
  }
  if (p.created) fsync_directory(dir_);
  p = {};
}

std::vector<std::string> local_pack_home::fetch(std::span<const chunk_hash> hashes,
                                                std::span<const pack_ref> refs) {
  throw_pack_read_error(hashes.front(), location(refs.front().pack), "the pack file is missing");
}

std::vector<std::pair<std::uint32_t, std::uint64_t>> local_pack_home::sizes() const {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
  for (const std::uint32_t id : list_pack_files(dir_)) {
    struct stat sb {};
    if (::stat((dir_ / pack_file_name(id)).c_str(), &sb) == 0)
      out.emplace_back(id, static_cast<std::uint64_t>(sb.st_size));
  }
  return out;
}

void local_pack_home::read_whole(std::uint32_t id, std::uint64_t,
                                 const std::function<void(std::string_view)>& use) {
  // Mapped, not read into memory: a pack may be as big as its cap.
  const fs::path path = dir_ / pack_file_name(id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw store_error(errno, "cannot open: " + errno_text(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || sb.st_size < static_cast<off_t>(k_pack_header_size)) {
    ::close(fd);
    throw store_error(EIO, "shorter than a pack header");
  }
  const auto size = static_cast<std::uint64_t>(sb.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  ::close(fd);
  if (map == MAP_FAILED) throw store_error(map_error, "cannot map: " + errno_text(map_error));
  try {
    use(std::string_view(static_cast<const char*>(map), size));
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
  ::munmap(map, size);
}

void local_pack_home::remove(std::uint32_t id) {
  files_.forget(id);
  const fs::path path = dir_ / pack_file_name(id);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw store_error(errno, "gc: deleting " + path.string() + ": " + errno_text(errno));
  fsync_directory(dir_);
}

}  // namespace densefs::store
