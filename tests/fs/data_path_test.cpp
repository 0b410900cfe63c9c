// The data path (fs/data_path.h) without a mount: this test is its host,
// over a real store in a temporary directory, with real encoder threads and
// a real committer. Writes staged and read back before and after they land,
// a rewrite inside committed data, a truncate in its three steps, the bound
// on bytes in flight, and which lock each commit holds.
#include "fs/data_path.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tests/random_bytes.h"
#include "tests/temp_dir.h"

namespace densefs::fs {
namespace {

constexpr std::uint64_t k_slot = store::k_chunk_size;

class data_path_test : public ::testing::Test, public data_path::host {
 protected:
  void SetUp() override {
    store::store::create(tmp_ / "s");
    store_ = store::store::open(tmp_ / "s");
    options_.commit_interval = std::chrono::milliseconds(20);
    encoders_ = std::make_unique<worker_pool>(2);
    start();
  }
  void TearDown() override {
    data_->stop_committer();
    encoders_.reset();
    data_.reset();
  }
  void start() {
    data_path::host& host = *this;
    data_ = std::make_unique<data_path>(options_, *store_, *encoders_, host, [] {});
  }

  // A new empty regular file, committed, and its node.
  std::shared_ptr<node> new_file() {
    store::inode_record r;
    r.ino = store_->allocate_ino();
    r.mode = S_IFREG | 0644;
    r.nlink = 1;
    store::transaction txn;
    txn.put_inode(r);
    store_->commit(txn);
    return std::make_shared<node>(r);
  }
  // `n`'s bytes [offset, offset + length) as the data path reads them.
  std::string read(node& n, std::uint64_t offset, std::size_t length) {
    std::string out(length, '\0');
    std::lock_guard lock(n.data_mutex);
    EXPECT_TRUE(data_->read_data(n, offset, length, out.data()));
    return out;
  }
  // The file as a node made afresh from the store would read it: what a
  // remount sees.
  std::string read_stored(std::uint64_t ino) {
    const std::optional<store::inode_record> r = store_->get_inode(ino);
    EXPECT_TRUE(r);
    if (!r) return {};
    node fresh(*r);
    return read(fresh, 0, r->size);
  }
  void write(node& n, std::uint64_t offset, std::string_view bytes) {
    std::unique_lock lock(n.data_mutex);
    data_->wait_for_staging_room(lock, n);
    data_->stage_write(lock, n, offset, bytes);
  }
  int flush(node& n) {
    std::unique_lock lock(n.data_mutex);
    return data_->flush_data(lock, n);
  }

  // data_path::host
  fs::meta_lock& meta_mutex() override { return meta_; }
  void commit(store::transaction& txn, bool sync,
              const std::function<void(store::transaction&)>& fill, store::payloads_ahead* ahead,
              fs::while_committing) override {
    // Every metadata commit is made under the metadata mutex (a second
    // lock of it from this thread would deadlock; another thread's
    // try_lock tells).
    bool free = false;
    std::thread([&] {
      free = meta_.try_lock();
      if (free) meta_.unlock();
    }).join();
    EXPECT_FALSE(free) << "a commit without the metadata mutex";
    store_->commit(txn, sync, fill, ahead);
    ++commits_;
  }
  store::inode_record record_to_edit(node& n) override { return n.record; }
  bool new_file_ends(const node&, bool) const override { return false; }
  void maybe_release(const std::shared_ptr<node>&) override {}
  void invalidate_attributes(std::uint64_t) override {}
  void data_committed(bool) override { ++groups_; }

