// Snapshots through the store (store_snapshots.cpp, docs/backup.md,
// "Snapshots"): random changes to files (new, rewritten, removed,
// renamed, xattrs) with snapshots taken between them; every snapshot then
// opened on its own reads exactly the files of its moment, fsck is clean
// with snapshots kept, and deleting them (in any order) gives back exactly
// the chunks only they held. The same on real mounts: tests/mount/
// snapshot_test.sh.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <ctime>
#include <map>
#include <random>
#include <set>

#include "store/check/fsck.h"
#include "store/export.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/snapshot/retention.h"
#include "store/store.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

struct file_state {
  std::string content;
  std::string tag;  // user.tag, empty: none
  bool operator==(const file_state&) const = default;
};
// In failures: the size, a hash and the tag, not megabytes of content.
void PrintTo(const file_state& f, std::ostream* os) {
  *os << f.content.size() << " bytes #" << std::hash<std::string>{}(f.content) << " tag '" << f.tag
      << "'";
}
using tree = std::map<std::string, file_state>;  // name in the root -> file

class snapshot_test : public ::testing::Test {
 protected:
  fs::path dir() const { return tmp_.path() / "store"; }

  std::unique_ptr<store> open_rw() { return store::open(dir()); }

  // Writes `name` with `content` (a new inode; an old one of the name is
  // removed in the same commit, as a rename over it would).
  void write(store& s, const std::string& name, const file_state& f) {
    transaction txn;
    remove_in(s, txn, name);
    const std::uint64_t ino = s.allocate_ino();
    inode_record r;
    r.ino = ino;
    r.mode = S_IFREG | 0644;
    r.nlink = 1;
    r.size = f.content.size();
    std::uint64_t off = 0;
    while (off < f.content.size()) {
      const std::string_view piece = std::string_view(f.content).substr(
          off, std::min<std::size_t>(300'000, f.content.size() - off));
      const prepared_chunk p = s.prepare_chunk(piece, true);
      txn.ref_chunk(p);
      txn.put_extent(ino, off, {p.hash, 0, static_cast<std::uint32_t>(piece.size())});
      off += piece.size();
    }
    txn.put_inode(r);
    txn.put_dirent(k_root_ino, name, {ino, S_IFREG});
    if (!f.tag.empty()) txn.put_xattr(ino, "user.tag", f.tag);
    s.commit(txn, false);
  }

  void remove_in(store& s, transaction& txn, const std::string& name) {
    const auto d = s.get_dirent(k_root_ino, name);
    if (!d) return;
    for (const auto& [off, e] : s.extents(d->ino, 0, UINT64_MAX)) {
      txn.delete_extent(d->ino, off);
      txn.unref_chunk(e.hash);
    }
    for (const std::string& x : s.list_xattrs(d->ino)) txn.delete_xattr(d->ino, x);
    txn.delete_inode(d->ino);
    txn.delete_dirent(k_root_ino, name);
  }

  void remove(store& s, const std::string& name) {
    transaction txn;
    remove_in(s, txn, name);
    s.commit(txn, false);
  }

  void rename(store& s, const std::string& from, const std::string& to) {
    const auto d = s.get_dirent(k_root_ino, from);
    transaction txn;
    remove_in(s, txn, to);
    txn.delete_dirent(k_root_ino, from);
    txn.put_dirent(k_root_ino, to, *d);
    s.commit(txn, false);
  }

  // What the store shows in its root.
  static tree read_tree(const store& s) {
    tree out;
    s.list_dir(k_root_ino, std::nullopt, [&](std::string_view name, const dirent_record& d) {
      file_state f;
      export_file(s, d.ino, export_encoding::identity,
                  [&](std::string_view bytes) { f.content += bytes; });
      const auto inode = s.get_inode(d.ino);
      EXPECT_TRUE(inode) << name;
      if (inode) {
        EXPECT_EQ(inode->size, f.content.size()) << name;
      }
      if (const auto tag = s.get_xattr(d.ino, "user.tag")) f.tag = *tag;
      out[std::string(name)] = std::move(f);
      return true;
    });
    return out;
  }

  static std::string content(std::mt19937_64& rng, int version) {
    // Compressible, unique per version, sometimes more than one chunk.
    const std::size_t n = 1000 + rng() % 500'000;
    std::string out;
    while (out.size() < n)
      out += "v" + std::to_string(version) + " line " + std::to_string(out.size()) + "\n";
    out.resize(n);
    return out;
  }

  test::temp_dir tmp_;
};

TEST_F(snapshot_test,
       every_snapshot_reads_as_it_was_taken_and_deleting_them_gives_back_their_chunks) {
  store::create(dir(), codec::parse_policy("zstd:level=1"), payload_backend::pack);
  std::mt19937_64 rng(20261201);
  tree now;
  std::map<std::string, tree> taken;
  std::uint64_t chunks_without_snapshots = 0;
  {
    auto s = open_rw();
    int version = 0;
    const auto pick = [&] { return "f" + std::to_string(rng() % 40); };
    for (int step = 0; step < 400; ++step) {
      if (step % 50 == 49) {
        const std::string name = "night-" + std::to_string(step / 50);
        s->create_snapshot(name);
        taken[name] = now;
        continue;
      }
      const std::string name = pick();
      switch (rng() % 5) {
        case 0:
        case 1: {
          file_state f{content(rng, ++version), rng() % 2 ? "t" + std::to_string(version) : ""};
          write(*s, name, f);
          now[name] = f;
          break;
        }
        case 2:
          if (now.contains(name)) {
            remove(*s, name);
            now.erase(name);
          }
          break;
        case 3: {
          const std::string to = pick();
          if (now.contains(name) && to != name) {
            rename(*s, name, to);
            now[to] = now[name];
            now.erase(name);
          }
          break;
        }
        case 4:
          if (const auto d = s->get_dirent(k_root_ino, name)) {
            transaction txn;
            const std::string tag = "x" + std::to_string(++version);
            txn.put_xattr(d->ino, "user.tag", tag);
            s->commit(txn, false);
            now[name].tag = tag;
          }
          break;
      }
    }
    EXPECT_EQ(read_tree(*s), now);
    EXPECT_EQ(s->snapshots().size(), taken.size());
    EXPECT_THROW(s->create_snapshot("night-0"), store_error);  // taken
    EXPECT_THROW(s->create_snapshot("a/b"), store_error);
    const fsck_report r = fsck(*s, {});
    EXPECT_TRUE(r.clean()) << to_text(r);
  }
  EXPECT_EQ(open_rw()->settings().format_version, k_snapshot_format_version);
  // Each snapshot on its own, read-only.
  for (const auto& [name, want] : taken) {
    store_open_options o;
    o.snapshot = name;
    auto view = store::open(dir(), o);
    EXPECT_TRUE(view->read_only());
    EXPECT_EQ(read_tree(*view), want) << name;
    transaction txn;
    txn.put_xattr(k_root_ino, "user.x", "y");
    EXPECT_THROW(view->commit(txn, false), store_error);
  }
  {
    store_open_options o;
    o.snapshot = "no-such";
    EXPECT_THROW(store::open(dir(), o), store_error);
  }
  // diff: between two snapshots, and from one to the live volume, as the
  // model says (a rewritten file is a new inode: removed and added only
  // when its name changes).
  {
    auto s = store::open(dir(), {.read_only = true});
    const auto expect_diff = [&](const std::string& from, const tree& a, const std::string& to,
                                 const tree& b) {
      std::set<std::string> want, got;
      for (const auto& [name, f] : a) {
        const auto it = b.find(name);
        if (it == b.end())
          want.insert("-/" + name);
        else if (!(it->second == f))
          want.insert("M/" + name);
      }
      for (const auto& [name, f] : b)
        if (!a.contains(name)) want.insert("+/" + name);
      s->diff_snapshots(from, to,
                        [&](const tree_change& c) { got.insert(std::string(1, c.kind) + c.path); });
      EXPECT_EQ(got, want) << from << " -> " << (to.empty() ? "live" : to);
    };
    expect_diff("night-2", taken["night-2"], "night-5", taken["night-5"]);
    expect_diff("night-0", taken["night-0"], "night-7", taken["night-7"]);
    expect_diff("night-6", taken["night-6"], "", now);
    EXPECT_THROW(s->diff_snapshots("no-such", "", [](const tree_change&) {}), store_error);
  }
  // Deleting them, middle ones first: the others still read as they were.
  {
    auto s = open_rw();
    for (const std::string name : {"night-3", "night-1", "night-7"}) {
      s->delete_snapshot(name);
      taken.erase(name);
    }
    EXPECT_THROW(s->delete_snapshot("night-3"), store_error);
    const fsck_report r = fsck(*s, {});
    EXPECT_TRUE(r.clean()) << to_text(r);
  }
  for (const auto& [name, want] : taken) {
    store_open_options o;
    o.snapshot = name;
    auto view = store::open(dir(), o);
    EXPECT_EQ(read_tree(*view), want) << name;
  }
  {
    auto s = open_rw();
    for (const auto& [name, want] : taken) s->delete_snapshot(name);
    EXPECT_TRUE(s->snapshots().empty());
    EXPECT_EQ(read_tree(*s), now);
    const fsck_report r = fsck(*s, {});
    EXPECT_TRUE(r.clean()) << to_text(r);
    // Exactly the live files' chunks are left.
    std::set<chunk_hash> live;
    s->list_dir(k_root_ino, std::nullopt, [&](std::string_view, const dirent_record& d) {
      for (const auto& [off, e] : s->extents(d.ino, 0, UINT64_MAX)) live.insert(e.hash);
      return true;
    });
    chunks_without_snapshots = s->stats().chunks;
    EXPECT_EQ(chunks_without_snapshots, live.size());
  }
}

// A deletion of more pre-images than one merge batch (4,096): rows that
// move into the snapshot before, across the batches, and rows that drop.
TEST_F(snapshot_test, a_big_deletion_merges_across_batches) {
  store::create(dir(), codec::parse_policy("zstd:level=1"), payload_backend::pack);
  tree now;
  const auto round = [&](store& s, int from, int to, int version) {
    for (int i = from; i < to; ++i) {
      const std::string name = "f" + std::to_string(i);
      file_state f{"file " + name + " version " + std::to_string(version) + "\n", ""};
      write(s, name, f);
      now[name] = f;
    }
  };
  std::map<std::string, tree> taken;
  {
    auto s = open_rw();
    round(*s, 0, 3000, 1);
    s->create_snapshot("a");
    taken["a"] = now;
    round(*s, 0, 500, 2);
    s->create_snapshot("b");
    taken["b"] = now;
    round(*s, 500, 3000, 3);  // unchanged since a: b's rows of these move to a
    s->create_snapshot("c");
    taken["c"] = now;
    round(*s, 0, 3000, 4);
    s->delete_snapshot("b");
    taken.erase("b");
    const fsck_report r = fsck(*s, {});
    EXPECT_TRUE(r.clean()) << to_text(r);
  }
  for (const auto& [name, want] : taken) {
    store_open_options o;
    o.snapshot = name;
    EXPECT_EQ(read_tree(*store::open(dir(), o)), want) << name;
  }
}

// Two deletions cut short, one above the other: the newer merges into the
// older one being deleted too (not past it), and the live snapshot below
// both still reads as it was taken.
TEST_F(snapshot_test, deletions_cut_short_one_above_the_other_leave_the_snapshot_below_exact) {
  store::create(dir(), codec::parse_policy("zstd:level=1"), payload_backend::pack);
  std::mt19937_64 rng(11);
  tree at_p;
  {
    auto s = open_rw();
    for (int i = 0; i < 6; ++i) write(*s, "f" + std::to_string(i), {content(rng, i), ""});
    at_p = read_tree(*s);
    s->create_snapshot("p");
    s->create_snapshot("s");  // nothing changed between p and s
    write(*s, "f0", {content(rng, 10), ""});
    remove(*s, "f1");
    s->create_snapshot("n");
    write(*s, "f2", {content(rng, 11), ""});
    remove(*s, "f3");
  }
  {
    auto e = rocksdb_engine::open(dir(), {});
    auto batch = e->new_batch();
    for (const char* name : {"s", "n"}) {
      snapshot_record r = *find_snapshot(*e, name);
      r.state = snapshot_state::deleting;
      batch->put(table::meta, snapshot_key(r.id), encode_snapshot(r));
    }
    e->write(*batch, true);
  }
  {
    auto s = open_rw();  // finishes n (into s), then s (into p)
    ASSERT_EQ(s->snapshots().size(), 1u);
    write(*s, "f4", {content(rng, 12), ""});  // filed under p now
    const fsck_report r = fsck(*s, {});
    EXPECT_TRUE(r.clean()) << to_text(r);
  }
  store_open_options o;
  o.snapshot = "p";
  EXPECT_EQ(read_tree(*store::open(dir(), o)), at_p);
}

// Retention as restic's forget: the newest of each day, week and month.
TEST(snapshot_retention, keeps_the_newest_of_each_period_and_what_keep_last_asks) {
  std::vector<snapshot_record> all;
  // Every 6 hours for 40 days, from 2026-10-01 00:00 local time.
  std::tm start{};
  start.tm_year = 126;
  start.tm_mon = 9;
  start.tm_mday = 1;
  start.tm_isdst = -1;
  const std::int64_t t0 = std::mktime(&start);
  for (std::uint64_t i = 0; i < 160; ++i)
    all.push_back({i + 1, 0, t0 + static_cast<std::int64_t>(i) * 6 * 3600, snapshot_state::live,
                   "s" + std::to_string(i + 1)});
  const auto kept = [&](const retention_rule& rule) {
    std::vector<std::uint64_t> out;
    for (const retention_decision& d : apply_retention(all, rule))
      if (d.keep) out.push_back(d.snapshot.id);
    return out;
  };
  EXPECT_EQ(kept({}).size(), all.size());  // no rule: nothing goes
  EXPECT_EQ(kept({.last = 3}), (std::vector<std::uint64_t>{158, 159, 160}));
  // The last of each of the 7 newest days: ids 160 (day 40), 156, ..., 136.
  EXPECT_EQ(kept({.daily = 7}), (std::vector<std::uint64_t>{136, 140, 144, 148, 152, 156, 160}));
  // 2026-11-09, the newest day, is a Monday: the newest of the week before
  // is the Sunday, already kept as a day.
  EXPECT_EQ(kept({.daily = 2, .weekly = 2}), (std::vector<std::uint64_t>{156, 160}));
  EXPECT_EQ(kept({.weekly = 3}), (std::vector<std::uint64_t>{128, 156, 160}));
  // A deleting snapshot is not decided on.
  all[159].state = snapshot_state::deleting;
  EXPECT_EQ(kept({.last = 1}), (std::vector<std::uint64_t>{159}));
}

// A deletion cut short (the record marked deleting, some pre-images
// merged) is finished by the next open for writing.
TEST_F(snapshot_test, a_deletion_cut_short_is_finished_at_the_next_open) {
  store::create(dir(), codec::parse_policy("zstd:level=1"), payload_backend::pack);
  std::mt19937_64 rng(5);
  tree first;
  {
    auto s = open_rw();
    for (int i = 0; i < 5; ++i) {
      file_state f{content(rng, i), ""};
      write(*s, "f" + std::to_string(i), f);
      first["f" + std::to_string(i)] = f;
    }
    s->create_snapshot("a");
    write(*s, "f0", {content(rng, 10), ""});
    remove(*s, "f1");
    s->create_snapshot("b");
    write(*s, "f2", {content(rng, 11), ""});
  }
  {
    // What delete_snapshot does first, alone: the mark.
    auto e = rocksdb_engine::open(dir(), {});
    snapshot_record b = *find_snapshot(*e, "b");
    b.state = snapshot_state::deleting;
    auto batch = e->new_batch();
    batch->put(table::meta, snapshot_key(b.id), encode_snapshot(b));
    e->write(*batch, true);
  }
  {
    auto s = open_rw();
    const auto left = s->snapshots();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].name, "a");
    const fsck_report r = fsck(*s, {});
    EXPECT_TRUE(r.clean()) << to_text(r);
  }
  store_open_options o;
  o.snapshot = "a";
  EXPECT_EQ(read_tree(*store::open(dir(), o)), first);
  o.snapshot = "b";
  EXPECT_THROW(store::open(dir(), o), store_error);
}

}  // namespace
}  // namespace densefs::store
