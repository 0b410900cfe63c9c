#include "store/check/chunk_verifier.h"

#include <exception>

#include "codec/codec.h"
#include "codec/lepton_file.h"

namespace densefs::store {

std::string chunk_verifier::problem(const chunk_hash& hash, const store::stored_chunk& stored) {
  if (stored.record.codec == codec::codec_id::lepton_member) return member_problem(hash, stored);
  if (stored.record.codec == codec::codec_id::lepton_file) return lepton_file_problem(hash);
  // The same checks as store::read_chunk, plus the SHA-256 for every codec
  // (read_chunk trusts zstd's own framing).
  try {
    const std::string plain =
        codec::decode_chunk(stored.record.codec, stored.bytes, stored.record.plain_size);
    if (plain.size() != stored.record.plain_size)
      return "decoded to " + std::to_string(plain.size()) + " bytes, expected " +
             std::to_string(stored.record.plain_size);
    if (sha256_of(plain) != hash) return "decoded content does not match the chunk's SHA-256";
  } catch (const std::exception& e) {
    return std::string("cannot decode ") + codec::codec_name(stored.record.codec) +
           " payload: " + e.what();
  }
  return {};
}

const std::string& chunk_verifier::lepton_file_problem(const chunk_hash& first) {
  const auto it = lepton_files_.find(first);
  if (it != lepton_files_.end()) return it->second.problem;
  lepton_file_state& f = lepton_files_[first];
  try {
    const store::stored_chunk stored = s_.read_stored_chunk(first);
    if (stored.record.codec != codec::codec_id::lepton_file) {
      f.problem = "chunk " + first.hex() + " is not a Lepton file";
    } else {
      // Decoded here, not by the store: its decode answers from the cache
      // when a reader decoded the photo before (a live mount).
      const codec::lepton_file_view v = codec::parse_lepton_file(stored.bytes);
      if (v.chunk_count() == 0 || v.name_size != chunk_hash::k_size ||
          v.chunk_names[0] != first.view() || v.chunk_plain_size(0) != stored.record.plain_size)
        f.problem = "its Lepton file does not name its own chunk first";
      const std::string jpeg = f.problem.empty() ? codec::decode_lepton_file(v) : std::string();
      for (std::size_t i = 0; f.problem.empty() && i < v.chunk_count(); ++i) {
        if (sha256_of(codec::lepton_file_chunk(v, jpeg, i)).view() != v.chunk_names[i])
          f.problem = "its Lepton file's chunk " + std::to_string(i) + " does not match its name";
        f.names.emplace_back(v.chunk_names[i]);
        f.sizes.push_back(v.chunk_plain_size(i));
      }
    }
  } catch (const std::exception& e) {
    f.problem = std::string("its Lepton file does not decode: ") + e.what();
  }
  return f.problem;
}

std::string chunk_verifier::member_problem(const chunk_hash& hash,
                                           const store::stored_chunk& stored) {
  codec::lepton_member m;
  try {
    m = codec::parse_lepton_member(stored.bytes);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (m.first_chunk.size() != chunk_hash::k_size) return "lepton member: bad first chunk name";
  const chunk_hash first = chunk_hash::from_bytes(m.first_chunk);
  if (first == hash) return "lepton member names itself";
  if (const std::string& p = lepton_file_problem(first); !p.empty()) return p;
  const lepton_file_state& f = lepton_files_[first];
  if (m.index == 0 || m.index >= f.names.size() || f.names[m.index] != hash.view() ||
      f.sizes[m.index] != stored.record.plain_size || m.plain_size != stored.record.plain_size)
    return "lepton member: chunk " + std::to_string(m.index) + " of the Lepton file in " +
           first.hex() + " is not this chunk";
  return {};
}

}  // namespace densefs::store
