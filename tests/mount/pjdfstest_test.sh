#!/usr/bin/env bash
# pjdfstest (the Rust rewrite, `cargo install pjdfstest`) against densefs,
# twice, each on a fresh store and mount: with the default cache timeouts
# (`default`: entry and attribute caches 1 s) and with every kernel cache
# timeout 0 (`timeouts0`). Any failure fails the test: there is no list of
# known failures. Skips are reported by reason; docs/testing.md explains each.
# usage: pjdfstest_test.sh DENSEFS_BINARY SOURCE_DIR
# Environment:
#   DENSEFS_PJDFSTEST_RUNS=N  runs each configuration N times (default 1), to
#                             check that a fix for a flaky test holds.
#   DENSEFS_PJDFSTEST_PATH=DIR  tests DIR once instead of densefs mounts (to
#                             see what a reference file system fails).
#   DENSEFS_PJDFSTEST_WRITERS=2  on scale-out volumes mounted -o shared
#                             (scale_out_tools_test.sh): each volume is
#                             mounted twice, as two writers beside each
#                             other (the second by the volume's URI from a
#                             client directory of its own), and pjdfstest
#                             runs on both at once.
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

pjdfstest=$(find_tool pjdfstest) || missing_tool "pjdfstest (cargo install pjdfstest)"
runs=${DENSEFS_PJDFSTEST_RUNS:-1}
[[ $runs =~ ^[1-9][0-9]*$ ]] || fail "DENSEFS_PJDFSTEST_RUNS=$runs is not a positive number"

# pjdfstest switches to these users and groups for its permission tests.
getent group nogroup >/dev/null || groupadd --system nogroup
getent group tests >/dev/null || groupadd --system tests
getent passwd tests >/dev/null ||
  useradd --system --gid tests --no-create-home --home-dir / \
    --shell /usr/sbin/nologin --comment "pjdfstest dummy user" tests

# The permission tests run as `nobody` and `tests`: they must be able to
# reach the mount points (mktemp made $work 0700).
chmod 0755 "$work"
# EXDEV: link and rename into a directory of another file system. $work is
# on the host's file system, never on the densefs mount. (run_pjdfstest
# makes one per run, so that two runs at once keep apart.)
secondary=$work/secondary
mkdir -p "$secondary"
chmod 0777 "$secondary"
writers=${DENSEFS_PJDFSTEST_WRITERS:-1}
[[ $writers == 1 || $writers == 2 ]] || fail "DENSEFS_PJDFSTEST_WRITERS=$writers is not 1 or 2"
[[ $writers == 1 || ${DENSEFS_TEST_MOUNT_OPTIONS:-} == *shared* ]] ||
  fail "DENSEFS_PJDFSTEST_WRITERS=2 needs scale-out volumes mounted -o shared"

