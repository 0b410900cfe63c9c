#include "store/object/s3_object_store.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "store/error.h"
#include "store/log.h"
#include "store/text.h"

namespace densefs::store {

struct s3_object_store::request {
  std::string method;  // GET, PUT, HEAD, DELETE
  std::string path;    // "/bucket/key", not encoded
  std::map<std::string, std::string> query;
  std::string_view body;
  std::string range;  // "bytes=A-B" or empty
  // Bytes of body buffered at most; a longer answer fails the request.
  std::size_t max_answer = k_max_listing_bytes;
  std::string what;  // "GET s3://bucket/key" for messages
};

struct s3_object_store::response {
  long status = 0;
  std::string body;
  std::uint64_t content_length = 0;  // HEAD
  bool has_content_length = false;
};

namespace {

std::string sha256_hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return to_hex({reinterpret_cast<const char*>(digest), sizeof digest});
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n))
    throw store_error(EIO, "signing an S3 request: HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(out), n);
}

void ensure_curl_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      throw store_error(EIO, "cannot initialise libcurl");
  });
}

struct body_sink {
  std::string* out;
  std::size_t max;
  bool overflow = false;
};

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* sink = static_cast<body_sink*>(user);
  const std::size_t n = size * count;
  if (sink->out->size() + n > sink->max) {
    sink->overflow = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  sink->out->append(data, n);
  return n;
}

// Transport failures worth another try: the service or the path to it may
// come back.
bool transient(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

bool transient(long status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

// The text of the first <tag>...</tag> in `xml` from `from` on (no
// attributes, no nesting: S3's answers), entities decoded; nullopt when
// absent. `next` gets the position after it.
std::optional<std::string> xml_text(std::string_view xml, std::string_view tag, std::size_t from,
                                    std::size_t* next = nullptr) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const std::size_t a = xml.find(open, from);
  if (a == std::string_view::npos) return std::nullopt;
  const std::size_t b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) return std::nullopt;
  if (next) *next = b + close.size();
  const std::string_view raw = xml.substr(a + open.size(), b - a - open.size());
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '&') {
      out += raw[i];
      continue;
    }
    const std::size_t semi = raw.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10)
      throw store_error(EIO, "an S3 answer has a malformed XML entity");
    const std::string_view name = raw.substr(i + 1, semi - i - 1);
    if (name == "amp") {
      out += '&';
    } else if (name == "lt") {
      out += '<';
    } else if (name == "gt") {
      out += '>';
    } else if (name == "quot") {
      out += '"';
    } else if (name == "apos") {
      out += '\'';
    } else if (name.size() >= 2 && name[0] == '#') {
      const bool is_hex = name[1] == 'x' || name[1] == 'X';
      const std::string digits(name.substr(is_hex ? 2 : 1));
      char* end = nullptr;
      const unsigned long cp = std::strtoul(digits.c_str(), &end, is_hex ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp == 0 || cp > 0x10ffff)
        throw store_error(EIO, "an S3 answer has a malformed XML character reference");
      // UTF-8
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
      }
    } else {
      throw store_error(EIO, "an S3 answer has an unknown XML entity");
    }
    i = semi;
  }
  return out;
}

// "HTTP 403 (SignatureDoesNotMatch)" from an error answer.
std::string describe_failure(const s3_object_store::response& r) {
  std::string text = "HTTP " + std::to_string(r.status);
  try {
    if (const auto code = xml_text(r.body, "Code", 0)) {
      std::string printable;
      for (const char c : code->substr(0, 64))
        if (c >= 0x20 && c < 0x7f) printable += c;
      text += " (" + printable + ")";
    }
  } catch (const store_error&) {
  }
  return text;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

s3_options parse_s3_url(std::string_view url) {
  const auto bad = [&](const std::string& why) {
    return store_error(EINVAL, "\"" + std::string(url.substr(0, 200)) +
                                   "\" is not an S3 location (s3://BUCKET[/PREFIX]?endpoint="
                                   "http://HOST:PORT[&region=R]): " +
                                   why);
  };
  if (!url.starts_with("s3://")) throw bad("it does not start with s3://");
  std::string_view rest = url.substr(5);
  std::string_view query;
  if (const std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  s3_options o;
  const std::size_t slash = rest.find('/');
  o.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) o.prefix = std::string(rest.substr(slash + 1));
  if (o.bucket.empty() || o.bucket.size() > 63) throw bad("no bucket, or a name over 63 bytes");
  for (const char c : o.bucket)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
      throw bad("a bucket name has lowercase letters, digits, '-' and '.' only");
  if (!o.prefix.empty() && o.prefix.back() != '/') o.prefix += '/';
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const std::size_t eq = pair.find('=');
    if (eq == std::string_view::npos) throw bad("a parameter without a value");
    const std::string_view key = pair.substr(0, eq);
    const std::string value(pair.substr(eq + 1));
    if (key == "endpoint") {
      o.endpoint = value;
    } else if (key == "region") {
      o.region = value;
    } else {
      throw bad("unknown parameter " + std::string(key));
    }
  }
  if (!o.endpoint.starts_with("http://") && !o.endpoint.starts_with("https://"))
    throw bad("endpoint= must be an http:// or https:// URL");
  while (o.endpoint.ends_with('/')) o.endpoint.pop_back();
  return o;
}

