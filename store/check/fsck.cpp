// fsck: one pass over each column family (through store::scan_records, so a
// record that does not decode is reported rather than fatal), then the
// cross-checks, then the repairs, each its own small write.
#include "store/check/fsck.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "codec/codec.h"
#include "codec/lepton_file.h"
#include "store/check/chunk_verifier.h"
#include "store/error.h"
#include "store/hash.h"
#include "store/records.h"
#include "store/snapshot/pre_image.h"
#include "store/snapshot/registry.h"
#include "store/store.h"

namespace densefs::store {
namespace {

struct problem_info {
  std::string_view name;
  std::string_view title;  // for the human report
  bool warning;
  bool repairable;
};

// Indexed by fsck_problem.
constexpr problem_info k_problems[k_fsck_problem_count] = {
    {"corrupt_record", "corrupt records", false, false},
    {"dangling_extent", "extents naming a missing chunk (file data lost)", false, false},
    {"extent_without_inode", "extents of a missing inode", false, false},
    {"bad_extent", "extents that overlap, cross a 4 MiB slot or pass their chunk's end", false,
     false},
    {"wrong_refcount", "wrong chunk refcounts", false, true},
    {"leaked_chunk", "leaked chunks (no extent references them)", false, true},
    {"bad_payload", "bad payloads (file data damaged)", false, false},
    {"bad_content", "chunks that do not decode to their content (file data damaged)", false, false},
    {"dangling_dirent", "directory entries naming a missing inode", false, false},
    {"dirent_outside_dir", "directory entries in a missing or non-directory parent", false, false},
    {"dirent_type_mismatch", "directory entries whose type differs from the inode's", false, false},
    {"wrong_nlink", "wrong link counts", false, true},
    {"unreachable_inode", "inodes no directory entry reaches", false, false},
    {"dangling_orphan", "orphan entries for a missing inode", false, false},
    {"dangling_queue_entry", "re-encoding queue entries for a missing chunk", false, true},
    {"stored_bytes_mismatch", "files whose stored_bytes differs from their chunks (accounting)",
     true, true},
};

const problem_info& info(fsck_problem p) {
  return k_problems[static_cast<std::size_t>(p)];
}

struct inode_state {
  std::uint32_t mode = 0;
  std::uint32_t nlink = 0;
  std::uint64_t stored_bytes = 0;
  std::uint64_t links = 0;    // directory entries naming it
  std::uint64_t subdirs = 0;  // directories: entries in it that are directories
  std::uint64_t extent_stored = 0;
  // The first entry naming it (problems name files by path).
  std::uint64_t parent = 0;
  std::string name;
};

struct chunk_state {
  chunk_record record;
  std::uint64_t refs = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> users;  // first few (ino, offset)
};
constexpr std::size_t k_users_kept = 3;

class checker {
 public:
  checker(store& s, const fsck_options& o) : s_(s), o_(o) {
    r_.deep = o.deep;
    r_.repair = o.repair;
  }

  fsck_report run() {
    if (o_.rebuild_index && s_.packs()) r_.pack_index_rebuilt += s_.rebuild_pack_index();
    scan_inodes();
    scan_dirents();
    scan_orphans();
    scan_chunks();
    scan_extents();
    scan_snapshot_extents();
    count_member_references();
    check_refcounts();
    check_payloads();
    scan_queue();
    check_inodes();
    if (o_.repair) repair();
    return std::move(r_);
  }

 private:
  void note(fsck_problem p, std::string example) {
    auto& k = r_[p];
    ++k.found;
    if (k.examples.size() < o_.max_examples) k.examples.push_back(std::move(example));
  }
  void progress(std::string_view phase, std::uint64_t done, std::uint64_t total) {
    if (o_.progress) o_.progress(phase, done, total);
  }

  void scan_inodes() {
    s_.scan_records(k_cf_inodes, {}, [&](std::string_view key, std::string_view value) {
      ++r_.inodes;
      if (key.size() != 8) {
        note(fsck_problem::corrupt_record, "inode key of " + std::to_string(key.size()) + " bytes");
        return true;
      }
      const std::uint64_t ino = decode_u64_be(key);
      try {
        const inode_record rec = decode_inode(ino, value);
        inode_state& state = inodes_[ino];
        state.mode = rec.mode;
        state.nlink = rec.nlink;
        state.stored_bytes = rec.stored_bytes;
      } catch (const std::exception& e) {
        note(fsck_problem::corrupt_record, e.what());
      }
      progress("inodes", r_.inodes, 0);
      return true;
    });
  }

