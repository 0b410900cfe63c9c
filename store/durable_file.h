// Making files and directory entries durable: the few steps every part of
// the store takes the same way (fsync a file or a directory, replace a
// small file so that it appears complete or not at all). Errors are
// store_error naming the path.
#pragma once

#include <filesystem>
#include <string_view>

namespace densefs::store {

// fsync of `path`, opened with `open_flags` (O_RDONLY for a file,
// O_RDONLY | O_DIRECTORY for a directory).
void fsync_path(const std::filesystem::path& path, int open_flags);
// fsync of a directory: its entries (a created, renamed or removed file)
// are durable.
void fsync_directory(const std::filesystem::path& dir);
// Writes a file (a marker, an id, an object) through a temporary file
// (`temporary`, default `path`.tmp), fsync and rename, then syncs its
// directory: after a crash it is whole or absent.
void write_file_durably(const std::filesystem::path& path, std::string_view content,
                        const std::filesystem::path& temporary = {});

}  // namespace densefs::store
