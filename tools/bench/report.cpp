// The report: one side-by-side table (rows workload x cache x procs, a
// column group per target with time, rate and ratio to the baseline), the
// space table, all raw figures as JSON, and a grouped bar chart as SVG
// written by hand (no charting library).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "tools/bench/bench.h"
#include "tools/format.h"

namespace densefs::tools::bench {
namespace {

using key = std::tuple<std::string, std::string, int>;  // workload, cache, procs

key key_of(const result& r) {
  return {r.workload, r.cache, r.procs};
}

// Row keys in the order they were measured.
std::vector<key> row_keys(const report& r) {
  std::vector<key> keys;
  for (const auto& x : r.results) {
    if (std::find(keys.begin(), keys.end(), key_of(x)) == keys.end()) keys.push_back(key_of(x));
  }
  return keys;
}

const result* find(const report& r, const key& k, const std::string& target) {
  for (const auto& x : r.results) {
    if (key_of(x) == k && x.target == target) return &x;
  }
  return nullptr;
}

// A cell that failed in part (an entry that could not be read, a worker
// that died) gives no ratio: it measured less work than its row.
bool usable(const result* x) {
  return x != nullptr && x->available && x->m.wall > 0 && x->m.errors == 0 &&
         x->m.failed_workers == 0;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// entries/s for walks, bytes/s for everything else.
double rate(const result& x) {
  if (x.m.wall <= 0) return 0;
  return static_cast<double>(x.workload == "walk" ? x.m.entries : x.m.bytes) / x.m.wall;
}

std::string human_rate(const result& x) {
  const double v = rate(x);
  if (x.workload == "walk") {
    if (v >= 1e6) return fixed(v / 1e6, 2) + "M/s";
    if (v >= 1e3) return fixed(v / 1e3, 1) + "k/s";
    return fixed(v, 0) + "/s";
  }
  return fixed(v / (1024.0 * 1024.0), 1) + " MiB/s";
}

// x's wall time over `other`'s in the same row.
std::optional<double> ratio_to(const report& r, const result& x, const std::string& other) {
  const result* base = find(r, key_of(x), other);
  if (!usable(base) || !usable(&x)) return std::nullopt;
  return x.m.wall / base->m.wall;
}

std::optional<double> ratio(const report& r, const result& x) {
  return ratio_to(r, x, r.targets.front());
}

// The targets between the baseline and the last one are peers: the last
// target (the file system under test) gets a ratio to each of them too, so
// that "densefs vs ext4" and "densefs vs btrfs" come from one run.
std::vector<std::string> peers(const report& r) {
  if (r.targets.size() < 3) return {};
  return {r.targets.begin() + 1, r.targets.end() - 1};
}

std::string percent(std::int64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  return fixed(100.0 * static_cast<double>(part) / static_cast<double>(whole), 1) + "%";
}

std::string signed_size(std::int64_t v) {
  return v < 0 ? "-" + human_size(static_cast<std::uint64_t>(-v))
               : human_size(static_cast<std::uint64_t>(v));
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string format_seconds(double s) {
  return fixed(s, s < 1 ? 3 : s < 10 ? 2 : 1) + " s";
}

std::string render_table(const report& r) {
  std::ostringstream out;
  if (!r.results.empty()) {
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> header{"workload", "cache", "procs"};
    for (std::size_t t = 0; t < r.targets.size(); ++t) {
      header.push_back(r.targets[t]);
      header.push_back("rate");
      if (t > 0) header.push_back("vs " + r.targets.front());
    }
    for (const auto& p : peers(r)) header.push_back("vs " + p);
    rows.push_back(header);
    std::vector<std::string> notes;
    for (const auto& k : row_keys(r)) {
      std::vector<std::string> row{std::get<0>(k), std::get<1>(k).empty() ? "-" : std::get<1>(k),
                                   std::to_string(std::get<2>(k))};
      for (std::size_t t = 0; t < r.targets.size(); ++t) {
        const result* x = find(r, k, r.targets[t]);
        if (x == nullptr || !x->available) {
          row.insert(row.end(), {"n/a", ""});
          if (x != nullptr && !x->note.empty())
            notes.push_back(x->workload + " on " + x->target + ": " + x->note);
        } else {
          const bool bad = x->m.errors > 0 || x->m.failed_workers > 0;
          row.push_back(format_seconds(x->m.wall) + (bad ? " !" : ""));
          row.push_back(human_rate(*x));
          if (bad)
            notes.push_back(x->workload + " on " + x->target + ": " + std::to_string(x->m.errors) +
                            " errors, " + std::to_string(x->m.failed_workers) + " failed workers");
        }
        if (t > 0) {
          const auto q = x != nullptr ? ratio(r, *x) : std::nullopt;
          row.push_back(q ? fixed(*q, 2) + "x" : "-");
        }
      }
      const result* last = find(r, k, r.targets.back());
      for (const auto& p : peers(r)) {
        const auto q = last != nullptr ? ratio_to(r, *last, p) : std::nullopt;
        row.push_back(q ? fixed(*q, 2) + "x" : "-");
      }
      rows.push_back(row);
    }
    out << format_table(rows);
    for (const auto& ref : r.references) {
      out << "reference: " << ref.workload << " (" << ref.target << ", " << ref.procs
          << " procs): " << format_seconds(ref.m.wall) << ", " << human_rate(ref) << " over "
          << ref.m.entries << " files";
      // What each target's read of the same files reached, as a share of it.
      for (const auto& x : r.results) {
        if (x.workload == "read-jpeg" && x.cache == "cold" && x.procs == ref.procs && usable(&x) &&
            rate(ref) > 0)
          out << "; " << x.target << " read-jpeg cold " << x.procs
              << "p: " << fixed(rate(x) / rate(ref), 2) << "x of it";
      }
      out << '\n';
    }
    notes.insert(notes.end(), r.notes.begin(), r.notes.end());
    std::set<std::string> seen;
    for (const auto& n : notes) {
      if (seen.insert(n).second) out << "note: " << n << '\n';
    }
  }
  if (!r.space.empty()) {
    if (!r.results.empty()) out << '\n';
    std::vector<std::string> header{"space", "files", "logical"};
    std::set<std::string> with_stored;
    for (const auto& s : r.space) {
      if (s.fs_stored) with_stored.insert(s.target);
    }
    for (const auto& t : r.targets) {
      header.push_back(t + " used");
      header.push_back(t + " alloc");
      if (with_stored.count(t) != 0) header.push_back(t + " stored");
    }
    std::vector<std::vector<std::string>> rows{header};
    std::vector<std::string> types;
    for (const auto& s : r.space) {
      if (std::find(types.begin(), types.end(), s.type) == types.end()) types.push_back(s.type);
    }
    for (const auto& type : types) {
      std::vector<std::string> row{type};
      bool first = true;
      for (const auto& t : r.targets) {
        const space_result* s = nullptr;
        for (const auto& x : r.space) {
          if (x.type == type && x.target == t) s = &x;
        }
        if (first) {
          row.push_back(s != nullptr ? std::to_string(s->files) : "-");
          row.push_back(s != nullptr ? human_size(s->logical) : "-");
          first = false;
        }
        if (s == nullptr) {
          row.insert(row.end(), {"-", "-"});
          if (with_stored.count(t) != 0) row.push_back("-");
          continue;
        }
        row.push_back(signed_size(s->used) + " (" + percent(s->used, s->logical) + ")");
        row.push_back(human_size(s->allocated));
        if (with_stored.count(t) != 0)
          row.push_back(s->fs_stored ? signed_size(*s->fs_stored) + " (" +
                                           percent(*s->fs_stored, s->logical) + ")"
                                     : "-");
      }
      rows.push_back(row);
    }
    out << format_table(rows);
  }
  if (!r.cold) out << "note: " << r.cold_note << '\n';
  return out.str();
}

std::string render_json(const report& r) {
  using nlohmann::json;
  json j;
  j["input"] = r.input;
  j["targets"] = r.targets;
  j["baseline"] = r.targets.empty() ? "" : r.targets.front();
  j["cold"] = r.cold;
  if (!r.cold) j["cold_note"] = r.cold_note;
  j["results"] = json::array();
  for (const auto& x : r.results) {
    json e{{"workload", x.workload},
           {"cache", x.cache},
           {"procs", x.procs},
           {"target", x.target},
           {"available", x.available}};
    if (!x.available) {
      e["note"] = x.note;
    } else {
      e.update({{"wall_s", x.m.wall},
                {"user_s", x.m.user},
                {"sys_s", x.m.sys},
                {"entries", x.m.entries},
                {"bytes", x.m.bytes},
                {"errors", x.m.errors},
                {"failed_workers", x.m.failed_workers},
                {x.workload == "walk" ? "entries_per_s" : "bytes_per_s", rate(x)}});
      if (const auto q = ratio(r, x)) e["ratio_to_baseline"] = *q;
      // Wall time over every other target's in the row.
      json to = json::object();
      for (const auto& other : r.targets) {
        if (other == x.target) continue;
        if (const auto q = ratio_to(r, x, other)) to[other] = *q;
      }
      if (!to.empty()) e["ratio_to"] = to;
      // Scaling: throughput at N processes over throughput at 1.
      const result* one = find(r, {x.workload, x.cache, 1}, x.target);
      if (x.procs > 1 && usable(one) && rate(*one) > 0) e["scaling"] = rate(x) / rate(*one);
    }
    j["results"].push_back(e);
  }
  j["references"] = json::array();
  for (const auto& x : r.references) {
    j["references"].push_back({{"workload", x.workload},
                               {"target", x.target},
                               {"procs", x.procs},
                               {"wall_s", x.m.wall},
                               {"entries", x.m.entries},
                               {"bytes", x.m.bytes},
                               {"bytes_per_s", rate(x)}});
  }
  j["notes"] = r.notes;
  j["space"] = json::array();
  for (const auto& s : r.space) {
    json e{{"target", s.target},         {"type", s.type},       {"files", s.files},
           {"logical_bytes", s.logical}, {"used_bytes", s.used}, {"allocated_bytes", s.allocated}};
    if (s.fs_stored) e["densefs_stored_bytes"] = *s.fs_stored;
    j["space"].push_back(e);
  }
  return j.dump(2) + "\n";
}

std::string render_svg(const report& r) {
  // Bars are wall time relative to the baseline: absolute times differ by
  // orders of magnitude between workloads, ratios share one axis.
  const auto keys = row_keys(r);
  const std::size_t n_targets = std::max<std::size_t>(r.targets.size(), 1);
  constexpr double bar = 14, gap = 18, left = 50, top = 40, plot_h = 220, label_h = 130;
  const double group_w = static_cast<double>(n_targets) * bar + gap;
  const double width =
      left + static_cast<double>(std::max<std::size_t>(keys.size(), 1)) * group_w + 20;
  const double height = top + plot_h + label_h;
  double max_ratio = 1;
  for (const auto& x : r.results) {
    if (const auto q = ratio(r, x)) max_ratio = std::max(max_ratio, *q);
  }
  max_ratio = std::ceil(max_ratio);
  static const char* const k_colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                         "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fixed(width, 0) << "\" height=\""
    << fixed(height, 0) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<title>densefs bench: wall time relative to "
    << xml_escape(r.targets.empty() ? "" : r.targets.front()) << "</title>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Legend.
  for (std::size_t t = 0; t < r.targets.size(); ++t) {
    const double x = left + static_cast<double>(t) * 120;
    s << "<rect x=\"" << fixed(x, 0) << "\" y=\"10\" width=\"12\" height=\"12\" fill=\""
      << k_colors[t % 8] << "\"/>\n<text x=\"" << fixed(x + 16, 0) << "\" y=\"20\">"
      << xml_escape(r.targets[t]) << "</text>\n";
  }
  // Axis with a line at each whole ratio; the baseline is 1.
  const auto y_of = [&](double ratio) { return top + plot_h - ratio / max_ratio * plot_h; };
  for (int i = 0; i <= static_cast<int>(max_ratio); ++i) {
    const double y = y_of(i);
    s << "<line x1=\"" << fixed(left, 0) << "\" y1=\"" << fixed(y, 1) << "\" x2=\""
      << fixed(width - 10, 0) << "\" y2=\"" << fixed(y, 1) << "\" stroke=\""
      << (i == 1 ? "#888" : "#ddd") << "\"/>\n<text x=\"" << fixed(left - 6, 0) << "\" y=\""
      << fixed(y + 4, 1) << "\" text-anchor=\"end\">" << i << "x</text>\n";
  }
  for (std::size_t g = 0; g < keys.size(); ++g) {
    const double x0 = left + static_cast<double>(g) * group_w + gap / 2;
    for (std::size_t t = 0; t < r.targets.size(); ++t) {
      const result* x = find(r, keys[g], r.targets[t]);
      const auto q = x != nullptr ? ratio(r, *x) : std::nullopt;
      if (!q) continue;
      const double y = y_of(*q);
      s << "<rect x=\"" << fixed(x0 + static_cast<double>(t) * bar, 1) << "\" y=\"" << fixed(y, 1)
        << "\" width=\"" << fixed(bar - 2, 0) << "\" height=\"" << fixed(top + plot_h - y, 1)
        << "\" fill=\"" << k_colors[t % 8] << "\"><title>" << xml_escape(x->target) << ": "
        << format_seconds(x->m.wall) << " (" << fixed(*q, 2) << "x)</title></rect>\n";
    }
    const auto& [workload, cache, procs] = keys[g];
    const std::string label =
        workload + (cache.empty() ? "" : " " + cache) + " " + std::to_string(procs) + "p";
    const double lx = x0 + static_cast<double>(n_targets) * bar / 2;
    const double ly = top + plot_h + 10;
    s << "<text x=\"" << fixed(lx, 1) << "\" y=\"" << fixed(ly, 1)
      << "\" text-anchor=\"end\" transform=\"rotate(-60 " << fixed(lx, 1) << ' ' << fixed(ly, 1)
      << ")\">" << xml_escape(label) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace densefs::tools::bench
