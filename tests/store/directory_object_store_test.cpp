// The directory object store: the cases every object store passes
// (object_store_cases.h, which the S3 store passes against radosgw), and
// what is its own: names that would reach outside the directory, hidden
// temporary files, and objects that are files anyone can look at.
#include "store/object/directory_object_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/store/object_store_cases.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

using test_cases::error_of;

class directory_object_store_test : public ::testing::Test {
 protected:
  test::temp_dir tmp_;
  directory_object_store store_{tmp_ / "objects"};
};

TEST_F(directory_object_store_test, an_object_reads_back_exactly_in_any_range) {
  test_cases::an_object_reads_back_exactly_in_any_range(store_);
}

TEST_F(directory_object_store_test, reads_past_the_end_or_of_missing_objects_are_eio_naming_them) {
  test_cases::reads_past_the_end_or_of_missing_objects_are_eio_naming_them(
      store_, (tmp_ / "objects" / "a").string());
}

TEST_F(directory_object_store_test, remove_and_list_in_order) {
  test_cases::remove_and_list_in_order(store_, 40);  // no pages: each put syncs
}

TEST_F(directory_object_store_test, names_with_odd_bytes_round_trip) {
  test_cases::names_with_odd_bytes_round_trip(store_);
}

TEST_F(directory_object_store_test, threads_share_one_store) {
  test_cases::threads_share_one_store(store_);
}

TEST_F(directory_object_store_test, an_object_is_the_file_of_its_name_private_to_its_owner) {
  store_.put("packs/00000002.pack", "bytes");
  std::ifstream in(tmp_ / "objects" / "packs" / "00000002.pack");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "bytes");
  struct stat st {};
  ASSERT_EQ(::stat((tmp_ / "objects" / "packs" / "00000002.pack").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(directory_object_store_test, names_that_would_reach_outside_or_hide_are_refused) {
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "a/", "./a", ".hidden",
                          "packs/.tmp-1-2-x"}) {
    EXPECT_EQ(error_of([&] { store_.put(bad, "x"); }), EINVAL) << bad;
    EXPECT_EQ(error_of([&] { (void)store_.size(bad); }), EINVAL) << bad;
    EXPECT_EQ(error_of([&] { store_.remove(bad); }), EINVAL) << bad;
  }
  EXPECT_EQ(error_of([&] { store_.put(std::string("nul\0byte", 8), "x"); }), EINVAL);
  EXPECT_EQ(error_of([&] { store_.put(std::string(256, 'n'), "x"); }), EINVAL);
  EXPECT_TRUE(store_.list("").empty());
}

TEST_F(directory_object_store_test, a_put_cut_short_leaves_nothing_a_list_or_read_sees) {
  // What a crash in the middle of a put leaves: its hidden temporary file.
  std::filesystem::create_directories(tmp_ / "objects" / "packs");
  std::ofstream(tmp_ / "objects" / "packs" / ".tmp-1-0-00000003.pack") << "half";
  EXPECT_TRUE(store_.list("").empty());
  EXPECT_EQ(store_.size("packs/00000003.pack"), std::nullopt);
  store_.put("packs/00000003.pack", "whole");
  const std::vector<object_store::object_info> listed = store_.list("packs/");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0], (object_store::object_info{"packs/00000003.pack", 5}));
}

TEST_F(directory_object_store_test, listing_is_in_byte_order_of_whole_names) {
  // '-' (0x2d) sorts before '/' (0x2f): a walk of the tree would list
  // "a/b" first.
  store_.put("a/b", "1");
  store_.put("a-b", "2");
  std::vector<std::string> names;
  for (const auto& o : store_.list("a")) names.push_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a-b", "a/b"}));
}

}  // namespace
}  // namespace densefs::store
