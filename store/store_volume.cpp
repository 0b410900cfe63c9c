// The volume as the store's clients see it: change notices heard through
// the membership (store/membership/volume_membership.h) and the caches they
// invalidate, where a scale-out volume's payloads are, and what `densefs
// status` reads of a volume.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <utility>

#include "store/cache/entry_cache.h"
#include "store/metadata/metadata_engine.h"
#include "store/object/s3_object_store.h"
#include "store/payload/pack_store.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

bool store::watch(std::function<void(const change_notice&)> fn) {
  return membership_->watch([this, fn = std::move(fn)](const change_notice& c) {
    drop_cached_extents(c.inodes, c.everything);
    if (entry_cache_) {
      if (c.everything)
        entry_cache_->forget_all();
      else
        entry_cache_->forget(c.entries);
    }
    fn(c);
  });
}

void store::unwatch() {
  if (membership_) membership_->unwatch();
}

std::string store::payload_location() const {
  return packs_ && packs_->remote() ? packs_->remote()->where() : std::string();
}

std::optional<store::volume_status> store::read_volume_status(const std::string& store_or_uri,
                                                              bool is_uri) {
  std::string conninfo = store_or_uri;
  if (!is_uri) {
    check(store_or_uri);
    conninfo = read_format_marker(store_or_uri).postgres;
    if (conninfo.empty()) return std::nullopt;
  }
  const auto [engine, settings_record] = open_volume_database(conninfo);
  volume_status out;
  out.metadata_location = engine->where();
  if (const std::optional<std::string> location =
          engine->get(table::meta, k_payload_location_key, "the payload location"))
    out.payload_location = describe_s3(parse_s3_url(*location));
  out.sessions = volume_membership::sessions_in(*engine);
  return out;
}

}  // namespace densefs::store
