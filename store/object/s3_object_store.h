// object_store on any S3-compatible service (AWS S3, Ceph radosgw, MinIO,
// ...) over HTTP(S) with libcurl: path-style URLs (endpoint/bucket/key, which
// every S3-compatible server takes, also on an IP address), requests signed
// with AWS Signature Version 4 (HMAC-SHA256 from OpenSSL), payloads hashed
// into the signature (x-amz-content-sha256), so a body damaged in transit is
// refused by the server.
//
// Retries: a request that fails to connect, times out, or gets HTTP 500,
// 502, 503, 504 or a 429 is retried with exponential backoff (0.1 s, 0.4 s,
// 1.6 s, 6.4 s: 5 tries in about 8.5 s), then fails with EIO and one line
// naming the object. A 4xx answer is not retried (403: wrong credentials,
// 404: no such object). Objects are immutable once written, so every
// request may be repeated.
//
// Credentials come from the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY) or the options; they appear in no message. An
// https endpoint is verified against the system's CA certificates, or
// against AWS_CA_BUNDLE (the AWS tools' name for a private CA's file).
//
// Untrusted input: every answer's size is bounded before it is buffered (a
// ranged GET takes at most the length asked for, a listing page at most
// k_max_listing_bytes), and listings are parsed strictly.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/object/object_store.h"

namespace densefs::store {

struct s3_options {
  // Scheme, host and port: "http://127.0.0.1:7480", "https://s3.example.com".
  std::string endpoint;
  std::string bucket;
  // Object names are prefix + name; "" or ending in '/'.
  std::string prefix;
  std::string region = "us-east-1";
  // Empty: from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
  std::string access_key;
  std::string secret_key;
  // PEM file of the CA certificates an https endpoint is verified against.
  // Empty: from AWS_CA_BUNDLE, else the system's (libcurl's default).
  std::string ca_bundle;
  int tries = 5;
  // Each request's limit: connecting, and then without any progress.
  long connect_timeout_ms = 10'000;
  long low_speed_timeout_s = 30;
};

// Parses "s3://bucket/prefix?endpoint=http://host:port&region=R" into
// options (credentials from the environment). Throws store_error(EINVAL)
// with one line for anything else.
s3_options parse_s3_url(std::string_view url);
// "s3://bucket/prefix at endpoint": how messages and `densefs status` name
// a location (no credential).
std::string describe_s3(const s3_options& o);

// The largest listing page densefs buffers (a page of 1,000 keys is about
// 300 KiB of XML).
inline constexpr std::size_t k_max_listing_bytes = 16u << 20;

class s3_object_store final : public object_store {
 public:
  // Checks nothing over the network; the first request does.
  explicit s3_object_store(s3_options options);
  ~s3_object_store() override;

  const std::string& where() const override { return where_; }
  void put(std::string_view name, std::string_view bytes) override;
  std::string get_range(std::string_view name, std::uint64_t offset, std::uint32_t length) override;
  std::optional<std::uint64_t> size(std::string_view name) override;
  void remove(std::string_view name) override;
  std::vector<object_info> list(std::string_view prefix) override;
  request_counts requests() const override;

  // Creates the bucket (mkfs of a new volume; tests). An existing bucket of
  // this owner is no error.
  void create_bucket();

  // The parts of one request and its answer; public for the .cpp's helpers.
  struct request;
  struct response;

 private:
  response send(const request& r);
  response send_once(const request& r, void* curl);
  void count_request(const request& r);
  void* take_handle();
  void give_back(void* curl);

  s3_options options_;
  std::string where_;
  std::string host_;  // the Host header: host[:port] of the endpoint
  std::mutex handles_mutex_;
  // Idle curl easy handles (CURL*): each keeps its connection alive for the
  // next request.
  std::vector<void*> handles_;

  // requests(): counted by send_once, each try.
  std::atomic<std::uint64_t> puts_{0}, gets_{0}, heads_{0}, lists_{0}, deletes_{0};
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0};
  std::atomic<std::uint64_t> retries_{0}, failures_{0};
};

}  // namespace densefs::store
