#include "store/snapshot/tree_diff.h"

#include <sys/stat.h>

#include <cerrno>
#include <set>
#include <utility>
#include <vector>

#include "store/error.h"
#include "store/records.h"

namespace densefs::store {
namespace {

using entry_list = std::vector<std::pair<std::string, dirent_record>>;

// Every row of table `t` whose key starts with `prefix`, in key order.
std::vector<std::pair<std::string, std::string>> rows(const metadata_engine& e, table t,
                                                      const std::string& prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  e.scan(t, prefix_range(prefix), {}, "a snapshot diff",
         [&](std::string_view k, std::string_view v) {
           out.emplace_back(k, v);
           return true;
         });
  return out;
}

entry_list entries(const metadata_engine& e, std::uint64_t dir) {
  entry_list out;
  const std::string prefix = dirent_prefix(dir);
  for (auto& [k, v] : rows(e, table::dirents, prefix))
    out.emplace_back(k.substr(prefix.size()), decode_dirent(v));
  return out;
}

class differ {
 public:
  differ(const metadata_engine& from, const metadata_engine& to,
         const std::function<void(const tree_change&)>& fn)
      : from_(from), to_(to), fn_(fn) {}

  void directory(std::uint64_t a, std::uint64_t b, const std::string& path) {
    // A damaged volume may name a directory inside itself: one line, not
    // a recursion without end (this runs in the mount's daemon).
    const ancestor guard(*this, a, b, path);
    const entry_list left = entries(from_, a);
    const entry_list right = entries(to_, b);
    std::size_t i = 0, j = 0;
    while (i < left.size() || j < right.size()) {
      if (j == right.size() || (i < left.size() && left[i].first < right[j].first)) {
        whole(from_, left[i].second, path + left[i].first, '-');
        ++i;
      } else if (i == left.size() || right[j].first < left[i].first) {
        whole(to_, right[j].second, path + right[j].first, '+');
        ++j;
      } else {
        both(left[i].second, right[j].second, path + left[i].first);
        ++i;
        ++j;
      }
    }
  }

  tree_diff_summary summary;

 private:
  std::optional<inode_record> inode(const metadata_engine& e, std::uint64_t ino) {
    const std::optional<std::string> v = e.get(table::inodes, inode_key(ino), "a snapshot diff");
    if (!v) return std::nullopt;
    return decode_inode(ino, *v);
  }

  void report(char kind, std::string path) {
    (kind == '+' ? summary.added : kind == '-' ? summary.removed : summary.modified)++;
    fn_({kind, std::move(path)});
  }

  // A name only one side has: it and everything below it.
  void whole(const metadata_engine& e, const dirent_record& d, const std::string& path, char kind) {
    const bool dir = S_ISDIR(d.type);
    report(kind, dir ? path + "/" : path);
    if (!dir) return;
    const ancestor guard(*this, &e == &from_ ? d.ino : 0, &e == &to_ ? d.ino : 0, path);
    for (const auto& [name, child] : entries(e, d.ino)) whole(e, child, path + "/" + name, kind);
  }

  // The directories on the path being walked (per side; 0: none), and
  // its depth: PATH_MAX bounds a real tree's to 2,048.
  static constexpr std::size_t k_max_depth = 4096;
  struct ancestor {
    ancestor(differ& d, std::uint64_t a, std::uint64_t b, const std::string& path) : d_(d) {
      if ((a && !d_.on_path_from_.insert(a).second) || (b && !d_.on_path_to_.insert(b).second) ||
          d_.on_path_from_.size() + d_.on_path_to_.size() > 2 * k_max_depth)
        throw store_error(EIO, "directory " + path +
                                   " contains itself or is nested too deep (a damaged volume: "
                                   "densefs fsck)");
      a_ = a;
      b_ = b;
    }
    ~ancestor() {
      if (a_) d_.on_path_from_.erase(a_);
      if (b_) d_.on_path_to_.erase(b_);
    }
    ancestor(const ancestor&) = delete;
    ancestor& operator=(const ancestor&) = delete;
    differ& d_;
    std::uint64_t a_ = 0, b_ = 0;
  };
  std::set<std::uint64_t> on_path_from_, on_path_to_;

  void both(const dirent_record& a, const dirent_record& b, const std::string& path) {
    const bool dir_a = S_ISDIR(a.type), dir_b = S_ISDIR(b.type);
    if (dir_a != dir_b || (a.type & S_IFMT) != (b.type & S_IFMT)) {
      whole(from_, a, path, '-');
      whole(to_, b, path, '+');
      return;
    }
    if (differs(a.ino, b.ino)) report('M', dir_a ? path + "/" : path);
    if (dir_a) directory(a.ino, b.ino, path + "/");
  }

  bool differs(std::uint64_t a, std::uint64_t b) {
    const std::optional<inode_record> x = inode(from_, a), y = inode(to_, b);
    if (!x || !y) return x.has_value() != y.has_value();
    if (x->mode != y->mode || x->uid != y->uid || x->gid != y->gid || x->size != y->size ||
        x->mtime != y->mtime || x->symlink_target != y->symlink_target || x->rdev != y->rdev)
      return true;
    if (!S_ISDIR(x->mode) && !same_rows(rows(from_, table::extents, extent_prefix(a)),
                                        rows(to_, table::extents, extent_prefix(b))))
      return true;
    return !same_rows(rows(from_, table::xattrs, xattr_prefix(a)),
                      rows(to_, table::xattrs, xattr_prefix(b)));
  }

  // Rows of one inode each: the same when what follows the inode number in
  // the keys (an offset, an xattr's name) and the values are (a file copied
  // whole under another number is the same file).
  static bool same_rows(const std::vector<std::pair<std::string, std::string>>& x,
                        const std::vector<std::pair<std::string, std::string>>& y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i].first.substr(8) != y[i].first.substr(8) || x[i].second != y[i].second) return false;
    return true;
  }

  const metadata_engine& from_;
  const metadata_engine& to_;
  const std::function<void(const tree_change&)>& fn_;
};

}  // namespace

tree_diff_summary diff_trees(const metadata_engine& from, const metadata_engine& to,
                             const std::function<void(const tree_change&)>& fn) {
  differ d(from, to, fn);
  d.directory(k_root_ino, k_root_ino, "/");
  return d.summary;
}

}  // namespace densefs::store
