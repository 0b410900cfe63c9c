// pack_home on this machine's disk: pack N is the file STORE/packs/N.pack
// (docs/format.md, "Pack files"), appended in place.
//
// Crash safety: make_durable() fdatasyncs every pack appended to, and the
// directory after a pack was created, so an index entry committed after it
// never names bytes a power loss could lose. New records always go to a new
// pack after a restart: the last pack of an earlier run may end in a torn
// record (a crash mid-append), and appending after it would hide the
// records behind it from a scan that stops there.
#pragma once

#include <filesystem>
#include <mutex>

#include "store/payload/pack_home.h"

namespace densefs::store {

class local_pack_home final : public pack_home {
 public:
  // `dir` is STORE/packs (made when the first pack is).
  explicit local_pack_home(std::filesystem::path dir);

  std::string location(std::uint32_t id) const override;
  std::shared_ptr<pack_file> create() override;
  void make_durable(packs_to_make_durable& p) override;
  bool seals_when_durable() const override { return false; }
  std::shared_ptr<pack_file> local_file(std::uint32_t id) override { return files_.get(id); }
  std::vector<std::string> fetch(std::span<const chunk_hash> hashes,
                                 std::span<const pack_ref> refs) override;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> sizes() const override;
  void read_whole(std::uint32_t id, std::uint64_t size,
                  const std::function<void(std::string_view)>& use) override;
  void remove(std::uint32_t id) override;

 private:
  const std::filesystem::path dir_;
  open_pack_files files_;
  std::mutex create_mutex_;
  std::uint32_t next_id_ = 1;  // under create_mutex_
};

}  // namespace densefs::store