  test::temp_dir tmp_;
  mount_options options_;
  std::unique_ptr<store::store> store_;
  std::unique_ptr<worker_pool> encoders_;
  std::unique_ptr<data_path> data_;
  fs::meta_lock meta_;
  std::atomic<int> commits_{0};
  std::atomic<int> groups_{0};
};

TEST_F(data_path_test, writes_read_back_from_staging_and_once_committed_from_the_store) {
  const std::shared_ptr<node> n = new_file();
  // Two whole slots (each goes to the encoders as it fills) and a part.
  const std::string bytes = test::random_bytes(2 * k_slot + (1u << 20), 1);
  write(*n, 0, bytes);
  EXPECT_EQ(read(*n, 0, bytes.size()), bytes);  // whatever has landed by now
  EXPECT_EQ(n->size, bytes.size());

  EXPECT_EQ(flush(*n), 0);
  EXPECT_FALSE(n->has_staged());
  EXPECT_GT(groups_.load(), 0);
  EXPECT_EQ(n->persisted_size, bytes.size());
  EXPECT_EQ(store_->get_inode(n->ino)->size, bytes.size());
  EXPECT_GT(store_->get_inode(n->ino)->stored_bytes, 0u);
  EXPECT_EQ(read_stored(n->ino), bytes);
}

TEST_F(data_path_test, a_rewrite_inside_committed_data_keeps_the_bytes_around_it) {
  const std::shared_ptr<node> n = new_file();
  std::string bytes = test::random_bytes(k_slot + 5000, 2);
  write(*n, 0, bytes);
  ASSERT_EQ(flush(*n), 0);
  // A few bytes in each slot: each slot's committed bytes are read back
  // into its buffer, changed, and encoded again.
  const std::string patch(300, 'x');
  for (const std::uint64_t at : {std::uint64_t{100}, k_slot + 10}) {
    write(*n, at, patch);
    bytes.replace(at, patch.size(), patch);
  }
  EXPECT_EQ(read(*n, 0, bytes.size()), bytes);
  ASSERT_EQ(flush(*n), 0);
  EXPECT_EQ(read_stored(n->ino), bytes);
  // Past the end: the gap reads as zeros, the file grows.
  write(*n, bytes.size() + 1000, "tail");
  bytes += std::string(1000, '\0') + "tail";
  ASSERT_EQ(flush(*n), 0);
  EXPECT_EQ(read_stored(n->ino), bytes);
}

TEST_F(data_path_test, a_truncate_drops_the_extents_past_the_end_in_one_commit_with_the_record) {
  const std::shared_ptr<node> n = new_file();
  const std::string bytes = test::random_bytes(3 * k_slot, 3);
  write(*n, 0, bytes);
  ASSERT_EQ(flush(*n), 0);
  const std::uint64_t stored_before = store_->get_inode(n->ino)->stored_bytes;

  const std::uint64_t new_size = k_slot + 12345;
  {
    std::unique_lock lock(n->data_mutex);
    data_->wait_in_flight(lock, *n);
    store::transaction txn;
    store::inode_record r = n->record;
    r.size = new_size;
    r.stored_bytes = data_->plan_truncate(*n, r.stored_bytes, new_size, txn);
    txn.put_inode(r);
    {
      std::lock_guard meta(meta_);
      commit(txn, false, {}, nullptr, fs::while_committing::all_wait);
      n->record = r;
      n->persisted_size = new_size;
    }
    data_->apply_truncate(*n, new_size);
  }
  EXPECT_EQ(n->size, new_size);
  EXPECT_LT(store_->get_inode(n->ino)->stored_bytes, stored_before);
  // No extent reaches past the new end (the one across it was shortened).
  for (const auto& [offset, extent] :
       store_->extents(n->ino, new_size, std::numeric_limits<std::uint64_t>::max()))
    EXPECT_LE(offset + extent.length, new_size) << offset;
  EXPECT_EQ(read_stored(n->ino), bytes.substr(0, new_size));
}

TEST_F(data_path_test, writers_over_the_bound_on_bytes_in_flight_wait_and_all_their_data_lands) {
  // Room for one slot in flight: each further slot waits for a commit.
  data_->stop_committer();
  options_.max_staged_bytes = k_slot;
  start();
  const std::shared_ptr<node> a = new_file();
  const std::shared_ptr<node> b = new_file();
  const std::string bytes_a = test::random_bytes(4 * k_slot, 4);
  const std::string bytes_b = test::random_bytes(3 * k_slot + 7, 5);
  std::thread other([&] {
    write(*b, 0, bytes_b);
    EXPECT_EQ(flush(*b), 0);
  });
  write(*a, 0, bytes_a);
  EXPECT_EQ(flush(*a), 0);
  other.join();
  EXPECT_EQ(read_stored(a->ino), bytes_a);
  EXPECT_EQ(read_stored(b->ino), bytes_b);
}

}  // namespace
}  // namespace densefs::fs