std::string describe_s3(const s3_options& o) {
  return "s3://" + o.bucket + "/" + o.prefix + " at " + o.endpoint;
}

s3_object_store::s3_object_store(s3_options options) : options_(std::move(options)) {
  ensure_curl_initialized();
  if (options_.access_key.empty()) options_.access_key = env("AWS_ACCESS_KEY_ID");
  if (options_.secret_key.empty()) options_.secret_key = env("AWS_SECRET_ACCESS_KEY");
  if (options_.access_key.empty() || options_.secret_key.empty())
    throw store_error(EINVAL, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  if (options_.ca_bundle.empty()) options_.ca_bundle = env("AWS_CA_BUNDLE");
  // Checked here, not at the first request: a path that does not open would
  // otherwise fail every request as a TLS error after all its retries.
  if (!options_.ca_bundle.empty() && ::access(options_.ca_bundle.c_str(), R_OK) != 0)
    throw store_error(EINVAL, "AWS_CA_BUNDLE " + options_.ca_bundle + ": " + std::strerror(errno) +
                                  " (name a readable PEM file of the S3 endpoint's CA)");
  if (options_.tries < 1) options_.tries = 1;
  std::string_view rest = options_.endpoint;
  rest.remove_prefix(rest.find("://") + 3);
  host_ = std::string(rest.substr(0, rest.find('/')));
  if (host_.empty()) throw store_error(EINVAL, "S3 endpoint " + options_.endpoint + " has no host");
  where_ = describe_s3(options_);
}

s3_object_store::~s3_object_store() {
  for (void* h : handles_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* s3_object_store::take_handle() {
  {
    std::lock_guard lock(handles_mutex_);
    if (!handles_.empty()) {
      void* h = handles_.back();
      handles_.pop_back();
      return h;
    }
  }
  CURL* h = curl_easy_init();
  if (!h) throw store_error(ENOMEM, "cannot create a libcurl handle");
  return h;
}

void s3_object_store::give_back(void* curl) {
  std::lock_guard lock(handles_mutex_);
  handles_.push_back(curl);
}

s3_object_store::response s3_object_store::send_once(const request& r, void* handle) {
  CURL* curl = static_cast<CURL*>(handle);
  curl_easy_reset(curl);

  // --- Signature Version 4.
  char amz_date[17];
  char date[9];
  const std::time_t t = std::time(nullptr);
  struct tm utc {};
  gmtime_r(&t, &utc);
  std::strftime(amz_date, sizeof amz_date, "%Y%m%dT%H%M%SZ", &utc);
  std::strftime(date, sizeof date, "%Y%m%d", &utc);
  const std::string payload_hash = sha256_hex(r.body);
  const std::string canonical_path = percent_encode(r.path, true);
  std::string canonical_query;
  for (const auto& [k, v] : r.query) {  // std::map: sorted by name
    if (!canonical_query.empty()) canonical_query += '&';
    canonical_query += percent_encode(k) + "=" + percent_encode(v);
  }
  const std::string signed_headers = "host;x-amz-content-sha256;x-amz-date";
  const std::string canonical_request =
      r.method + "\n" + canonical_path + "\n" + canonical_query + "\nhost:" + host_ +
      "\nx-amz-content-sha256:" + payload_hash + "\nx-amz-date:" + amz_date + "\n\n" +
      signed_headers + "\n" + payload_hash;
  const std::string scope = std::string(date) + "/" + options_.region + "/s3/aws4_request";
  const std::string string_to_sign = std::string("AWS4-HMAC-SHA256\n") + amz_date + "\n" + scope +
                                     "\n" + sha256_hex(canonical_request);
  std::string key = hmac_sha256("AWS4" + options_.secret_key, date);
  key = hmac_sha256(key, options_.region);
  key = hmac_sha256(key, "s3");
  key = hmac_sha256(key, "aws4_request");
  const std::string mac = hmac_sha256(key, string_to_sign);
  const std::string authorization =
      "Authorization: AWS4-HMAC-SHA256 Credential=" + options_.access_key + "/" + scope +
      ", SignedHeaders=" + signed_headers + ", Signature=" + to_hex(mac);

  struct header_list {
    curl_slist* list = nullptr;
    ~header_list() { curl_slist_free_all(list); }
    void add(const std::string& h) {
      curl_slist* l = curl_slist_append(list, h.c_str());
      if (!l) throw store_error(ENOMEM, "building an S3 request");
      list = l;
    }
  } headers;
  headers.add(authorization);
  headers.add(std::string("x-amz-date: ") + amz_date);
  headers.add("x-amz-content-sha256: " + payload_hash);
  if (!r.range.empty()) headers.add("Range: " + r.range);
  headers.add("Expect:");  // no 100-continue round trip before a body

  std::string url = options_.endpoint + canonical_path;
  if (!canonical_query.empty()) url += "?" + canonical_query;

  response out;
  body_sink sink{&out.body, r.max_answer};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, options_.connect_timeout_ms);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options_.low_speed_timeout_s);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!options_.ca_bundle.empty())
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_bundle.c_str());
  if (r.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (r.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    headers.add("Content-Type: application/octet-stream");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);
  } else if (r.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }

  const CURLcode c = curl_easy_perform(curl);
  count_request(r);
  if (sink.overflow)
    throw store_error(EIO, r.what + ": the answer is larger than the " +
                               std::to_string(r.max_answer) + " bytes expected");
  if (c != CURLE_OK) {
    out.status = -static_cast<long>(c);  // a transport failure, for send()
    out.body = curl_easy_strerror(c);
    if (c == CURLE_PEER_FAILED_VERIFICATION || c == CURLE_SSL_CACERT_BADFILE)
      out.body +=
          " (is the endpoint's certificate issued by a CA this machine trusts? Set "
          "AWS_CA_BUNDLE to that CA's PEM file, or add it to the system's CAs with "
          "update-ca-certificates)";
    return out;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.status);
  bytes_received_.fetch_add(out.body.size(), std::memory_order_relaxed);
  curl_off_t length = -1;
  if (curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK &&
      length >= 0) {
    out.content_length = static_cast<std::uint64_t>(length);
    out.has_content_length = true;
  }
  return out;
}