  void scan_dirents() {
    s_.scan_records(k_cf_dirents, {}, [&](std::string_view key, std::string_view value) {
      ++r_.dirents;
      if (key.size() <= 8) {
        note(fsck_problem::corrupt_record,
             "directory entry key of " + std::to_string(key.size()) + " bytes");
        return true;
      }
      const std::uint64_t parent = decode_u64_be(key.substr(0, 8));
      const std::string what =
          "entry '" + printable_name(key.substr(8)) + "' in directory " + std::to_string(parent);
      dirent_record d;
      try {
        d = decode_dirent(value);
      } catch (const std::exception& e) {
        note(fsck_problem::corrupt_record, what + ": " + e.what());
        return true;
      }
      const auto p = inodes_.find(parent);
      const bool parent_ok = p != inodes_.end() && S_ISDIR(p->second.mode);
      if (!parent_ok)
        note(fsck_problem::dirent_outside_dir,
             what + (p == inodes_.end() ? ": the directory does not exist" : ": not a directory"));
      const auto c = inodes_.find(d.ino);
      if (c == inodes_.end()) {
        note(fsck_problem::dangling_dirent,
             what + " names inode " + std::to_string(d.ino) + ", which does not exist");
        return true;
      }
      ++c->second.links;
      if (c->second.name.empty()) {
        c->second.parent = parent;
        c->second.name = std::string(key.substr(8));
      }
      if (parent_ok && S_ISDIR(c->second.mode)) ++p->second.subdirs;
      if (d.type != (c->second.mode & S_IFMT))
        note(fsck_problem::dirent_type_mismatch,
             what + " (inode " + std::to_string(d.ino) + ") has type " + std::to_string(d.type) +
                 ", the inode " + std::to_string(c->second.mode & S_IFMT));
      progress("directory entries", r_.dirents, 0);
      return true;
    });
  }

  void scan_orphans() {
    s_.scan_records(k_cf_meta, k_orphan_prefix, [&](std::string_view key, std::string_view value) {
      ++r_.orphans;
      if (key.size() != k_orphan_prefix.size() + 8) {
        note(fsck_problem::corrupt_record,
             "orphan key of " + std::to_string(key.size()) + " bytes");
        return true;
      }
      const std::uint64_t ino = decode_u64_be(key.substr(k_orphan_prefix.size()));
      try {
        check_orphan(ino, value);
      } catch (const std::exception& e) {
        note(fsck_problem::corrupt_record, e.what());
        return true;
      }
      orphans_.insert(ino);
      if (!inodes_.count(ino))
        note(fsck_problem::dangling_orphan, "orphan entry for inode " + std::to_string(ino));
      return true;
    });
  }

  void scan_chunks() {
    s_.scan_records(k_cf_chunks, {}, [&](std::string_view key, std::string_view value) {
      ++r_.chunks;
      if (key.size() != chunk_hash::k_size) {
        note(fsck_problem::corrupt_record, "chunk key of " + std::to_string(key.size()) + " bytes");
        return true;
      }
      const chunk_hash hash = chunk_hash::from_bytes(key);
      try {
        chunks_[hash].record = decode_chunk(value);
      } catch (const std::exception& e) {
        note(fsck_problem::corrupt_record, "chunk " + hash.hex() + ": " + e.what());
        chunks_.erase(hash);
      }
      progress("chunks", r_.chunks, 0);
      return true;
    });
  }

  std::uint64_t last_extent_ino_ = 0;
  std::uint64_t last_extent_end_ = 0;

