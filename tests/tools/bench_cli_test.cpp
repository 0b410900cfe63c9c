// `densefs bench` in-process: strict options, --prepare on a tiny tree, the
// workloads against two temp dirs, and the table, JSON and SVG they give.
// Warm only, so the test never drops the machine's caches.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;
using namespace tools::testing;  // tests/tools/tools_test_util.h

bool bench_has(const char* program) {
  return ::access((std::string("/usr/bin/") + program).c_str(), X_OK) == 0 ||
         ::access((std::string("/bin/") + program).c_str(), X_OK) == 0;
}

TEST(bench_cli, bad_options_are_one_line_and_exit_2) {
  temp_dir tmp;
  const std::string t = "a=" + tmp.path().string();
  const std::vector<std::vector<std::string>> bad = {
      {"bench"},                                                // nothing to do
      {"bench", "--bogus"},                                     // unknown option
      {"bench", "--target", t},                                 // no --input
      {"bench", "--input", "x", "--target", "nolabel"},         // not LABEL=DIR
      {"bench", "--input", "x", "--target", t, "--target", t},  // label twice
      {"bench", "--input", "x", "--target", t, "--workloads", "walk,fly"},
      {"bench", "--input", "x", "--target", t, "--procs", "1,0"},
      {"bench", "--input", "x", "--target", t, "--procs", "2x"},
      {"bench", "--prepare", "p", "--size", "12Q"},
  };
  for (const auto& args : bad) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, 2) << args.back() << ": " << r.err;
    EXPECT_TRUE(is_one_error_line(r.err)) << args.back();
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  const auto help = run_cli({"bench", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--target"), std::string::npos);
}

TEST(bench_cli, input_that_was_not_prepared_is_an_error) {
  temp_dir tmp;
  const auto r = run_cli({"bench", "--input", (tmp / "none").string(), "--target",
                          "a=" + tmp.path().string(), "--warm-only"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("--prepare"), std::string::npos) << r.err;
}

class bench_cli_run : public ::testing::Test {
 protected:
  void SetUp() override {
    // A small source tree: files of several kinds in nested directories, a
    // symlink, and "JPEGs" (only their name and first bytes matter here).
    const stdfs::path src = tmp_ / "src";
    stdfs::create_directories(src / "doc" / "deep" / "er");
    stdfs::create_directories(src / "lib");
    for (int i = 0; i < 20; ++i) {
      write_file(src / "doc" / ("f" + std::to_string(i) + ".txt"),
                 std::string(1000 + 100 * i, static_cast<char>('a' + i % 26)));
    }
    write_file(src / "doc" / "deep" / "er" / "page.html", "<html><body>hi</body></html>\n");
    write_file(src / "lib" / "blob.bin", std::string(50000, '\x01'));
    stdfs::create_symlink("doc/f1.txt", src / "link");
    stdfs::create_directories(tmp_ / "jpegs");
    for (int i = 0; i < 3; ++i) {
      write_file(tmp_ / "jpegs" / ("p" + std::to_string(i) + ".jpg"),
                 std::string("\xff\xd8\xff\xe0") + std::string(3000, static_cast<char>(i)));
    }
    stdfs::create_directories(tmp_ / "a");
    stdfs::create_directories(tmp_ / "b");
  }

  testing::cli_result prepare(const std::string& big) {
    return run_cli({"bench", "--prepare", input(), "--size", "1M", "--big-size", big, "--source",
                    (tmp_ / "src").string(), "--big-source", (tmp_ / "src").string(), "--jpeg",
                    (tmp_ / "jpegs").string()});
  }

  std::vector<std::string> targets() const {
    return {"--target", "ext=" + (tmp_ / "a").string(), "--target",
            "other=" + (tmp_ / "b").string()};
  }

  std::string input() const { return (tmp_ / "in").string(); }

  temp_dir tmp_;
};

TEST_F(bench_cli_run, prepare_builds_the_inputs) {
  const auto r = prepare("40K");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(stdfs::file_size(stdfs::path(input()) / "big.bin"), 40u * 1024);
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  EXPECT_TRUE(stdfs::is_regular_file(stdfs::path(input()) / "tree/src/doc/deep/er/page.html"));
  EXPECT_TRUE(stdfs::is_symlink(stdfs::path(input()) / "tree/src/link"));
  EXPECT_TRUE(stdfs::is_regular_file(stdfs::path(input()) / "jpeg/p2.jpg"));
  EXPECT_NE(r.err.find("prepared"), std::string::npos) << r.err;
  // A second --prepare into the same directory would mix inputs.
  const auto again = prepare("40K");
  EXPECT_EQ(again.status, 1);
  EXPECT_TRUE(is_one_error_line(again.err)) << again.err;
}

TEST_F(bench_cli_run, prepare_says_when_the_big_sources_run_out) {
  // The source tree holds about 100 KiB: big.bin stops there rather than
  // repeat bytes a deduplicating file system would store once.
  const auto r = prepare("1M");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto size = stdfs::file_size(stdfs::path(input()) / "big.bin");
  EXPECT_GT(size, 90u * 1024);
  EXPECT_LT(size, 1u << 20);
  EXPECT_NE(r.err.find("note: the --big-source trees hold only"), std::string::npos) << r.err;
}

TEST_F(bench_cli_run, workloads_on_two_dirs_give_table_json_and_svg) {
  ASSERT_EQ(prepare("64K").status, 0);
  auto args = std::vector<std::string>{"bench",
                                       "--input",
                                       input(),
                                       "--warm-only",
                                       "--procs",
                                       "1,2",
                                       "--json",
                                       "--svg",
                                       (tmp_ / "chart.svg").string(),
                                       "--save-json",
                                       (tmp_ / "saved.json").string()};
  const auto t = targets();
  args.insert(args.end(), t.begin(), t.end());
  const auto r = run_cli(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(json::parse(read_file(tmp_ / "saved.json")), j);  // --save-json: the same figures
  EXPECT_EQ(j.at("targets"), json::array({"ext", "other"}));
  EXPECT_EQ(j.at("baseline"), "ext");
  EXPECT_FALSE(j.at("cold").get<bool>());

  // What each workload must have seen: 20 + 1 + 1 files and 5 directories
  // plus a symlink in the tree (24 + 4 = 28 entries below tree/).
  std::uint64_t tree_bytes = 0, tree_files = 0;
  for (const auto& e : stdfs::recursive_directory_iterator(stdfs::path(input()) / "tree")) {
    if (e.is_regular_file() && !e.is_symlink()) {
      tree_bytes += e.file_size();
      ++tree_files;
    }
  }
  ASSERT_EQ(tree_files, 22u);
  std::set<std::string> rows;
  for (const auto& x : j.at("results")) {
    const std::string w = x.at("workload");
    const int procs = x.at("procs");
    rows.insert(w + "/" + std::to_string(procs) + "/" + x.at("target").get<std::string>());
    ASSERT_TRUE(x.at("available").get<bool>()) << x.dump();
    EXPECT_EQ(x.at("errors"), 0) << x.dump();
    EXPECT_EQ(x.at("failed_workers"), 0) << x.dump();
    EXPECT_GT(x.at("wall_s").get<double>(), 0) << x.dump();
    if (w == "walk") {
      EXPECT_EQ(x.at("entries"), 28 * procs) << x.dump();  // each walks it all
    }
    if (w == "read-small") {
      EXPECT_EQ(x.at("bytes"), tree_bytes) << x.dump();  // the files split over the workers
      EXPECT_EQ(x.at("entries"), tree_files) << x.dump();
    }
    if (w == "read-large" || w == "write-big") {
      EXPECT_EQ(x.at("bytes"), 64 * 1024);
    }
    if (w == "read-jpeg") {
      EXPECT_EQ(x.at("entries"), 3);
    }
    if (x.at("target") == "other") {
      EXPECT_TRUE(x.contains("ratio_to_baseline")) << x.dump();
    }
    if (w == "walk" && procs == 2) {
      EXPECT_TRUE(x.contains("scaling")) << x.dump();
    }
  }
  for (const std::string target : {"ext", "other"}) {
    for (const std::string row : {"walk/1", "walk/2", "read-small/1", "read-small/2", "read-jpeg/1",
                                  "read-large/1", "write-big/1", "write-cp/1", "write-rsync/1"}) {
      if (row == "write-rsync/1" && !bench_has("rsync")) continue;
      EXPECT_EQ(rows.count(row + "/" + target), 1u) << row << " on " << target;
    }
  }

  // space: every input byte counted once per target, in rows "INPUT KIND"
  // by classifier, plus "INPUT (all)" for an input of several kinds.
  std::uint64_t logical = 0;
  std::uint64_t tree_total = 0;
  std::set<std::string> kinds;
  for (const auto& s : j.at("space")) {
    const auto type = s.at("type").get<std::string>();
    kinds.insert(type);
    if (s.at("target") != "ext") continue;
    if (type == "tree (all)") {
      tree_total = s.at("logical_bytes").get<std::uint64_t>();
    } else {
      logical += s.at("logical_bytes").get<std::uint64_t>();
    }
  }
  EXPECT_EQ(logical, tree_bytes + 3 * 3004 + 64 * 1024);
  EXPECT_EQ(tree_total, tree_bytes);
  EXPECT_EQ(kinds.count("jpeg jpeg"), 1u);
  EXPECT_EQ(kinds.count("tree text"), 1u);

  // The work directories are gone; the targets are as they were.
  EXPECT_TRUE(stdfs::is_empty(tmp_ / "a"));
  EXPECT_TRUE(stdfs::is_empty(tmp_ / "b"));

  // The chart: one bar per measured cell that has a ratio, tags balanced.
  const std::string svg = read_file(tmp_ / "chart.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  const auto count = [&](const std::string& s) {
    std::size_t n = 0;
    for (auto p = svg.find(s); p != std::string::npos; p = svg.find(s, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<text"), count("</text>"));
  EXPECT_EQ(count("<title>"), count("</title>"));
  EXPECT_EQ(count("<rect"), 1 + 2 + rows.size()) << svg;  // background, legend, bars
  EXPECT_EQ(count("<rect") - count("</rect>"), 1u + 2u);
}

TEST_F(bench_cli_run, table_has_a_column_per_target_and_a_row_per_workload) {
  ASSERT_EQ(prepare("32K").status, 0);
  auto args = std::vector<std::string>{"bench",   "--input", input(),       "--warm-only",
                                       "--procs", "1",       "--workloads", "walk,read"};
  const auto t = targets();
  args.insert(args.end(), t.begin(), t.end());
  const auto r = run_cli(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // no progress line when not a terminal
  std::istringstream lines(r.out);
  std::string header;
  std::getline(lines, header);
  EXPECT_TRUE(std::regex_search(header, std::regex("^workload +cache +procs +ext +rate +other "
                                                   "+rate +vs ext$")))
      << r.out;
  std::size_t rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, std::regex("^(walk|read-small|read-jpeg|read-large) +warm +1 +"
                                           "[0-9.]+ s +[0-9.]+.*/s +[0-9.]+ s +.*/s +[0-9.]+x$")))
      ++rows;
  }
  EXPECT_EQ(rows, 4u) << r.out;
  EXPECT_NE(r.out.find("note: warm only"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("write"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace densefs::tools
