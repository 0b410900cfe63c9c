// The deep check of one chunk: does its stored payload decode to exactly
// the content its name (the SHA-256) promises? Shared by `densefs fsck
// --deep` (store/check/fsck.h) and `densefs scrub` (store/check/scrub.h), so that both
// find the same damage.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "store/hash.h"
#include "store/store.h"

namespace densefs::store {

class chunk_verifier {
 public:
  explicit chunk_verifier(const store& s) : s_(s) {}

  // Empty when `stored` (already fetched and XXH3-checked by
  // store::read_stored_chunk) decodes to the content named `hash`; else one
  // line saying why not. Never goes through the chunk cache: a forged
  // payload would be served the true content of its name there.
  //
  // Each Lepton file is decoded once and every chunk of it checked against
  // its name; its members are then checked against its list of names,
  // which is kept for the verifier's life.
  std::string problem(const chunk_hash& hash, const store::stored_chunk& stored);

 private:
  struct lepton_file_state {
    std::string problem;  // empty: decodes, every chunk matches its name
    std::vector<std::string> names;
    std::vector<std::uint32_t> sizes;
  };
  const std::string& lepton_file_problem(const chunk_hash& first);
  std::string member_problem(const chunk_hash& hash, const store::stored_chunk& stored);

  const store& s_;
  std::map<chunk_hash, lepton_file_state> lepton_files_;
};

}  // namespace densefs::store