  void scan_extents() {
    s_.scan_records(k_cf_extents, {}, [&](std::string_view key, std::string_view value) {
      ++r_.extents;
      if (key.size() != 16) {
        note(fsck_problem::corrupt_record,
             "extent key of " + std::to_string(key.size()) + " bytes");
        return true;
      }
      const std::uint64_t ino = decode_u64_be(key.substr(0, 8));
      const std::uint64_t off = decode_u64_be(key.substr(8));
      const std::string where = file_text(ino) + " at offset " + std::to_string(off);
      extent_record e;
      try {
        e = decode_extent(value);
      } catch (const std::exception& ex) {
        note(fsck_problem::corrupt_record, "extent of " + where + ": " + ex.what());
        return true;
      }
      const auto in = inodes_.find(ino);
      if (in == inodes_.end()) {
        if (last_missing_ino_ != ino)  // one line per missing inode, not per extent
          note(fsck_problem::extent_without_inode, "extents of inode " + std::to_string(ino));
        last_missing_ino_ = ino;
      }
      // Extents come in key order: (ino, offset). The file system never
      // writes overlapping extents or one across a slot (docs/format.md);
      // reads would still work, but something wrote what it should not.
      if (ino == last_extent_ino_ && off < last_extent_end_) {
        note(fsck_problem::bad_extent, where + ": overlaps the previous extent, which ends at " +
                                           std::to_string(last_extent_end_));
      } else if (e.length == 0 || off / k_chunk_size != (off + e.length - 1) / k_chunk_size) {
        note(fsck_problem::bad_extent, where + ": " + std::to_string(e.length) +
                                           " bytes cross a 4 MiB slot boundary or are none");
      }
      last_extent_end_ =
          std::max<std::uint64_t>(off + e.length, ino == last_extent_ino_ ? last_extent_end_ : 0);
      last_extent_ino_ = ino;
      const auto c = chunks_.find(e.hash);
      if (c == chunks_.end()) {
        note(fsck_problem::dangling_extent, where + ": chunk " + e.hash.hex() + " is missing");
        ++missing_chunks_[e.hash];  // --repair looks for it in the packs
        return true;
      }
      if (std::uint64_t{e.chunk_offset} + e.length > c->second.record.plain_size) {
        note(fsck_problem::bad_extent, where + ": bytes " + std::to_string(e.chunk_offset) + ".." +
                                           std::to_string(e.chunk_offset + e.length) +
                                           " of a chunk of " +
                                           std::to_string(c->second.record.plain_size));
      }
      ++c->second.refs;
      if (c->second.users.size() < k_users_kept) c->second.users.emplace_back(ino, off);
      if (in != inodes_.end()) in->second.extent_stored += c->second.record.stored_size;
      progress("extents", r_.extents, 0);
      return true;
    });
  }

  // The extents snapshots keep (store/snapshot/pre_image_writer.h): each
  // holds one reference on its chunk, as a live extent does.
  void scan_snapshot_extents() {
    // The registry first: a record that does not decode is reported here
    // (every snapshot command and -o snapshot= refuse the volume with it),
    // as is a latest or counter that names no snapshot or is short.
    std::set<std::uint64_t> ids;
    try {
      for (const snapshot_record& r : s_.snapshots()) ids.insert(r.id);
    } catch (const std::exception& ex) {
      note(fsck_problem::corrupt_record, ex.what());
    }
    const auto id_row = [&](std::string_view key) -> std::optional<std::uint64_t> {
      std::optional<std::uint64_t> id;
      s_.scan_records(k_cf_meta, key, [&](std::string_view k, std::string_view v) {
        if (k != key) return false;
        try {
          id = decode_snapshot_id(v, k);
        } catch (const std::exception& ex) {
          note(fsck_problem::corrupt_record, ex.what());
        }
        return false;
      });
      return id;
    };
    if (const auto latest = id_row(k_snapshot_latest_key);
        latest && *latest && !ids.contains(*latest))
      note(fsck_problem::corrupt_record,
           "snapshot_latest names snapshot " + std::to_string(*latest) + ", which has no record");
    if (const auto counter = id_row(k_snapshot_counter_key);
        counter && !ids.empty() && *ids.rbegin() > *counter)
      note(fsck_problem::corrupt_record,
           "snapshot_counter is below snapshot " + std::to_string(*ids.rbegin()));
    // Every pre-image: of a snapshot that exists, and decoding; an extent
    // one keeps holds one reference on its chunk, as a live extent does.
    std::set<std::uint64_t> stray;
    s_.scan_records(
        k_cf_meta, k_pre_image_prefix, [&](std::string_view key, std::string_view value) {
          const std::optional<pre_image_row> row = parse_pre_image_key(key);
          std::optional<std::string> kept;
          extent_record e;
          try {
            if (!row) throw store_error(EIO, "not a pre-image row key");
            kept = decode_pre_image(value, "a snapshot's record");
            if (kept && row->t == table::extents) e = decode_extent(*kept);
          } catch (const std::exception& ex) {
            note(fsck_problem::corrupt_record, "a snapshot's record: " + std::string(ex.what()));
            return true;
          }
          if (!ids.contains(row->snapshot) && stray.insert(row->snapshot).second)
            note(fsck_problem::corrupt_record, "records kept for snapshot " +
                                                   std::to_string(row->snapshot) +
                                                   ", which has no record");
          if (!kept || row->t != table::extents) return true;
          const std::string where =
              "an extent snapshot " + std::to_string(row->snapshot) + " keeps";
          const auto c = chunks_.find(e.hash);
          if (c == chunks_.end()) {
            note(fsck_problem::dangling_extent, where + ": chunk " + e.hash.hex() + " is missing");
            ++missing_chunks_[e.hash];
            return true;
          }
          ++c->second.refs;
          return true;
        });
  }

