#!/usr/bin/env bash
# pjdfstest (the Rust rewrite, `cargo install pjdfstest`) against a fresh
# densefs mount. POSIX conformance is not complete yet (issue 2 fixes what it
# can; the zero-failure bar comes later), so the failures measured when this
# test was set up are listed in pjdfstest_known_failures.txt: the test fails
# on any failure NOT in that list, and names listed tests that pass now so
# the list can shrink.
# usage: pjdfstest_test.sh DENSEFS_BINARY SOURCE_DIR
# Environment: DENSEFS_PJDFSTEST_PATH tests another directory instead of a
# densefs mount (to see what a reference file system fails).
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

pjdfstest=$(find_tool pjdfstest) || missing_tool "pjdfstest (cargo install pjdfstest)"
known_file=$(dirname "$(realpath "${BASH_SOURCE[0]}")")/pjdfstest_known_failures.txt
[[ -f $known_file ]] || fail "$known_file is missing"

# pjdfstest switches to these users and groups for its permission tests.
getent group nogroup >/dev/null || groupadd --system nogroup
getent group tests >/dev/null || groupadd --system tests
getent passwd tests >/dev/null ||
  useradd --system --gid tests --no-create-home --home-dir / \
    --shell /usr/sbin/nologin --comment "pjdfstest dummy user" tests

# naptime: the sleep between two changes whose timestamps must differ. 50 ms
# is above every clock granularity here (ext4 passes everything with it, and
# fails 6 timestamp tests with 1 ms).
# allow_remount stays off: densefs supports `mount -o remount,ro` (pinned by
# mount.lifecycle.remount_switches_between_read_only_and_read_write), but when
# open::etxtbsy flakes, its `sleep` child outlives the test and the kernel
# refuses every read-only remount (EBUSY) for 5 s, failing 4 EROFS tests too.
cat >"$work/pjdfstest.toml" <<'EOF'
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.05
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
EOF

if [[ -n ${DENSEFS_PJDFSTEST_PATH:-} ]]; then
  target=$DENSEFS_PJDFSTEST_PATH
  echo "testing $target instead of a densefs mount"
else
  store=$work/store
  mnt=$work/mnt
  mkdir -p "$mnt"
  # The permission tests run as `nobody` and `tests`: they must be able to
  # reach the mount point (mktemp made $work 0700).
  chmod 0755 "$work"
  "$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs $store failed"
  # allow_other: without it FUSE lets only the mounting user (root) in, and
  # every test that switches user would fail with EACCES.
  mount_densefs "$store" "$mnt" -o allow_other
  target=$mnt
fi
mkdir -p "$target/pjdfstest"
chmod 0755 "$target/pjdfstest"

echo "$pjdfstest -c pjdfstest.toml -p $target/pjdfstest"
set +e
(cd "$target/pjdfstest" && RUST_BACKTRACE=0 "$pjdfstest" -c "$work/pjdfstest.toml" \
  -p "$target/pjdfstest") >"$work/pjdfstest.out" 2>&1
rc=$?
set -e

# Result lines are "NAME<spaces>ok|FAILED|skipped"; the next indented lines
# say why.
summary=$(grep -E '^Summary: ' "$work/pjdfstest.out" || true)
if [[ -z $summary ]]; then
  tail -n 40 "$work/pjdfstest.out" >&2
  fail "pjdfstest ended (exit $rc) without its summary line"
fi
echo "$summary"
awk 'NF == 2 && $2 == "FAILED" { print $1 }' "$work/pjdfstest.out" | sort -u >"$work/failed"
awk 'NF == 2 && $2 == "ok" { print $1 }' "$work/pjdfstest.out" | sort -u >"$work/passed"
sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$known_file" | sort -u >"$work/known"

comm -23 "$work/failed" "$work/known" >"$work/new_failures"
comm -12 "$work/passed" "$work/known" >"$work/fixed"
echo "failed: $(wc -l <"$work/failed") ($(wc -l <"$work/known") known failures listed)"
echo "skipped, by reason:"
awk 'NF == 2 && $2 == "skipped" { getline reason; sub(/^[ \t]+/, "", reason); n[reason]++ }
     END { for (r in n) printf "  %3d  %s\n", n[r], r }' "$work/pjdfstest.out" | sort -rn

if [[ -s $work/fixed ]]; then
  echo
  echo "These listed known failures pass now; remove them from" \
    "tests/mount/pjdfstest_known_failures.txt:"
  sed 's/^/  /' "$work/fixed"
fi
if [[ -s $work/new_failures ]]; then
  echo
  echo "New failures (not in tests/mount/pjdfstest_known_failures.txt):" >&2
  while read -r name; do
    # The test's line and the reason lines under it.
    awk -v n="$name" '$1 == n && $2 == "FAILED" { p = 1; print; next }
                      p && /^\t/ { print; next } { p = 0 }' "$work/pjdfstest.out" >&2
  done <"$work/new_failures"
  fail "$(wc -l <"$work/new_failures") pjdfstest tests fail that did not before"
fi
if [[ -z ${DENSEFS_PJDFSTEST_PATH:-} ]]; then
  mountpoint -q "$mnt" || fail "the mount went away during pjdfstest"
  umount_densefs "$mnt"
fi
echo "PASS"
