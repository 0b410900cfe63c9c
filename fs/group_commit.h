// One group of encoded slot versions (write_back.h), of any files,
// committed in one store transaction, in steps:
//   0. read_chunk_records    the records of its chunks, one read, no lock
//                            held (read again in step 3 if they may have
//                            changed since)
//   1. write_payloads_ahead  the payloads go to the packs, no lock held
//   2. decide_fates          under the files' and the metadata locks: what
//                            each version becomes (committed, obsolete,
//                            failed, dropped)
//   3. commit                one transaction: each slot's extents and
//                            chunk references, each file's record and
//                            persisted size (retried when a chunk it meant
//                            to share was released meanwhile)
//   4. apply_records         the nodes take the records just stored
//   5. settle_slots          each slot's staged versions, kept on failure
//   6. after the locks       staging room, the kernel's attributes, the
//                            re-encoder, the committed chunks into the
//                            decoded-chunk cache (remote volumes), and
//                            files nobody can reach any more
// Built and run by data_path::commit_group on the committer thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "fs/write_back.h"
#include "store/store.h"

namespace densefs::fs {

class data_path;
struct node;

class group_commit {
 public:
  group_commit(data_path& data, std::vector<encoded_slot>& group) : data_(data), group_(group) {}
  void run();

 private:
  // What each version becomes.
  enum class fate {
    commit,    // stored in this group's transaction
    obsolete,  // a newer version of its slot landed or is in this group
    failed,    // not encoded (or the commit failed): stays staged
    dropped,   // the file is gone: nobody can read these bytes again
  };
  // Each file's record as the transaction leaves it.
  struct file_update {
    store::inode_record record;
    std::uint64_t data_end = 0;  // end of the highest slot bytes committed here
    std::uint64_t persisted = 0;
    bool queued = false;
    bool ends_new_file = false;  // its new-file row goes in this commit
  };

  void read_chunk_records();
  // The stored record of a chunk of the group, as of records_.
  std::optional<store::chunk_record> stored_record(const store::chunk_hash& hash) const;
  void decide_fates();
  void commit();
  // The transaction's content (the store's `fill` beside other writers,
  // where it runs inside the commit's lock).
  void fill(store::transaction& txn);
  void put_slot(store::transaction& txn, const encoded_slot& e, file_update& u);
  void put_file_record(store::transaction& txn, node& n, file_update& u);
  // After chunk_missing: encodes the chunk it names; false if it cannot.
  bool encode_missing(const store::chunk_hash& hash);
  void apply_records();
  void settle_slots();
  void store_settled_sizes();
  void after_the_locks();
  void remember_committed_chunks();
  void release_unreachable_files();

  data_path& data_;
  std::vector<encoded_slot>& group_;
  // The records of the group's chunks: which are stored already (a chunk
  // keeps its record, whoever stored it and with whichever codec), so what
  // each file's stored_bytes gains.
  store::chunk_records records_;
  // The stored size of each chunk's first encoding in the group (fill).
  std::map<store::chunk_hash, std::size_t> first_encoding_;
  store::payloads_ahead ahead_;
  std::vector<fate> fates_;
  // Per file, the versions this group settles (committed or made obsolete):
  // they no longer hold back its persisted size.
  std::map<const node*, std::set<std::uint64_t>> settled_;
  std::map<node*, file_update> updates_;
  std::set<node*> gone_;  // removed by another writer (found in the fill)
  bool beside_others_ = false;
  int error_ = 0;
  // For after the locks.
  bool queued_any_ = false;
  std::vector<std::uint64_t> attributes_changed_;
  std::size_t released_bytes_ = 0;
};

}  // namespace densefs::fs
