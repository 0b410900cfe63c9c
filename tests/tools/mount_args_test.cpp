// Every form in which mount options reach densefs: `densefs mount`, the
// mount.fuse3/fstab form, -o repeats, dropped fstab noise, passthrough.
#include "tools/mount_args.h"

#include <gtest/gtest.h>

#include "tests/tools/tools_test_util.h"
#include "tools/tool_main.h"

namespace densefs::tools {
namespace {

using namespace tools::testing;  // tests/tools/tools_test_util.h

TEST(mount_args, defaults_with_two_paths) {
  const fs::mount_options o = parse_mount_args({"/srv/store", "/mnt/x"});
  const fs::mount_options d;
  EXPECT_EQ(o.store_dir, "/srv/store");
  EXPECT_EQ(o.mountpoint, "/mnt/x");
  EXPECT_FALSE(o.foreground);
  EXPECT_FALSE(o.debug);
  EXPECT_FALSE(o.single_threaded);
  EXPECT_FALSE(o.allow_other);
  EXPECT_FALSE(o.read_only);
  EXPECT_FALSE(o.remount);
  EXPECT_TRUE(o.posix_acl);
  EXPECT_EQ(o.entry_timeout, d.entry_timeout);
  EXPECT_EQ(o.attr_timeout, d.attr_timeout);
  EXPECT_EQ(o.negative_timeout, d.negative_timeout);
  EXPECT_EQ(o.writeback_cache, d.writeback_cache);
  EXPECT_EQ(o.encode_threads, d.encode_threads);
  EXPECT_EQ(o.max_staged_bytes, d.max_staged_bytes);
  EXPECT_EQ(o.commit_interval, std::chrono::milliseconds(1000));
  EXPECT_TRUE(o.codec_spec.empty());
  EXPECT_TRUE(o.fuse_options.empty());
  EXPECT_EQ(o.transport, fs::fuse_transport::automatic);
}

TEST(mount_args, transport_picks_how_requests_arrive_and_is_not_passed_to_fuse) {
  EXPECT_EQ(parse_mount_args({"s", "m", "-o", "transport=uring"}).transport,
            fs::fuse_transport::uring);
  EXPECT_EQ(parse_mount_args({"s", "m", "-o", "transport=device"}).transport,
            fs::fuse_transport::device);
  const fs::mount_options o = parse_mount_args({"s", "m", "-o", "transport=uring,transport=auto"});
  EXPECT_EQ(o.transport, fs::fuse_transport::automatic);
  EXPECT_TRUE(o.fuse_options.empty());
}

TEST(mount_args, remount_is_understood_not_passed_to_fuse) {
  const fs::mount_options o = parse_mount_args({"/s", "/m", "-o", "rw,remount,ro"});
  EXPECT_TRUE(o.remount);
  EXPECT_TRUE(o.read_only);
  EXPECT_TRUE(o.fuse_options.empty());
}

TEST(mount_args, noacl_turns_posix_acls_off_and_acl_back_on) {
  EXPECT_FALSE(parse_mount_args({"/s", "/m", "-o", "noacl"}).posix_acl);
  EXPECT_TRUE(parse_mount_args({"/s", "/m", "-o", "noacl,acl"}).posix_acl);
  EXPECT_TRUE(parse_mount_args({"/s", "/m", "-o", "noacl", "-o", "acl"}).fuse_options.empty());
}

TEST(mount_args, flags) {
  fs::mount_options o = parse_mount_args({"-f", "s", "m"});
  EXPECT_TRUE(o.foreground);
  EXPECT_FALSE(o.debug);
  o = parse_mount_args({"s", "-d", "m"});
  EXPECT_TRUE(o.debug);
  EXPECT_TRUE(o.foreground);  // -d implies -f
  o = parse_mount_args({"s", "m", "-s"});
  EXPECT_TRUE(o.single_threaded);
  // fstab's form: mount(8) would take "shared" itself.
  EXPECT_TRUE(parse_mount_args({"s", "m", "-o", "shared_writer"}).shared_writer);
  EXPECT_TRUE(parse_mount_args({"s", "m", "-o", "shared"}).shared_writer);
  EXPECT_FALSE(parse_mount_args({"s", "m"}).shared_writer);
}

TEST(mount_args, options_in_every_form) {
  // mount.fuse3 style: paths first, then -o with everything.
  fs::mount_options o = parse_mount_args(
      {"/srv/store", "/mnt/x", "-o", "rw,allow_other,entry_timeout=2.5,attr_timeout=0"});
  EXPECT_FALSE(o.read_only);
  EXPECT_TRUE(o.allow_other);
  EXPECT_DOUBLE_EQ(o.entry_timeout, 2.5);
  EXPECT_DOUBLE_EQ(o.attr_timeout, 0.0);

  // Glued -oX, repeated -o, options before the paths.
  o = parse_mount_args({"-oro", "-o", "negative_timeout=3", "-onoatime,encode_threads=3", "store",
                        "mnt", "-o", "max_staged=64M,commit=2.5"});
  EXPECT_TRUE(o.read_only);
  EXPECT_DOUBLE_EQ(o.negative_timeout, 3.0);
  EXPECT_EQ(o.encode_threads, 3u);
  EXPECT_EQ(o.max_staged_bytes, std::size_t{64} << 20);
  EXPECT_EQ(o.commit_interval, std::chrono::milliseconds(2500));
  EXPECT_EQ(o.fuse_options, std::vector<std::string>{"noatime"});
  EXPECT_EQ(o.store_dir, "store");
  EXPECT_EQ(o.mountpoint, "mnt");

  // Later options win, as with mount(8).
  o = parse_mount_args({"s", "m", "-o", "ro,rw", "-o", "no_writeback_cache"});
  EXPECT_FALSE(o.read_only);
  EXPECT_FALSE(o.writeback_cache);
  o = parse_mount_args({"s", "m", "-o", "no_writeback_cache,writeback_cache"});
  EXPECT_TRUE(o.writeback_cache);

  o = parse_mount_args({"s", "m", "-o", "debug"});
  EXPECT_TRUE(o.debug);
  EXPECT_TRUE(o.foreground);
  o = parse_mount_args({"s", "m", "-o", "foreground"});
  EXPECT_TRUE(o.foreground);
  EXPECT_FALSE(o.debug);
}

TEST(mount_args, codec_is_validated_and_canonical) {
  fs::mount_options o = parse_mount_args({"s", "m", "-o", "codec=zstd:level=9"});
  EXPECT_EQ(o.codec_spec, "zstd:level=9");
  o = parse_mount_args({"s", "m", "-o", "codec=zstd"});
  EXPECT_EQ(o.codec_spec, "zstd:level=3");
  o = parse_mount_args({"s", "m", "-o", "codec=raw,ro"});
  EXPECT_EQ(o.codec_spec, "raw");
  EXPECT_TRUE(o.read_only);
  o = parse_mount_args({"s", "m", "-o", "codec=zstd:level=1:min_savings=0.1"});
  EXPECT_EQ(o.codec_spec, "zstd:level=1:min_savings=0.1");
}

TEST(mount_args, fstab_noise_is_dropped) {
  const fs::mount_options o =
      parse_mount_args({"s", "m", "-o",
                        "nofail,_netdev,auto,noauto,user,users,defaults,comment=systemd.automount,"
                        "x-systemd.requires=foo,subtype=other,fsname=other,,nosuid"});
  EXPECT_EQ(o.fuse_options, std::vector<std::string>{"nosuid"});
}

TEST(mount_args, unknown_options_pass_through_unchanged) {
  const fs::mount_options o =
      parse_mount_args({"s", "m", "-o", "noatime,max_read=131072", "-o", "nodev,Weird=1"});
  EXPECT_EQ(o.fuse_options,
            (std::vector<std::string>{"noatime", "max_read=131072", "nodev", "Weird=1"}));
}

void expect_usage_error(const std::vector<std::string>& args, const std::string& must_name) {
  try {
    parse_mount_args(args);
    ADD_FAILURE() << "accepted " << ::testing::PrintToString(args);
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find(must_name), std::string::npos)
        << "'" << e.what() << "' does not name '" << must_name << "'";
  }
}

TEST(mount_args, relatime_is_understood_not_passed_to_fuse) {
  // libfuse knows no relatime ("unknown option"); densefs does it itself.
  fs::mount_options o = parse_mount_args({"s", "m", "-o", "relatime,nosuid"});
  EXPECT_TRUE(o.relatime);
  EXPECT_EQ(o.fuse_options, std::vector<std::string>{"nosuid"});
  o = parse_mount_args({"s", "m", "-o", "noatime"});
  EXPECT_FALSE(o.relatime);
  EXPECT_FALSE(parse_mount_args({"s", "m"}).relatime);
  expect_usage_error({"s", "m", "-o", "relatime=1"}, "relatime");
}

TEST(mount_args, strictatime_is_understood_not_passed_to_fuse) {
  // libfuse knows only nostrictatime; xfstests mounts with strictatime.
  const fs::mount_options o = parse_mount_args({"s", "m", "-o", "strictatime,nosuid"});
  EXPECT_TRUE(o.strictatime);
  EXPECT_TRUE(o.updates_atime());
  EXPECT_EQ(o.fuse_options, std::vector<std::string>{"nosuid"});
  EXPECT_FALSE(parse_mount_args({"s", "m"}).updates_atime());
  // The last atime option counts (xfstests generic/003 remounts with
  // noatime after relatime).
  EXPECT_FALSE(parse_mount_args({"s", "m", "-o", "relatime", "-o", "noatime"}).updates_atime());
  const fs::mount_options strict_then_rel =
      parse_mount_args({"s", "m", "-o", "strictatime,relatime"});
  EXPECT_TRUE(strict_then_rel.relatime);
  EXPECT_FALSE(strict_then_rel.strictatime);
}

TEST(mount_args, bad_values_are_usage_errors_naming_the_option) {
  expect_usage_error({"s", "m", "-o", "entry_timeout=abc"}, "entry_timeout");
  expect_usage_error({"s", "m", "-o", "attr_timeout=-1"}, "attr_timeout");
  expect_usage_error({"s", "m", "-o", "negative_timeout=inf"}, "negative_timeout");
  expect_usage_error({"s", "m", "-o", "entry_timeout="}, "entry_timeout");
  expect_usage_error({"s", "m", "-o", "entry_timeout"}, "entry_timeout");
  expect_usage_error({"s", "m", "-o", "encode_threads=two"}, "encode_threads");
  expect_usage_error({"s", "m", "-o", "encode_threads=-1"}, "encode_threads");
  expect_usage_error({"s", "m", "-o", "encode_threads=100000"}, "encode_threads");
  expect_usage_error({"s", "m", "-o", "max_staged=12X"}, "max_staged");
  expect_usage_error({"s", "m", "-o", "max_staged=1M"}, "max_staged");  // below one chunk
  expect_usage_error({"s", "m", "-o", "max_staged=99999999999999999999"}, "max_staged");
  expect_usage_error({"s", "m", "-o", "commit=soon"}, "commit");
  expect_usage_error({"s", "m", "-o", "commit=-1"}, "commit");
  expect_usage_error({"s", "m", "-o", "commit=301"}, "commit");
  expect_usage_error({"s", "m", "-o", "commit"}, "commit");
  expect_usage_error({"s", "m", "-o", "transport=rings"}, "transport");
  expect_usage_error({"s", "m", "-o", "transport"}, "transport");
  expect_usage_error({"s", "m", "-o", "codec=gzip"}, "gzip");
  expect_usage_error({"s", "m", "-o", "codec=zstd:level=99"}, "99");
  expect_usage_error({"s", "m", "-o", "ro=1"}, "ro");
  expect_usage_error({"s", "m", "-o"}, "-o");
  expect_usage_error({"s", "m", "-x"}, "-x");
  expect_usage_error({"s"}, "STORE and MOUNTPOINT");
  expect_usage_error({"s", "m", "extra"}, "STORE and MOUNTPOINT");
  expect_usage_error({}, "STORE and MOUNTPOINT");
}

TEST(mount_args, double_dash_ends_options) {
  const fs::mount_options o = parse_mount_args({"-f", "--", "-store", "-mnt"});
  EXPECT_EQ(o.store_dir, "-store");
  EXPECT_EQ(o.mountpoint, "-mnt");
}

TEST(parse_size, suffixes) {
  EXPECT_EQ(parse_size("x", "4096"), 4096u);
  EXPECT_EQ(parse_size("x", "4K"), 4096u);
  EXPECT_EQ(parse_size("x", "4k"), 4096u);
  EXPECT_EQ(parse_size("x", "256M"), std::size_t{256} << 20);
  EXPECT_EQ(parse_size("x", "256MiB"), std::size_t{256} << 20);
  EXPECT_EQ(parse_size("x", "2G"), std::size_t{2} << 30);
  EXPECT_EQ(parse_size("x", "1T"), std::size_t{1} << 40);
  EXPECT_THROW(parse_size("x", ""), usage_error);
  EXPECT_THROW(parse_size("x", "M"), usage_error);
  EXPECT_THROW(parse_size("x", "1.5G"), usage_error);
  EXPECT_THROW(parse_size("x", "1GG"), usage_error);
  EXPECT_THROW(parse_size("x", "-1"), usage_error);
  EXPECT_THROW(parse_size("x", "99999999999T"), usage_error);
}

// The CLI routes the helper form to mount; bad options stop it before any
// mounting (fs::mount is never reached in these tests).
TEST(mount_cli, two_positional_form_reaches_mount_parsing) {
  const auto r = run_cli({"/nonexistent/store", "/nonexistent/mnt", "-o", "entry_timeout=abc"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("densefs: mount: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("entry_timeout"), std::string::npos) << r.err;
}

TEST(mount_cli, mount_subcommand_usage_errors) {
  auto r = run_cli({"mount", "/only-one-path"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({"mount", "s", "m", "-o", "codec=lzma"});
  EXPECT_EQ(r.status, k_exit_usage);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_NE(r.err.find("lzma"), std::string::npos) << r.err;
}

TEST(mount_cli, help_lists_the_options) {
  const auto r = run_cli({"mount", "--help"});
  EXPECT_EQ(r.status, 0);
  for (const char* word :
       {"allow_other", "codec=", "max_staged", "writeback_cache", "relatime", "-f"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
}

TEST(mount_args, ingest_modes) {
  const fs::mount_options d;
  EXPECT_FALSE(d.fast_ingest);
  EXPECT_EQ(d.fast_ingest_small_bytes, 1u << 20);  // auto: small files fast
  fs::mount_options o = parse_mount_args({"/s", "/m", "-o", "ingest=strong"});
  EXPECT_FALSE(o.fast_ingest);
  EXPECT_EQ(o.fast_ingest_small_bytes, 0u);
  o = parse_mount_args({"/s", "/m", "-o", "ingest=fast"});
  EXPECT_TRUE(o.fast_ingest);
  o = parse_mount_args({"/s", "/m", "-o", "ingest=strong,ingest=auto"});
  EXPECT_FALSE(o.fast_ingest);
  EXPECT_EQ(o.fast_ingest_small_bytes, d.fast_ingest_small_bytes);
  EXPECT_TRUE(o.fuse_options.empty());
  expect_usage_error({"/s", "/m", "-o", "ingest=quick"}, "auto, strong or fast");
}

TEST(mount_args, idle_spin_is_off_unless_asked_for) {
  EXPECT_EQ(fs::mount_options{}.idle_spin_threads, 0u);
  const fs::mount_options o = parse_mount_args({"/s", "/m", "-o", "idle_spin=2"});
  EXPECT_EQ(o.idle_spin_threads, 2u);
  EXPECT_TRUE(o.fuse_options.empty());
  expect_usage_error({"/s", "/m", "-o", "idle_spin"}, "needs a value");
  expect_usage_error({"/s", "/m", "-o", "idle_spin=lots"}, "idle_spin");
}

}  // namespace
}  // namespace densefs::tools
