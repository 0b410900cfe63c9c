#include "store/metadata/metadata_engine.h"

#include "store/records.h"

namespace densefs::store {

const char* table_name(table t) {
  switch (t) {
    case table::meta:
      return k_cf_meta;
    case table::inodes:
      return k_cf_inodes;
    case table::dirents:
      return k_cf_dirents;
    case table::extents:
      return k_cf_extents;
    case table::chunks:
      return k_cf_chunks;
    case table::payloads:
      return k_cf_payloads;
    case table::xattrs:
      return k_cf_xattrs;
  }
  return "unknown";
}

key_range prefix_range(std::string_view prefix) {
  key_range r{std::string(prefix), std::string(prefix)};
  // The first key past every key with the prefix: drop trailing 0xff bytes,
  // then add one to the last byte (none left: no upper bound).
  while (!r.upper.empty() && static_cast<unsigned char>(r.upper.back()) == 0xff) r.upper.pop_back();
  if (!r.upper.empty())
    r.upper.back() = static_cast<char>(static_cast<unsigned char>(r.upper.back()) + 1);
  return r;
}

void metadata_engine::write_locked(std::string_view,
                                   const std::function<void(locked_reads&, metadata_batch&)>& build,
                                   bool sync) {
  // One writer: what it reads stays as read until it writes.
  class plain_reads final : public locked_reads {
   public:
    explicit plain_reads(const metadata_engine& engine) : engine_(engine) {}
    std::vector<std::optional<std::string>> get_many(table t, std::span<const std::string> keys,
                                                     std::string_view what) override {
      return engine_.get_many(t, keys, what);
    }
    std::vector<std::pair<std::string, std::string>> scan(table t, const key_range& range,
                                                          std::size_t limit,
                                                          std::string_view what) override {
      std::vector<std::pair<std::string, std::string>> out;
      engine_.scan(t, range, {}, what, [&](std::string_view k, std::string_view v) {
        if (out.size() >= limit)
          throw store_error(EIO, std::string(what) + " in " + engine_.where() + ": more than " +
                                     std::to_string(limit) + " rows");
        out.emplace_back(k, v);
        return true;
      });
      return out;
    }

   private:
    const metadata_engine& engine_;
  };
  plain_reads reads(*this);
  const std::unique_ptr<metadata_batch> batch = new_batch();
  build(reads, *batch);
  write(*batch, sync);
}

}  // namespace densefs::store
