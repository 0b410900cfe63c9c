// The S3 object store against a real S3-compatible server. The server comes
// from tests/mount/s3_object_store_test.sh (tests/mount/s3_lib.sh starts it
// on loopback), which runs these cases with DENSEFS_TEST_S3_ENDPOINT and
// the credentials set; without them the cases that need a server skip.
// parse_s3_url needs none.
#include "store/object/s3_object_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <random>
#include <thread>

#include "store/error.h"
#include "tests/random_bytes.h"

namespace densefs::store {
namespace {

using test::random_bytes;

template <typename F>
int error_of(F&& f) {
  try {
    f();
  } catch (const store_error& e) {
    return e.error_number();
  }
  return 0;
}

class s3_object_store_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* endpoint = std::getenv("DENSEFS_TEST_S3_ENDPOINT");
    if (!endpoint || !*endpoint)
      GTEST_SKIP() << "no S3 server (tests/mount/s3_object_store_test.sh runs these with one)";
    options_.endpoint = endpoint;
    // A bucket per test: tests do not see each other's objects.
    static std::atomic<int> next{0};
    options_.bucket = "densefs-test-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
    options_.prefix = "volume/";
    s3_ = std::make_unique<s3_object_store>(options_);
    s3_->create_bucket();
  }

  s3_options options_;
  std::unique_ptr<s3_object_store> s3_;
};

TEST_F(s3_object_store_test, an_object_reads_back_exactly_in_any_range) {
  const std::string bytes = random_bytes(9u << 20, 1);
  s3_->put("packs/00000001.pack", bytes);
  EXPECT_EQ(s3_->size("packs/00000001.pack"), bytes.size());
  EXPECT_EQ(s3_->get_range("packs/00000001.pack", 0, 64), bytes.substr(0, 64));
  EXPECT_EQ(s3_->get_range("packs/00000001.pack", 4u << 20, 1u << 20),
            bytes.substr(4u << 20, 1u << 20));
  EXPECT_EQ(s3_->get_range("packs/00000001.pack", bytes.size() - 1, 1),
            bytes.substr(bytes.size() - 1));
  EXPECT_EQ(s3_->get_range("packs/00000001.pack", 0, static_cast<std::uint32_t>(bytes.size())),
            bytes);
  EXPECT_EQ(s3_->get_range("packs/00000001.pack", 5, 0), "");
  // A replacing put.
  s3_->put("packs/00000001.pack", "short");
  EXPECT_EQ(s3_->size("packs/00000001.pack"), 5u);
  EXPECT_EQ(s3_->get_range("packs/00000001.pack", 1, 3), "hor");
}

TEST_F(s3_object_store_test, reads_past_the_end_or_of_missing_objects_are_eio_naming_them) {
  s3_->put("a", "0123456789");
  try {
    s3_->get_range("a", 5, 10);
    FAIL() << "a range past the end was read";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EIO);
    EXPECT_NE(std::string(e.what()).find("volume/a"), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_of([&] { s3_->get_range("missing", 0, 10); }), EIO);
  EXPECT_EQ(s3_->size("missing"), std::nullopt);
}

TEST_F(s3_object_store_test, remove_and_list_in_order_across_pages) {
  // More than one listing page (1,000 keys).
  constexpr int k_objects = 1005;
  for (int i = 0; i < k_objects; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "packs/%08d.pack", i);
    s3_->put(name, std::to_string(i));
  }
  s3_->put("other/x", "not a pack");
  const std::vector<object_store::object_info> packs = s3_->list("packs/");
  ASSERT_EQ(packs.size(), static_cast<std::size_t>(k_objects));
  EXPECT_EQ(packs.front().name, "packs/00000000.pack");
  EXPECT_EQ(packs.front().size, 1u);  // "0"
  EXPECT_EQ(packs.back().name, "packs/00001004.pack");
  EXPECT_EQ(packs.back().size, 4u);  // "1004"
  EXPECT_TRUE(std::is_sorted(packs.begin(), packs.end(),
                             [](const auto& a, const auto& b) { return a.name < b.name; }));
  EXPECT_EQ(s3_->list("").size(), static_cast<std::size_t>(k_objects + 1));

  s3_->remove("packs/00000007.pack");
  s3_->remove("packs/00000007.pack");  // again: no error
  EXPECT_EQ(s3_->size("packs/00000007.pack"), std::nullopt);
  EXPECT_EQ(s3_->list("packs/0000000").size(), 9u);
}