# naptime: the sleep between two changes whose timestamps must differ. 50 ms
# is above every clock granularity here (ext4 passes everything with it, and
# fails 6 timestamp tests with 1 ms).
# allow_remount: the 13 EROFS tests run `mount -o remount,ro MNT` and back
# (run_pjdfstest).
# The file is $config (run_pjdfstest's own, so that two runs at once keep
# apart).
config=$work/pjdfstest.toml
write_config() {
  cat >"$config" <<EOF
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.05
allow_remount = $1

[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
EOF
}

failures=0
# pjdfstest_process OUT TARGET [PATTERN]: one pjdfstest process in
# TARGET/pjdfstest (all tests, or those whose name contains PATTERN); checks
# that its summary agrees with its result lines, which go to OUT as
# "NAME STATUS" lines, reasons to OUT.reasons as "NAME<TAB>REASON".
pjdfstest_process() {
  local out=$1 target=$2 rc summary
  shift 2
  mkdir -p "$target/pjdfstest"
  chmod 0755 "$target/pjdfstest"
  set +e
  (cd "$target/pjdfstest" && RUST_BACKTRACE=0 "$pjdfstest" -c "$config" \
    ${secondary:+-s "$secondary"} -p "$target/pjdfstest" "$@") >"$out.log" 2>&1
  rc=$?
  set -e
  # Result lines are "NAME<spaces>ok|FAILED|skipped"; the next indented
  # lines say why.
  summary=$(grep -E '^Summary: ' "$out.log" || true)
  if [[ -z $summary ]]; then
    tail -n 40 "$out.log" >&2
    fail "pjdfstest ended (exit $rc) without its summary line"
  fi
  awk 'NF == 2 && ($2 == "ok" || $2 == "FAILED" || $2 == "skipped") { print $1, $2 }' \
    "$out.log" >"$out"
  awk 'NF == 2 && ($2 == "FAILED" || $2 == "skipped") { name = $1; next }
       name != "" && /^\t/ && !/Backtrace|^\t *[0-9]+: |^\t *at / { sub(/^\t+/, ""); print name "\t" $0 }
       !/^\t/ { name = "" }' "$out.log" >"$out.reasons"
  # The summary must agree with the lines counted here, or the parsing is
  # wrong and a failure could go unseen.
  local passed failed skipped
  passed=$(grep -c ' ok$' "$out" || true)
  failed=$(grep -c ' FAILED$' "$out" || true)
  skipped=$(grep -c ' skipped$' "$out" || true)
  [[ $summary == "Summary: $failed failed, $skipped skipped, $passed passed,"* ]] ||
    fail "counted $failed failed, $skipped skipped, $passed passed; pjdfstest says: $summary"
  if ((failed == 0 && rc != 0)); then
    tail -n 20 "$out.log" >&2
    fail "pjdfstest exited $rc with no failed test"
  fi
}

# run_pjdfstest NAME TARGET: every pjdfstest test once in TARGET; prints the
# skips by reason, every failure with its reason, the wall time and a COUNTS
# line. Adds the failures to $failures.
#
# Two pjdfstest processes: the 13 EROFS tests (names containing "erofs")
# first, then all others (the EROFS ones skip there: allow_remount off).
# pjdfstest's posix_fallocate::affected_only_create_flags never closes the
# two files it opens O_RDWR (nix's open returns a raw fd), and no file system
# can be remounted read-only while a file is open for writing (EBUSY; ext4
# too), so every EROFS test that ran after it in the same process failed.
run_pjdfstest() {
  local name=$1 target=$2 out=$work/$1 start end seconds
  local config=$work/$name.toml secondary=$work/secondary-$name
  mkdir -p "$secondary"
  chmod 0777 "$secondary"
  echo "== $name: $pjdfstest -c pjdfstest.toml -s $secondary -p $target/pjdfstest"
  start=$(now)
  if [[ -n $remount_helper ]]; then
    write_config true
    pjdfstest_process "$out.erofs" "$target" erofs
    # Only the EROFS tests ran; none may have skipped (they need the remount).
    [[ $(wc -l <"$out.erofs") -eq 13 ]] || fail "$name: expected 13 EROFS tests, got:
$(cat "$out.erofs")"
  else
    : >"$out.erofs"
    : >"$out.erofs.reasons"
  fi
  write_config false
  pjdfstest_process "$out.rest" "$target"
  end=$(now)
  seconds=$(elapsed "$start" "$end")
  # Each test's result from the process that ran it.
  awk 'NR == FNR { erofs[$1] = 1; print; next } !($1 in erofs)' \
    "$out.erofs" "$out.rest" >"$out.results"
  cat "$out.erofs.reasons" "$out.rest.reasons" >"$out.reasons"
  local passed failed skipped total
  passed=$(grep -c ' ok$' "$out.results" || true)
  failed=$(grep -c ' FAILED$' "$out.results" || true)
  skipped=$(grep -c ' skipped$' "$out.results" || true)
  total=$(wc -l <"$out.results")
  echo "passed $passed, failed $failed, skipped $skipped of $total"
  if ((skipped > 0)); then
    echo "skipped, by reason:"
    awk -F '\t' 'NR == FNR { if ($2 == "skipped") s[$1] = 1; next }
                 ($1 in s) && !seen[$1]++ { n[$2]++ }
                 END { for (r in n) printf "  %3d  %s\n", n[r], r }' \
      FS=' ' "$out.results" FS='\t' "$out.reasons" | sort -rn
  fi
  if ((failed > 0)); then
    echo "failed:" >&2
    awk -F '\t' 'NR == FNR { if ($2 == "FAILED") f[$1] = 1; next }
                 ($1 in f) { print "  " $1 ": " $2 }' \
      FS=' ' "$out.results" FS='\t' "$out.reasons" >&2
    failures=$((failures + failed))
  fi
  echo "$name: $seconds s"
  echo "COUNTS: pjdfstest config=$name run=$total passed=$passed failed=$failed skipped=$skipped" \
    "seconds=$seconds"
}

if [[ -n ${DENSEFS_PJDFSTEST_PATH:-} ]]; then
  # Never remount a file system we did not mount: one process, no EROFS;
  # and $work may be on the same file system: no EXDEV.
  write_config false
  secondary=
  pjdfstest_process "$work/reference" "$DENSEFS_PJDFSTEST_PATH"
  cat "$work/reference.reasons"
  grep -c ' ok$' "$work/reference" | sed 's/^/passed: /'
  failures=$(grep -c ' FAILED$' "$work/reference" || true)
  ((failures == 0)) || fail "$failures pjdfstest tests failed on $DENSEFS_PJDFSTEST_PATH"
  echo "PASS"
  exit 0
fi

# `mount -o remount,ro MNT` goes through mount.fuse3, which runs `densefs`
# from the default PATH (/usr/local/bin, ...), not the binary under test;
# tools/setup.sh test installs it. Without it the EROFS tests cannot run.
remount_helper=$(env -i /bin/sh -c 'command -v densefs' || true)
if [[ -z $remount_helper ]]; then
  [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]] &&
    fail "densefs is not installed (mount -o remount needs it; tools/setup.sh test installs it)"
  echo "NOT RUN: the 13 EROFS tests (they remount through an installed densefs;" \
    "tools/setup.sh test installs it): counted as skipped"
