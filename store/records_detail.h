// Decoders that name the record's key in their corruption messages. The
// public decoders in records.h call these with an empty key; the store
// facade (store_*.cpp), which knows the key, calls these.
#pragma once

#include <string_view>

#include "store/records.h"

namespace densefs::store::detail {

dirent_record decode_dirent(std::string_view value, std::string_view key_description);
extent_record decode_extent(std::string_view value, std::string_view key_description);
chunk_record decode_chunk(std::string_view value, std::string_view key_description);
std::string decode_xattr_value(std::string_view value, std::string_view key_description);

}  // namespace densefs::store::detail