void s3_object_store::count_request(const request& r) {
  std::atomic<std::uint64_t>& kind = r.method == "PUT"      ? puts_
                                     : r.method == "HEAD"   ? heads_
                                     : r.method == "DELETE" ? deletes_
                                     : r.query.empty()      ? gets_
                                                            : lists_;
  kind.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(r.body.size(), std::memory_order_relaxed);
}

object_store::request_counts s3_object_store::requests() const {
  request_counts c;
  c.puts = puts_.load(std::memory_order_relaxed);
  c.gets = gets_.load(std::memory_order_relaxed);
  c.heads = heads_.load(std::memory_order_relaxed);
  c.lists = lists_.load(std::memory_order_relaxed);
  c.deletes = deletes_.load(std::memory_order_relaxed);
  c.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  c.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  c.retries = retries_.load(std::memory_order_relaxed);
  c.failures = failures_.load(std::memory_order_relaxed);
  return c;
}

s3_object_store::response s3_object_store::send(const request& r) {
  std::chrono::milliseconds delay(100);
  for (int attempt = 1;; ++attempt) {
    void* h = take_handle();
    response out;
    try {
      out = send_once(r, h);
    } catch (...) {
      curl_easy_cleanup(static_cast<CURL*>(h));
      throw;
    }
    give_back(h);
    const bool failed_transport = out.status < 0;
    const bool again =
        failed_transport ? transient(static_cast<CURLcode>(-out.status)) : transient(out.status);
    if (!again) {
      if (failed_transport) {
        failures_.fetch_add(1, std::memory_order_relaxed);
        throw store_error(EIO, r.what + ": " + out.body);
      }
      return out;
    }
    const std::string why = failed_transport ? out.body : describe_failure(out);
    if (attempt >= options_.tries) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      throw store_error(EIO, r.what + ": " + why + " (" + std::to_string(attempt) + " tries)");
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
    log_info(r.what + ": " + why + "; trying again in " + std::to_string(delay.count()) + " ms");
    std::this_thread::sleep_for(delay);
    delay *= 4;
  }
}

void s3_object_store::create_bucket() {
  request r;
  r.method = "PUT";
  r.path = "/" + options_.bucket;
  r.what = "creating bucket " + options_.bucket + " at " + options_.endpoint;
  const response a = send(r);
  if (a.status == 200) return;
  if (a.status == 409 && a.body.find("BucketAlreadyOwnedByYou") != std::string::npos) return;
  throw store_error(a.status == 403 ? EACCES : EIO, r.what + ": " + describe_failure(a));
}