  // A Lepton member (codec/lepton_file.h) holds one reference on the
  // chunk whose payload is its Lepton file.
  void count_member_references() {
    for (const auto& [hash, c] : chunks_) {
      if (c.record.codec != codec::codec_id::lepton_member) continue;
      // A leaked member is deleted by --repair, which does not give its
      // reference back: count only members that files still use, so one
      // repair leaves every count right.
      if (c.refs == 0) continue;
      std::string why;
      try {
        const codec::lepton_member m = codec::parse_lepton_member(s_.read_stored_chunk(hash).bytes);
        const auto first = m.first_chunk.size() == chunk_hash::k_size
                               ? chunks_.find(chunk_hash::from_bytes(m.first_chunk))
                               : chunks_.end();
        if (first == chunks_.end())
          why = "its Lepton file's chunk is missing";
        else if (first->second.record.codec != codec::codec_id::lepton_file)
          why = "its first chunk " + first->first.hex() + " is not a Lepton file";
        else
          ++first->second.refs;
      } catch (const std::exception& e) {
        why = e.what();  // bad payloads are reported again by check_payloads
      }
      if (!why.empty())
        note(fsck_problem::bad_content, "lepton member " + hash.hex() + ": " + why + users_text(c));
    }
  }

  // "/dir/file (inode N)" from the entries scan_dirents saw; "inode N"
  // when a part of the path has no name (an orphan, a damaged entry).
  std::string file_text(std::uint64_t ino) const {
    const std::string number = "inode " + std::to_string(ino);
    std::vector<const std::string*> parts;
    for (std::uint64_t at = ino; at != k_root_ino;) {
      const auto it = inodes_.find(at);
      // Bounded: a loop of entries (fsck reports it elsewhere) ends here.
      if (it == inodes_.end() || it->second.name.empty() || parts.size() > 4096) return number;
      parts.push_back(&it->second.name);
      at = it->second.parent;
    }
    std::string path;
    for (auto p = parts.rbegin(); p != parts.rend(); ++p) path += "/" + printable_name(**p);
    return (path.empty() ? "/" : path) + " (" + number + ")";
  }

  std::string users_text(const chunk_state& c) const {
    if (c.users.empty()) return " (no file uses it)";
    std::string out = " (used by";
    for (const auto& [ino, off] : c.users)
      out += " " + file_text(ino) + " at offset " + std::to_string(off) + ",";
    out.pop_back();
    if (c.refs > c.users.size()) out += " and " + std::to_string(c.refs - c.users.size()) + " more";
    return out + ")";
  }

  void check_refcounts() {
    for (const auto& [hash, c] : chunks_) {
      if (c.refs == 0) {
        note(fsck_problem::leaked_chunk,
             "chunk " + hash.hex() + " (refcount " + std::to_string(c.record.refcount) + ")");
      } else if (c.refs != c.record.refcount) {
        note(fsck_problem::wrong_refcount, "chunk " + hash.hex() + ": refcount " +
                                               std::to_string(c.record.refcount) + ", " +
                                               std::to_string(c.refs) + " extents name it");
      }
    }
  }