TEST_F(s3_object_store_test, names_with_odd_bytes_round_trip) {
  const std::vector<std::string> names = {"sp ace",   "plus+sign", "per%cent",
                                          "ünï/cødé", "amp&lt;",   "tilde~dot.dash-under_"};
  for (const std::string& n : names) s3_->put(n, "content of " + n);
  for (const std::string& n : names)
    EXPECT_EQ(s3_->get_range(n, 0, static_cast<std::uint32_t>(("content of " + n).size())),
              "content of " + n)
        << n;
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> listed;
  for (const auto& o : s3_->list("")) listed.push_back(o.name);
  EXPECT_EQ(listed, sorted);
}

TEST_F(s3_object_store_test, a_wrong_secret_is_refused_without_naming_it) {
  s3_options wrong = options_;
  wrong.access_key =
      options_.access_key.empty() ? std::getenv("AWS_ACCESS_KEY_ID") : options_.access_key;
  wrong.secret_key = "not-the-secret-4f2a9c";
  s3_object_store bad(wrong);
  try {
    bad.put("x", "y");
    FAIL() << "a put with a wrong secret succeeded";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EIO);
    EXPECT_NE(std::string(e.what()).find("403"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("not-the-secret"), std::string::npos) << e.what();
    const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
    if (secret && *secret) {
      EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos);
    }
  }
  EXPECT_EQ(s3_->size("x"), std::nullopt);
}

TEST_F(s3_object_store_test, a_server_that_is_not_there_is_eio_after_the_retries) {
  s3_options gone = options_;
  gone.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  gone.tries = 2;
  s3_object_store down(gone);
  try {
    down.get_range("a", 0, 1);
    FAIL() << "a read from no server succeeded";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EIO);
    EXPECT_NE(std::string(e.what()).find("2 tries"), std::string::npos) << e.what();
  }
}

TEST_F(s3_object_store_test, threads_share_one_store) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string name = "t" + std::to_string(t) + "/" + std::to_string(i);
        const std::string bytes = random_bytes(100'000 + static_cast<std::size_t>(i), t * 100 + i);
        try {
          s3_->put(name, bytes);
          if (s3_->get_range(name, 1000, 5000) != bytes.substr(1000, 5000)) ++failures;
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(s3_->list("t3/").size(), 10u);
}

TEST(s3_url, parses_bucket_prefix_endpoint_and_region) {
  const s3_options o =
      parse_s3_url("s3://photos/vol1?endpoint=http://rgw.local:7480/&region=eu-west-1");
  EXPECT_EQ(o.bucket, "photos");
  EXPECT_EQ(o.prefix, "vol1/");
  EXPECT_EQ(o.endpoint, "http://rgw.local:7480");
  EXPECT_EQ(o.region, "eu-west-1");
  const s3_options bare = parse_s3_url("s3://b?endpoint=https://s3.example.com");
  EXPECT_EQ(bare.prefix, "");
  EXPECT_EQ(bare.region, "us-east-1");
}

TEST(s3_url, refuses_what_is_not_an_s3_location) {
  for (const char* bad :
       {"http://b/p", "s3://", "s3://Bucket?endpoint=http://h", "s3://b/p",
        "s3://b?endpoint=ftp://h", "s3://b?endpoint=http://h&colour=blue", "s3://b?endpoint"}) {
    EXPECT_EQ(error_of([&] { parse_s3_url(bad); }), EINVAL) << bad;
  }
}

}  // namespace
}  // namespace densefs::store
