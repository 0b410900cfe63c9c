// The blob payload store (payloads in the engine's payloads table): batched puts, single and
// batched gets in order, and a missing payload reported as EIO naming the chunk.
#include "store/payload/rocksdb_payload_store.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "store/error.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/store.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

TEST(store_payloads, put_get_get_many_remove) {
  test::temp_dir tmp;
  store::create(tmp / "s", {});
  const std::unique_ptr<rocksdb_engine> engine = rocksdb_engine::open(tmp / "s", {});
  rocksdb_payload_store payloads(*engine);

  std::vector<chunk_hash> hashes;
  std::vector<std::string> values;
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  for (int i = 0; i < 5; ++i) {
    values.push_back(std::string(static_cast<std::size_t>(i) * 3000, static_cast<char>('a' + i)));
    hashes.push_back(sha256_of(values.back()));
    payloads.put(*batch, hashes.back(), values.back(), {});
  }
  // Nothing is visible until the caller writes the batch.
  EXPECT_THROW(payloads.get(hashes[1]), store_error);
  engine->write(*batch, false);

  EXPECT_EQ(payloads.get(hashes[3]), values[3]);
  const std::vector<chunk_hash> order = {hashes[4], hashes[0], hashes[2], hashes[4]};
  const std::vector<std::string> got = payloads.get_many(order);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], values[4]);
  EXPECT_EQ(got[1], values[0]);
  EXPECT_EQ(got[2], values[2]);
  EXPECT_EQ(got[3], values[4]);
  EXPECT_TRUE(payloads.get_many({}).empty());

  const std::unique_ptr<metadata_batch> del = engine->new_batch();
  payloads.remove(*del, hashes[2]);
  engine->write(*del, false);
  try {
    payloads.get_many(order);
    FAIL() << "a missing payload was not reported";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EIO);
    EXPECT_NE(std::string(e.what()).find(hashes[2].hex()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace densefs::store