  void check_payloads() {
    std::uint64_t done = 0;
    for (const auto& [hash, c] : chunks_) {
      progress(o_.deep ? "decoding chunks" : "payloads", done++, chunks_.size());
      store::stored_chunk stored;
      try {
        stored = s_.read_stored_chunk(hash);
      } catch (const store_error& e) {
        note(fsck_problem::bad_payload, e.what() + users_text(c));
        bad_payloads_.push_back(hash);
        continue;
      }
      if (!o_.deep) continue;
      const std::string why = verifier_.problem(hash, stored);
      if (!why.empty()) {
        note(fsck_problem::bad_content, "chunk " + hash.hex() + ": " + why + users_text(c));
        s_.mark_damaged(hash, why);  // the next write of its content stores it afresh
      }
    }
    progress(o_.deep ? "decoding chunks" : "payloads", done, chunks_.size());
  }

  void scan_queue() {
    s_.scan_records(
        k_cf_meta, k_recompress_prefix, [&](std::string_view key, std::string_view value) {
          ++r_.queued;
          if (key.size() != k_recompress_prefix.size() + chunk_hash::k_size) {
            note(fsck_problem::corrupt_record,
                 "recompress key of " + std::to_string(key.size()) + " bytes");
            return true;
          }
          const chunk_hash hash = chunk_hash::from_bytes(key.substr(k_recompress_prefix.size()));
          try {
            decode_recompress(hash, value);
          } catch (const std::exception& e) {
            note(fsck_problem::corrupt_record, e.what());
            return true;
          }
          if (!chunks_.count(hash)) {
            note(fsck_problem::dangling_queue_entry, "queued chunk " + hash.hex());
            dangling_queue_.push_back(hash);
          }
          return true;
        });
  }

  void check_inodes() {
    for (const auto& [ino, n] : inodes_) {
      const bool is_dir = S_ISDIR(n.mode);
      if (ino != k_root_ino && n.links == 0 && !orphans_.count(ino)) {
        // Where it belongs is a guess (lost+found is not ours to invent);
        // its link count is left alone too.
        note(fsck_problem::unreachable_inode,
             "inode " + std::to_string(ino) + (is_dir ? " (directory)" : ""));
      } else {
        // An orphan (unlinked or removed while open) has no entries and
        // nlink 0, directories included (rmdir sets it).
        const bool orphaned = n.links == 0 && orphans_.count(ino);
        const std::uint64_t expected = orphaned ? 0 : is_dir ? 2 + n.subdirs : n.links;
        if (n.nlink != expected) {
          note(fsck_problem::wrong_nlink, "inode " + std::to_string(ino) + ": nlink " +
                                              std::to_string(n.nlink) + ", expected " +
                                              std::to_string(expected));
          nlink_fixes_.emplace_back(ino, static_cast<std::uint32_t>(expected));
        }
      }
      if (S_ISREG(n.mode) && n.stored_bytes != n.extent_stored) {
        note(fsck_problem::stored_bytes_mismatch,
             "inode " + std::to_string(ino) + ": stored_bytes " + std::to_string(n.stored_bytes) +
                 ", its extents' chunks " + std::to_string(n.extent_stored));
        stored_fixes_.emplace_back(ino, n.extent_stored);
      }
    }
  }

  // After a salvage: a regular file whose extents' chunks hold fewer bytes
  // than its inode says lost extents with a damaged table, and its ranges
  // without an extent would read as zeros (holes). Each such range gets an
  // extent naming no chunk (k_lost), so reading it fails with EIO and fsck
  // reports it, by path, until the file is written again or deleted.
  void mark_lost_ranges() {
    const chunk_hash k_lost = chunk_hash::from_bytes(std::string(chunk_hash::k_size, '\xff'));
    for (const auto& [fixed_ino, stored] : stored_fixes_) {
      const std::uint64_t ino = fixed_ino;  // a lambda below captures it (not a binding)
      const auto n = inodes_.find(ino);
      if (n == inodes_.end() || stored >= n->second.stored_bytes) continue;
      const auto rec = s_.get_inode(ino);
      if (!rec || !S_ISREG(rec->mode) || rec->size == 0) continue;
      transaction txn;
      std::uint64_t at = 0;
      std::uint64_t lost = 0;
      const auto cover = [&](std::uint64_t from, std::uint64_t to) {
        while (from < to) {
          const std::uint64_t slot_end = (from / k_chunk_size + 1) * k_chunk_size;
          const std::uint64_t end = std::min(to, slot_end);
          txn.put_extent(ino, from, {k_lost, 0, static_cast<std::uint32_t>(end - from)});
          lost += end - from;
          from = end;
        }
      };
      for (const auto& [off, e] : s_.extents(ino, 0, rec->size)) {
        if (off > at) cover(at, off);
        at = std::max(at, off + e.length);
      }
      if (at < rec->size) cover(at, rec->size);
      if (lost == 0) continue;
      s_.commit(txn);
      note(fsck_problem::dangling_extent,
           file_text(ino) + ": " + std::to_string(lost) +
               " bytes lost with a damaged table; reading them fails until the file is written "
               "again");
    }
  }

