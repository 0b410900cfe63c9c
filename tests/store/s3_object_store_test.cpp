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

#include "store/error.h"
#include "tests/store/object_store_cases.h"

namespace densefs::store {
namespace {

using test_cases::error_of;

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

// The cases every object store passes (tests/store/object_store_cases.h).
TEST_F(s3_object_store_test, an_object_reads_back_exactly_in_any_range) {
  test_cases::an_object_reads_back_exactly_in_any_range(*s3_);
}

TEST_F(s3_object_store_test, reads_past_the_end_or_of_missing_objects_are_eio_naming_them) {
  test_cases::reads_past_the_end_or_of_missing_objects_are_eio_naming_them(*s3_, "volume/a");
}

TEST_F(s3_object_store_test, remove_and_list_in_order_across_pages) {
  test_cases::remove_and_list_in_order(*s3_, 1005);  // more than one page of 1,000 keys
}

TEST_F(s3_object_store_test, names_with_odd_bytes_round_trip) {
  test_cases::names_with_odd_bytes_round_trip(*s3_);
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
  test_cases::threads_share_one_store(*s3_);
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

// A CA file that does not open is named at once, with the fix, instead of
// failing every request as a TLS error after its retries.
TEST(s3_ca_bundle, a_file_that_does_not_open_is_refused_naming_it) {
  s3_options o = parse_s3_url("s3://b?endpoint=https://s3.example.com");
  o.access_key = "AKIDEXAMPLE";
  o.secret_key = "secret";
  o.ca_bundle = "/nonexistent/densefs-test-ca.crt";
  try {
    s3_object_store store(o);
    FAIL() << "a missing CA file was accepted";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/densefs-test-ca.crt"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("readable PEM file"), std::string::npos) << e.what();
  }
  o.ca_bundle.clear();
  ::setenv("AWS_CA_BUNDLE", "/nonexistent/from-the-environment.crt", 1);
  EXPECT_EQ(error_of([&] { s3_object_store from_env(o); }), EINVAL);
  ::unsetenv("AWS_CA_BUNDLE");
  EXPECT_NO_THROW(s3_object_store plain(o));
}

}  // namespace
}  // namespace densefs::store
