// Immutable objects by name: where a scale-out volume's sealed pack files go
// (docs/scale-out.md). An object is written whole once and then read in
// ranges, so a pack record is one ranged read. Implementations:
// s3_object_store (any S3-compatible service) and directory_object_store
// (files in a local directory); tests/store/object_store_cases.h holds the
// cases both pass.
//
// Threading: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::store {

class object_store {
 public:
  virtual ~object_store() = default;

  // Names the store in messages ("s3://bucket/prefix at http://host:port"),
  // never a credential.
  virtual const std::string& where() const = 0;

  // Stores `bytes` as object `name`, replacing one of that name. Durable
  // (as the service defines it) when it returns. Throws store_error.
  virtual void put(std::string_view name, std::string_view bytes) = 0;
  // Bytes [offset, offset + length) of object `name`: exactly `length` of
  // them, or store_error(EIO) naming the object (missing, shorter, or the
  // service failing after its retries).
  virtual std::string get_range(std::string_view name, std::uint64_t offset,
                                std::uint32_t length) = 0;
  // The object's size; nullopt when there is no such object.
  virtual std::optional<std::uint64_t> size(std::string_view name) = 0;
  // Removes object `name`; removing one that does not exist is no error.
  virtual void remove(std::string_view name) = 0;
  // Every object whose name starts with `prefix`, in byte order of names.
  struct object_info {
    std::string name;
    std::uint64_t size = 0;
    bool operator==(const object_info&) const = default;
  };
  virtual std::vector<object_info> list(std::string_view prefix) = 0;

  // The requests sent to the service since this object was made, by kind,
  // and the bytes they carried (each try counts: a service bills and waits
  // for each); all 0 for a store that sends none (a directory).
  struct request_counts {
    std::uint64_t puts = 0;
    std::uint64_t gets = 0;
    std::uint64_t heads = 0;
    std::uint64_t lists = 0;
    std::uint64_t deletes = 0;
    std::uint64_t bytes_sent = 0;
    std::uint64_t bytes_received = 0;
    // Tries sent again after a transient failure (a 5xx, a timeout, a
    // broken connection), and requests given up on (EIO to the caller).
    std::uint64_t retries = 0;
    std::uint64_t failures = 0;
  };
  virtual request_counts requests() const { return {}; }
};

}  // namespace densefs::store