  void repair() {
    // Refcounts first: a leaked chunk goes with its queue entry.
    for (const auto& [hash, c] : chunks_) {
      if (c.refs == c.record.refcount && c.refs != 0) continue;
      s_.set_chunk_refcount(hash, c.refs);
      ++r_[c.refs == 0 ? fsck_problem::leaked_chunk : fsck_problem::wrong_refcount].repaired;
    }
    for (const chunk_hash& hash : dangling_queue_) {
      transaction txn;
      txn.drop_recompress(hash);
      s_.commit(txn);
      ++r_[fsck_problem::dangling_queue_entry].repaired;
    }
    for (const auto& [ino, nlink] : nlink_fixes_) {
      auto rec = s_.get_inode(ino);
      if (!rec) continue;
      rec->nlink = nlink;
      transaction txn;
      txn.put_inode(*rec);
      s_.commit(txn);
      ++r_[fsck_problem::wrong_nlink].repaired;
    }
    // Chunk records lost with a damaged table come back from the headers
    // of the pack records holding their payloads.
    for (const chunk_hash& hash : s_.rebuild_chunk_records(missing_chunks_)) {
      r_[fsck_problem::dangling_extent].repaired += missing_chunks_.at(hash);
      ++r_.chunk_records_rebuilt;
    }
    if (o_.after_salvage) mark_lost_ranges();
    for (const auto& [ino, stored] : stored_fixes_) {
      auto rec = s_.get_inode(ino);
      if (!rec) continue;
      rec->stored_bytes = stored;
      transaction txn;
      txn.put_inode(*rec);
      s_.commit(txn);
      ++r_[fsck_problem::stored_bytes_mismatch].repaired;
    }
    // Pack stores: a damaged or lost index entry is rebuilt from the packs
    // when one of them holds a good copy of the payload.
    if (s_.packs() && !bad_payloads_.empty()) {
      r_.pack_index_rebuilt += s_.rebuild_pack_index(&bad_payloads_);
      for (const chunk_hash& hash : bad_payloads_) {
        try {
          s_.read_stored_chunk(hash);
          ++r_[fsck_problem::bad_payload].repaired;
        } catch (const store_error&) {
        }
      }
    }
    s_.sync();
  }

  store& s_;
  const fsck_options& o_;
  fsck_report r_;
  std::unordered_map<std::uint64_t, inode_state> inodes_;
  std::set<std::uint64_t> orphans_;
  std::map<chunk_hash, chunk_state> chunks_;  // ordered: reports are deterministic
  std::uint64_t last_missing_ino_ = 0;
  std::vector<chunk_hash> dangling_queue_;
  std::map<chunk_hash, std::uint64_t> missing_chunks_;  // named by extents: how many
  std::vector<chunk_hash> bad_payloads_;
  chunk_verifier verifier_{s_};  // --deep
  std::vector<std::pair<std::uint64_t, std::uint32_t>> nlink_fixes_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> stored_fixes_;
};

}  // namespace

std::string_view fsck_problem_name(fsck_problem p) {
  return info(p).name;
}
bool fsck_problem_is_warning(fsck_problem p) {
  return info(p).warning;
}
void add_earlier_repairs(fsck_report& later, const fsck_report& earlier) {
  for (std::size_t i = 0; i < k_fsck_problem_count; ++i) {
    const fsck_report::kind& e = earlier.problems[i];
    fsck_report::kind& l = later.problems[i];
    l.found += e.repaired;
    l.repaired += e.repaired;
    if (l.examples.empty() && e.repaired > 0) l.examples = e.examples;
  }
  later.pack_index_rebuilt += earlier.pack_index_rebuilt;
  later.chunk_records_rebuilt += earlier.chunk_records_rebuilt;
}

bool fsck_problem_is_repairable(fsck_problem p) {
  return info(p).repairable;
}

std::uint64_t fsck_report::remaining_errors() const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < k_fsck_problem_count; ++i) {
    if (k_problems[i].warning) continue;
    n += problems[i].found - std::min(problems[i].found, problems[i].repaired);
  }
  return n;
}

