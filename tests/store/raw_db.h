// Opens a closed store's RocksDB directly, to look at or damage what the
// store API hides (payloads, settings). Only for tests.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/payload/pack_store.h"
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
    dir_ = dir;
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
  store::payload_backend backend() const {
    return store::decode_settings(get(store::k_cf_meta, std::string(store::k_settings_key)))
        .payloads;
  }
  // A chunk's stored bytes, wherever the backend keeps them.
  std::string get_payload(const store::chunk_hash& hash) const {
    const std::string value = get(store::k_cf_payloads, std::string(hash.view()));
    if (backend() == store::payload_backend::blob) return value;
    const store::payload_value v = store::decode_payload_value(hash, value);
    if (v.inline_bytes) return std::string(*v.inline_bytes);
    std::ifstream in(dir_ / "packs" / store::pack_file_name(v.ref.pack), std::ios::binary);
    std::string bytes(v.ref.length - store::k_pack_record_header_size, '\0');
    in.seekg(static_cast<std::streamoff>(v.ref.offset + store::k_pack_record_header_size));
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!in) throw std::runtime_error("raw get_payload: short pack read");
    return bytes;
  }
  // Replaces a chunk's stored bytes, as damage would: a pack record of the
  // same size is overwritten in place (its header, XXH3 included, stays);
  // otherwise a pack store gets them inline.
  void put_payload(const store::chunk_hash& hash, const std::string& bytes) {
    const std::string key(hash.view());
    if (backend() == store::payload_backend::blob) return put(store::k_cf_payloads, key, bytes);
    const store::payload_value v =
        store::decode_payload_value(hash, get(store::k_cf_payloads, key));
    if (!v.inline_bytes && v.ref.length == bytes.size() + store::k_pack_record_header_size) {
      std::fstream f(dir_ / "packs" / store::pack_file_name(v.ref.pack),
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(v.ref.offset + store::k_pack_record_header_size));
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!f) throw std::runtime_error("raw put_payload: pack write failed");
      return;
    }
    put(store::k_cf_payloads, key, store::encode_inline_payload(bytes));
  }

  void erase(const std::string& cf_name, const std::string& key) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    const rocksdb::Status s = db_->Delete(wo, cf(cf_name), key);
    if (!s.ok()) throw std::runtime_error("raw erase: " + s.ToString());
  }

  void put(const std::string& cf_name, const std::string& key, const std::string& value) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    const rocksdb::Status s = db_->Put(wo, cf(cf_name), key, value);
    if (!s.ok()) throw std::runtime_error("raw put: " + s.ToString());
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::vector<std::string> names_;
};

}  // namespace densefs::test
