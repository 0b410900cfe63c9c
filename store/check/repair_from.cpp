#include "store/check/repair_from.h"

#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string_view>

#include "codec/chunker.h"
#include "codec/classify.h"
#include "codec/codec.h"
#include "store/error.h"
#include "store/hash.h"
#include "store/records.h"
#include "store/store.h"

namespace densefs::store {

namespace {

// Reads up to `n` bytes (fewer only at the end of the file); throws
// store_error on a read error.
std::string read_some(int fd, std::size_t n, const std::filesystem::path& path) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, out.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw store_error(errno, "cannot read " + path.string());
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

class healer {
 public:
  healer(store& s, const repair_from_options& o, repair_from_report& r) : s_(s), o_(o), r_(r) {
    for (const chunk_hash& h : s_.damaged_chunk_list()) {
      const auto rec = s_.get_chunk(h);
      if (rec) damaged_.emplace(h, rec->codec);  // a deleted chunk needs nothing
    }
    r_.damaged = damaged_.size();
    // Each distinct chunker of the policy: which one cut a file depended on
    // its type then, and a source may be classified otherwise now.
    for (const codec::chunker_spec& c : s_.policy().chunking) {
      bool seen = false;
      for (const codec::chunker_spec& k : chunkers_) seen = seen || k == c;
      if (!seen) chunkers_.push_back(c);
    }
  }

  bool done() const { return remaining() == 0; }
  std::size_t remaining() const { return damaged_.size() - healed_.size(); }

  void read_file(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0) return;  // unreadable: not a source
    try {
      read_open_file(fd, path);
    } catch (const store_error&) {
      // a read error: this file is no source; the report names what is left
    }
    ::close(fd);
    ++r_.files_read;
  }

  void finish() {
    for (const auto& [h, how] : damaged_)
      if (!healed_.count(h) && r_.not_found.size() < o_.max_examples)
        r_.not_found.push_back("chunk " + h.hex() +
                               (how == codec::codec_id::lepton_file
                                    ? " (a Lepton file: copy its JPEG in again)"
                                    : ""));
    r_.healed = healed_.size();
  }

 private:
  void read_open_file(int fd, const std::filesystem::path& path) {
    std::string before;  // the end of the previous slot, for content-defined cuts
    codec::file_type type = codec::file_type::unknown;
    for (std::uint64_t index = 0;; ++index) {
      const std::string slot = read_some(fd, k_chunk_size, path);
      if (slot.empty()) break;
      r_.bytes_read += slot.size();
      if (index == 0)
        type = codec::classify(std::string_view(slot).substr(0, codec::k_classify_head_bytes),
                               path.filename().string());
      for (const codec::chunker_spec& c : chunkers_) {
        std::size_t begin = 0;
        for (const std::size_t end : codec::chunk_ends(slot, c, before)) {
          offer(std::string_view(slot).substr(begin, end - begin), type, path);
          begin = end;
        }
      }
      if (done()) return;
      std::size_t keep = 0;
      for (const codec::chunker_spec& c : chunkers_)
        keep = std::max(keep, codec::chunk_context_bytes(c));
      before = slot.substr(slot.size() - std::min(keep, slot.size()));
      if (slot.size() < k_chunk_size) break;
    }
  }

  void offer(std::string_view plain, codec::file_type type, const std::filesystem::path& path) {
    const chunk_hash h = sha256_of(plain);
    const auto it = damaged_.find(h);
    if (it == damaged_.end() || healed_.count(h) || it->second == codec::codec_id::lepton_file)
      return;
    const auto rec = s_.get_chunk(h);
    if (!rec || rec->plain_size != plain.size()) return;
    codec::encoded_chunk encoded = codec::encode_chunk(plain, s_.policy().for_type(type));
    transaction t;
    t.replace_payload(h, rec->checksum, std::move(encoded), true);  // `plain` hashes to h
    s_.commit(t, true);
    // A swap applies only to the record it was made for: healed when the
    // mark went with it.
    if (s_.is_damaged(h)) return;
    healed_.insert(h);
    if (r_.healed_from.size() < o_.max_examples)
      r_.healed_from.push_back("chunk " + h.hex() + " from " + path.string());
  }

  store& s_;
  const repair_from_options& o_;
  repair_from_report& r_;
  std::map<chunk_hash, codec::codec_id> damaged_;
  std::set<chunk_hash> healed_;
  std::vector<codec::chunker_spec> chunkers_;
};

}  // namespace

repair_from_report repair_from(store& s, const std::filesystem::path& source,
                               const repair_from_options& options) {
  repair_from_report r;
  healer h(s, options, r);
  if (h.done()) return r;
  std::error_code ec;
  const auto dir_options = std::filesystem::directory_options::skip_permission_denied;
  if (std::filesystem::is_regular_file(source, ec)) {
    h.read_file(source);
  } else {
    std::filesystem::recursive_directory_iterator it(source, dir_options, ec);
    if (ec) throw store_error(ec.value(), "cannot read " + source.string() + ": " + ec.message());
    for (; it != std::filesystem::recursive_directory_iterator() && !h.done(); it.increment(ec)) {
      if (ec) break;
      if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
      h.read_file(it->path());
      if (options.progress) options.progress(r.files_read, r.bytes_read);
    }
  }
  h.finish();
  return r;
}

}  // namespace densefs::store