fsck_report fsck(store& s, const fsck_options& options) {
  return checker(s, options).run();
}

std::string to_json(const fsck_report& r) {
  nlohmann::json j;
  j["clean"] = r.clean();
  j["deep"] = r.deep;
  j["repair"] = r.repair;
  j["remaining_errors"] = r.remaining_errors();
  j["counts"] = {{"inodes", r.inodes},
                 {"dirents", r.dirents},
                 {"extents", r.extents},
                 {"chunks", r.chunks},
                 {"queued", r.queued},
                 {"orphans", r.orphans},
                 {"pack_index_rebuilt", r.pack_index_rebuilt},
                 {"chunk_records_rebuilt", r.chunk_records_rebuilt}};
  nlohmann::json problems = nlohmann::json::object();
  for (std::size_t i = 0; i < k_fsck_problem_count; ++i) {
    const auto& k = r.problems[i];
    if (k.found == 0) continue;
    problems[std::string(k_problems[i].name)] = {
        {"found", k.found},
        {"repaired", k.repaired},
        {"warning", k_problems[i].warning},
        {"repairable", k_problems[i].repairable},
        {"examples", k.examples},
    };
  }
  j["problems"] = problems;
  return j.dump(2);
}

std::string to_text(const fsck_report& r) {
  std::string out = "checked " + std::to_string(r.inodes) + " inodes, " +
                    std::to_string(r.dirents) + " directory entries, " + std::to_string(r.extents) +
                    " extents, " + std::to_string(r.chunks) + " chunks (" +
                    (r.deep ? "decoded" : "payload checksums") + "), " + std::to_string(r.queued) +
                    " queued re-encodings\n";
  if (r.chunk_records_rebuilt > 0)
    out += "made " + std::to_string(r.chunk_records_rebuilt) +
           " lost chunk records again from the pack records holding their payloads\n";
  if (r.pack_index_rebuilt > 0)
    out +=
        "rebuilt " + std::to_string(r.pack_index_rebuilt) + " pack index entries from the packs\n";
  std::uint64_t repairable = 0;
  for (std::size_t i = 0; i < k_fsck_problem_count; ++i) {
    const auto& k = r.problems[i];
    if (k.found == 0) continue;
    out += std::string(k_problems[i].warning ? "warning: " : "") +
           std::string(k_problems[i].title) + ": " + std::to_string(k.found);
    if (r.repair && (k_problems[i].repairable || k.repaired > 0))
      out += ", " + std::to_string(k.repaired) + " repaired";
    if (!r.repair && k_problems[i].repairable && !k_problems[i].warning) repairable += k.found;
    out += "\n";
    for (const auto& e : k.examples) out += "  " + e + "\n";
    if (k.found > k.examples.size())
      out += "  ... and " + std::to_string(k.found - k.examples.size()) + " more\n";
  }
  const auto damaged = r[fsck_problem::bad_payload].found + r[fsck_problem::bad_content].found -
                       r[fsck_problem::bad_payload].repaired;
  if (damaged > 0)
    out +=
        "to heal damaged file data: write the files named above again from a good copy (cp, "
        "rsync -c); their damaged chunks are marked, and the next write of a chunk's content "
        "stores it afresh. Or `densefs fsck --repair-from DIR` with a tree that holds them\n";
  const std::uint64_t left = r.remaining_errors();
  if (left == 0) {
    out += "clean\n";
  } else {
    out += std::to_string(left) + " problem(s) remain";
    if (repairable > 0) out += " (" + std::to_string(repairable) + " repairable with --repair)";
    out += "\n";
  }
  return out;
}

}  // namespace densefs::store
