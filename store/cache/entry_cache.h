// What a client knows of its volume's directory entries without asking the
// metadata engine: names found (and where they lead), names found absent,
// and directories whose every entry it knows (made empty by its own commit),
// where a name not kept is absent. On PostgreSQL a lookup is a round trip
// (docs/scale-out.md, "Round trips"); a kernel with entry_timeout=0, a
// path walk or rsync's lookup of each new name before it makes it asks for
// the same entries again and again.
//
// Kept exact by the store (store.h, entry_cache_):
//  - every commit of this client tells it the entries it put or removed
//    (committed), after the engine's write;
//  - an answer read from the engine is kept only if no change came in
//    between (generation before the read, keep after it), so a read that
//    raced a commit or a notice is not kept;
//  - a change notice from another client forgets what it names (forget),
//    an unknown outcome or a notice naming everything forgets all.
// Only where those are all the changes there are: a writer alone of a
// PostgreSQL volume (not a follower, which hears the writer's commits only
// as notices it may not be listening to yet, nor a writer beside others);
// the store empties it when that writer took the volume's lock again after
// losing it (another may have written meanwhile).
//
// Bounded: at `capacity` names it is emptied and fills again.
// Threading: every method is safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "store/records.h"

namespace densefs::store {

class entry_cache {
 public:
  explicit entry_cache(std::size_t capacity) : capacity_(capacity) {}

  // What is known of `name` in `parent`: nullopt when nothing is, else the
  // entry (an inner nullopt: the name is absent).
  std::optional<std::optional<dirent_record>> find(std::uint64_t parent,
                                                   std::string_view name) const;

  // Taken before an engine read whose answer keep() may remember.
  std::uint64_t generation() const;
  // Remembers what an engine read found of `name` in `parent`, unless a
  // change came (committed, forget) since `generation`.
  void keep(std::uint64_t generation, std::uint64_t parent, std::string_view name,
            const std::optional<dirent_record>& entry);

  // One entry a commit of this client put (`entry`) or removed (nullopt).
  struct change {
    std::uint64_t parent = 0;
    std::string_view name;
    std::optional<dirent_record> entry;
  };
  // After a commit's write: its entries as they now are, and the
  // directories it made (empty: every name in them is known absent until
  // a commit puts one).
  void committed(std::span<const change> changes, std::span<const std::uint64_t> new_directories);

  // Another client changed these entries (parent, name): they are not known
  // any more, nor is every entry of their parents.
  void forget(std::span<const std::pair<std::uint64_t, std::string>> entries);
  // A commit whose outcome is unknown, or a notice naming everything.
  void forget_all();

  // Whether directory `parent` has no entries, when every entry of it is
  // known; nullopt otherwise.
  std::optional<bool> empty(std::uint64_t parent) const;

  std::size_t size() const;

 private:
  // Under mutex_: empties it when `more` names would pass the capacity.
  void make_room(std::size_t more);

  const std::size_t capacity_;
  mutable std::mutex mutex_;
  // By the engine's key (records.h, dirent_key): nullopt for a name known
  // absent.
  std::unordered_map<std::string, std::optional<dirent_record>> entries_;
  // Directories whose every entry is in entries_ (a name not there is
  // absent), with how many names they have.
  std::unordered_map<std::uint64_t, std::size_t> complete_;
  std::uint64_t generation_ = 0;
};

}  // namespace densefs::store