void s3_object_store::put(std::string_view name, std::string_view bytes) {
  request r;
  r.method = "PUT";
  r.path = "/" + options_.bucket + "/" + options_.prefix + std::string(name);
  r.body = bytes;
  r.what = "PUT s3://" + options_.bucket + "/" + options_.prefix + std::string(name);
  const response a = send(r);
  if (a.status != 200) throw store_error(EIO, r.what + ": " + describe_failure(a));
}

std::string s3_object_store::get_range(std::string_view name, std::uint64_t offset,
                                       std::uint32_t length) {
  if (length == 0) return {};
  request r;
  r.method = "GET";
  r.path = "/" + options_.bucket + "/" + options_.prefix + std::string(name);
  r.range = "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
  r.max_answer = length;
  r.what =
      "GET s3://" + options_.bucket + "/" + options_.prefix + std::string(name) + " " + r.range;
  response a = send(r);
  // 206 for the range; 200 is the whole object, right only when the range
  // was all of it.
  if (a.status != 206 && !(a.status == 200 && offset == 0))
    throw store_error(EIO, r.what + ": " + describe_failure(a));
  if (a.body.size() != length)
    throw store_error(EIO, r.what + ": " + std::to_string(a.body.size()) + " bytes instead of " +
                               std::to_string(length) + " (the object is shorter)");
  return std::move(a.body);
}

std::optional<std::uint64_t> s3_object_store::size(std::string_view name) {
  request r;
  r.method = "HEAD";
  r.path = "/" + options_.bucket + "/" + options_.prefix + std::string(name);
  r.what = "HEAD s3://" + options_.bucket + "/" + options_.prefix + std::string(name);
  const response a = send(r);
  if (a.status == 404) return std::nullopt;
  if (a.status != 200 || !a.has_content_length)
    throw store_error(EIO, r.what + ": " + describe_failure(a));
  return a.content_length;
}

void s3_object_store::remove(std::string_view name) {
  request r;
  r.method = "DELETE";
  r.path = "/" + options_.bucket + "/" + options_.prefix + std::string(name);
  r.what = "DELETE s3://" + options_.bucket + "/" + options_.prefix + std::string(name);
  const response a = send(r);
  if (a.status != 204 && a.status != 200 && a.status != 404)
    throw store_error(EIO, r.what + ": " + describe_failure(a));
}

std::vector<object_store::object_info> s3_object_store::list(std::string_view prefix) {
  std::vector<object_info> objects;
  std::string token;
  const std::string full_prefix = options_.prefix + std::string(prefix);
  for (;;) {
    request r;
    r.method = "GET";
    r.path = "/" + options_.bucket;
    r.query["list-type"] = "2";
    r.query["prefix"] = full_prefix;
    if (!token.empty()) r.query["continuation-token"] = token;
    r.what = "listing s3://" + options_.bucket + "/" + full_prefix;
    const response a = send(r);
    if (a.status != 200) throw store_error(EIO, r.what + ": " + describe_failure(a));
    // One <Contents> element per object, holding its <Key> and <Size>.
    const std::string_view body = a.body;
    std::size_t at = 0;
    for (;;) {
      const std::size_t open = body.find("<Contents>", at);
      if (open == std::string_view::npos) break;
      const std::size_t close = body.find("</Contents>", open);
      if (close == std::string_view::npos)
        throw store_error(EIO, r.what + ": the answer has an unterminated <Contents>");
      const std::string_view entry = body.substr(open, close - open);
      at = close + 11;
      const auto key = xml_text(entry, "Key", 0);
      const auto size = xml_text(entry, "Size", 0);
      if (!key || !size || size->empty() || size->size() > 19 ||
          !std::all_of(size->begin(), size->end(), [](char c) { return c >= '0' && c <= '9'; }))
        throw store_error(EIO, r.what + ": the answer has an object without a key or size");
      if (!key->starts_with(full_prefix))
        throw store_error(EIO, r.what + ": the answer names an object outside the prefix");
      object_info o;
      o.name = key->substr(options_.prefix.size());
      o.size = std::stoull(*size);
      if (!objects.empty() && o.name <= objects.back().name)
        throw store_error(EIO, r.what + ": the answer is not in key order");
      objects.push_back(std::move(o));
    }
    const auto truncated = xml_text(a.body, "IsTruncated", 0);
    if (!truncated || *truncated != "true") break;
    const auto next = xml_text(a.body, "NextContinuationToken", 0);
    if (!next || next->empty() || *next == token)
      throw store_error(EIO, r.what + ": a truncated listing without a new continuation token");
    token = *next;
  }
  return objects;
}

}  // namespace densefs::store