fi
declare -A config_options=(
  [default]=""
  [timeouts0]="entry_timeout=0,attr_timeout=0,negative_timeout=0"
)
for run in $(seq "$runs"); do
  for name in default timeouts0; do
    store=$work/store-$name-$run
    # Short: pjdfstest binds sockets below it, and a socket path has at most
    # 107 bytes (ENAMETOOLONG beyond).
    mnt=$work/mnt
    mkdir -p "$mnt"
    mkfs_store "$store"
    # allow_other: without it FUSE lets only the mounting user (root) in, and
    # every test that switches user would fail with EACCES.
    options=allow_other${config_options[$name]:+,${config_options[$name]}}
    mount_densefs "$store" "$mnt" -o "$options"
    echo "mounted with -o $options"
    mounts=("$mnt")
    if ((writers == 2)); then
      # The second writer, in the background: its counts join the total
      # after it.
      mnt2=$work/mnt2
      mkdir -p "$mnt2"
      mount_densefs "$(volume_uri "$mkfs_store_db")" "$mnt2" \
        -o "$options,cache_dir=$work/client-$name-$run"
      echo "mounted again by $(volume_uri "$mkfs_store_db") as a second writer"
      mounts+=("$mnt2")
      run_pjdfstest "$name-second-writer" "$mnt2" >"$work/second-writer.out" 2>&1 &
      second=$!
    fi
    run_pjdfstest "$name" "$mnt"
    if ((writers == 2)); then
      rc=0
      wait "$second" || rc=$?
      cat "$work/second-writer.out"
      ((rc == 0)) || fail "$name: pjdfstest on the second writer ended with exit $rc"
      # Its failures, from its results (its count stayed in its subshell).
      [[ -s $work/$name-second-writer.results ]] ||
        fail "$name: the second writer's run left no results"
      second_failures=$(grep -c ' FAILED$' "$work/$name-second-writer.results" || true)
      failures=$((failures + second_failures))
    fi
    for m in "${mounts[@]}"; do
      mountpoint -q "$m" || fail "$name: the mount $m went away during pjdfstest"
      # The EROFS tests remount read-only and back: the mount must be writable.
      touch "$m/still-writable" || fail "$name: the mount $m is not writable after pjdfstest"
    done
    for m in "${mounts[@]}"; do umount_densefs "$m"; done
    "$densefs" fsck "$store" >"$work/fsck.out" 2>&1 ||
      { cat "$work/fsck.out" >&2; fail "$name: densefs fsck $store reports problems"; }
  done
done
((failures == 0)) || fail "$failures pjdfstest tests failed (listed above)"
echo "PASS"
