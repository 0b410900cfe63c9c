// Opens a closed store's RocksDB directly, to look at or damage what the
// store API hides (payloads, settings). Only for tests.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/records.h"

namespace densefs::test {

class raw_db {
 public:
  // blob_payloads: configure the payloads column family like the store does
  // (large values to blob files), so a flush writes the same kind of files.
  explicit raw_db(const std::filesystem::path& dir, bool blob_payloads = false) {
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (const char* name :
         {store::k_cf_meta, store::k_cf_inodes, store::k_cf_dirents, store::k_cf_extents,
          store::k_cf_chunks, store::k_cf_payloads, store::k_cf_xattrs}) {
      rocksdb::ColumnFamilyOptions o;
      if (blob_payloads && std::string(name) == store::k_cf_payloads) {
        o.enable_blob_files = true;
        o.min_blob_size = 4096;
        o.compression = rocksdb::kNoCompression;
      }
      cfs.emplace_back(name, o);
    }
    rocksdb::DB* db = nullptr;
    const rocksdb::Status s =
        rocksdb::DB::Open(rocksdb::DBOptions(), dir.string(), cfs, &handles_, &db);
    if (!s.ok()) throw std::runtime_error("raw open: " + s.ToString());
    db_.reset(db);
    for (std::size_t i = 0; i < cfs.size(); ++i) names_.push_back(cfs[i].name);
  }
  ~raw_db() {
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
  }

  rocksdb::ColumnFamilyHandle* cf(const std::string& name) const {
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return handles_[i];
    throw std::runtime_error("no column family " + name);
  }
  rocksdb::DB* db() const { return db_.get(); }

  // Moves everything from the write-ahead log into table and blob files.
  void flush_all() {
    rocksdb::FlushOptions fo;
    fo.wait = true;
    const rocksdb::Status s = db_->Flush(fo, handles_);
    if (!s.ok()) throw std::runtime_error("raw flush: " + s.ToString());
  }

  std::size_t count(const std::string& cf_name) const {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(cf_name)));
    std::size_t n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
    return n;
  }
  std::string get(const std::string& cf_name, const std::string& key) const {
    std::string v;
    const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(cf_name), key, &v);
    if (!s.ok()) throw std::runtime_error("raw get: " + s.ToString());
    return v;
  }
  void put(const std::string& cf_name, const std::string& key, const std::string& value) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    const rocksdb::Status s = db_->Put(wo, cf(cf_name), key, value);
    if (!s.ok()) throw std::runtime_error("raw put: " + s.ToString());
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::vector<std::string> names_;
};

}  // namespace densefs::test
