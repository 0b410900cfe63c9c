// object_store on a local directory: object "packs/00000001.pack" is the
// file DIR/packs/00000001.pack. What a volume's packs become when they live
// on a disk rather than in S3, with the same five promises (object_store.h),
// so that one set of conformance cases holds both
// (tests/store/object_store_cases.h).
//
// Durability: put() writes a hidden temporary file beside the object,
// fsyncs it, renames it over the name and fsyncs the directory, so after a
// crash an object is whole or absent (a leftover temporary file is hidden:
// never listed, never read). remove() fsyncs the directory too.
//
// Names: '/'-separated, each part non-empty, at most 255 bytes, not "." or
// "..", not starting with '.' (those are the temporary files), no NUL.
// Anything else is refused with store_error(EINVAL): a name never reaches
// outside the directory.
//
// Threading: every method is safe from any thread (puts of one name from
// two threads each land whole; the last rename wins).
#pragma once

#include <filesystem>
#include <string>

#include "store/object/object_store.h"

namespace densefs::store {

class directory_object_store final : public object_store {
 public:
  // Creates `root` if it is missing (inside a store directory, which is
  // private to its owner already).
  explicit directory_object_store(std::filesystem::path root);

  const std::string& where() const override { return where_; }
  void put(std::string_view name, std::string_view bytes) override;
  std::string get_range(std::string_view name, std::uint64_t offset, std::uint32_t length) override;
  std::optional<std::uint64_t> size(std::string_view name) override;
  void remove(std::string_view name) override;
  std::vector<object_info> list(std::string_view prefix) override;

 private:
  // The file of object `name`; store_error(EINVAL) for a name it refuses.
  std::filesystem::path path_of(std::string_view name) const;

  const std::filesystem::path root_;
  const std::string where_;
};

}  // namespace densefs::store
