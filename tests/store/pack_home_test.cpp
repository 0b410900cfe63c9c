// The homes of pack files (store/payload/pack_home.h) on their own: the
// local directory's numbering, durability and removal, and an object store's
// upload that fails and is retried, through pack_store over the directory
// object store (no server).
#include "store/payload/pack_home.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "store/error.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/object/directory_object_store.h"
#include "store/payload/local_pack_home.h"
#include "store/payload/pack_store.h"
#include "store/store.h"
#include "tests/random_bytes.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;
using test::random_bytes;
using test::temp_dir;

int error_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const store_error& e) {
    if (message) *message = e.what();
    return e.error_number();
  }
  return 0;
}

TEST(local_pack_home, numbers_new_packs_after_the_last_file_and_never_reuses_one) {
  temp_dir tmp;
  fs::create_directory(tmp / "packs");
  std::ofstream(tmp / "packs" / pack_file_name(7)) << "left by an earlier run";
  local_pack_home home(tmp / "packs");
  const std::shared_ptr<pack_file> a = home.create();
  EXPECT_EQ(a->id, 8u);
  // A file that appeared meanwhile under the next number: refused (never
  // appended to), and that number is skipped.
  std::ofstream(tmp / "packs" / pack_file_name(9)) << "x";
  EXPECT_EQ(error_of([&] { home.create(); }), EEXIST);
  EXPECT_EQ(home.create()->id, 10u);
  // The open file is what local_file() hands out.
  EXPECT_EQ(home.local_file(8), a);
  EXPECT_EQ(home.local_file(42), nullptr);
}

TEST(local_pack_home, make_durable_clears_what_it_synced_and_remove_deletes_the_file) {
  temp_dir tmp;
  local_pack_home home(tmp / "packs");  // made by the first create
  packs_to_make_durable p;
  p.packs.push_back(home.create());
  p.created = true;
  ASSERT_EQ(::pwrite(p.packs[0]->fd, "abcd", 4, 0), 4);
  home.make_durable(p);
  EXPECT_TRUE(p.packs.empty());
  EXPECT_FALSE(p.created);
  ASSERT_EQ(home.sizes().size(), 1u);
  EXPECT_EQ(home.sizes()[0], (std::pair<std::uint32_t, std::uint64_t>{1, 4}));
  // A pack too short to be one is reported, not read.
  EXPECT_EQ(error_of([&] { home.read_whole(1, 4, [](std::string_view) {}); }), EIO);
  home.remove(1);
  EXPECT_TRUE(home.sizes().empty());
  EXPECT_FALSE(fs::exists(tmp / "packs" / pack_file_name(1)));
  // A record of a pack that is gone is EIO naming the chunk and the file.
  std::string message;
  const chunk_hash h = sha256_of("x");
  const pack_ref ref{1, k_pack_header_size, 100};
  EXPECT_EQ(error_of([&] { home.fetch(std::span(&h, 1), std::span(&ref, 1)); }, &message), EIO);
  EXPECT_NE(message.find(h.hex()), std::string::npos) << message;
  EXPECT_NE(message.find("the pack file is missing"), std::string::npos) << message;
}

// A directory object store whose puts fail while `failing` is set: the
// service going away between an append and the sync that uploads it.
class flaky_object_store final : public object_store {
 public:
  explicit flaky_object_store(fs::path root) : real_(std::move(root)) {}
  std::atomic<bool> failing{false};
  const std::string& where() const override { return real_.where(); }
  void put(std::string_view name, std::string_view bytes) override {
    if (failing) throw store_error(EIO, "PUT " + std::string(name) + ": the service went away");
    real_.put(name, bytes);
  }
  std::string get_range(std::string_view name, std::uint64_t offset,
                        std::uint32_t length) override {
    return real_.get_range(name, offset, length);
  }
  std::optional<std::uint64_t> size(std::string_view name) override { return real_.size(name); }
  void remove(std::string_view name) override { real_.remove(name); }
  std::vector<object_info> list(std::string_view prefix) override { return real_.list(prefix); }

 private:
  directory_object_store real_;
};

TEST(object_pack_home, a_failed_upload_fails_the_sync_and_the_next_sync_uploads_the_pack) {
  temp_dir tmp;
  store::create(tmp / "s", {}, payload_backend::pack);
  const std::unique_ptr<rocksdb_engine> engine = rocksdb_engine::open(tmp / "s", {});
  const auto objects = std::make_shared<flaky_object_store>(tmp / "bucket");
  pack_store::options o;
  o.io = io_mode::pread;
  o.remote = objects;
  o.cache_dir = tmp / "cache";
  pack_store packs(*engine, tmp / "s", o);

  const std::string value = random_bytes(9000, 7);
  const chunk_hash hash = sha256_of(value);
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  packs.put(*batch, hash, value, {codec::codec_id::raw, 0});
  objects->failing = true;
  std::string message;
  EXPECT_EQ(error_of([&] { packs.sync(); }, &message), EIO);
  EXPECT_NE(message.find("uploading pack " + pack_file_name(1)), std::string::npos) << message;
  EXPECT_TRUE(objects->list("packs/").empty());

  // The service is back: the next sync uploads the pack the first one could
  // not, and only then is the batch naming it committed.
  objects->failing = false;
  packs.sync();
  engine->write(*batch, false);
  ASSERT_EQ(objects->list("packs/").size(), 1u);
  EXPECT_EQ(packs.get(hash), value);

  // Another client, with an empty cache, reads it from the object.
  pack_store::options r = o;
  r.read_only = true;
  r.cache_dir = tmp / "cache-b";
  pack_store reader(*engine, tmp / "s", r);
  EXPECT_EQ(reader.get(hash), value);
}

}  // namespace
}  // namespace densefs::store
