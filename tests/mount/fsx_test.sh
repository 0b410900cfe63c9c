#!/usr/bin/env bash
# fsx (the Rust rewrite, crates.io `fsx`) against densefs mounts, in several
# configurations, each on a fresh store with a fixed seed:
#   default    fsx's defaults: 256 KiB file, ops up to 64 KiB; pread/pwrite,
#              mmap read/write, truncate
#   large      a 16 MiB file (four 4 MiB staging slots, many chunks), ops up
#              to 1 MiB
#   reopen     close and reopen often, so data goes through release (commit
#              to the store) and is read back from chunks
#   reopen-wb  the same on a `-o writeback_cache` mount
#   alloc      truncate, posix_fallocate, punch hole, copy_file_range,
#              sendfile, fadvise, fsync/fdatasync and msync(MS_INVALIDATE)
#              weighted in next to the mmap ops
#   parallel   three fsx processes with the same seed on three files of one
#              mount: equal bytes at equal offsets, so concurrent commits
#              share chunks; `densefs gc` and `densefs recompress` run in
#              a loop meanwhile
#   smallcdc   `-o codec=+cdc:min=1K:avg=2K:max=8K`: chunk boundaries every
#              few KiB, so nearly every op straddles one
# fsx verifies every read against its model and exits non-zero on the first
# mismatch (printing the seed and its op log). After each run: unmount,
# `densefs fsck` must be clean, remount, and the file must equal what the
# same seed and configuration leave in a plain directory (fsx is
# deterministic; it keeps its own good copy, FILE.fsxgood, only on failure).
#
# DENSEFS_FSX_OPS=N overrides the op count of every run; DENSEFS_FSX_SEED=S
# the seed. DENSEFS_SOAK=1 runs 10x the ops.
# usage: fsx_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

fsx=$(find_tool fsx) || missing_tool "fsx (cargo install fsx)"
soak=1
[[ ${DENSEFS_SOAK:-0} == 1 ]] && soak=10

# write_config NAME: fsx's TOML for a configuration (doc/fsx.toml in the
# crate documents every key); the default configuration has none.
write_config() {
  case $1 in
  default) ;;
  large)
    # Few truncates, so the file stays large and spans several slots.
    cat <<'EOF'
flen = 16777216
[opsize]
max = 1048576
[weights]
close_open = 1
read = 10
write = 10
mapread = 5
mapwrite = 5
truncate = 1
EOF
    ;;
  reopen | reopen-wb)
    # close_open as often as a write: most reads find the data committed.
    cat <<'EOF'
flen = 1048576
[opsize]
max = 131072
[weights]
close_open = 8
read = 10
write = 10
mapread = 5
mapwrite = 5
truncate = 4
fsync = 1
EOF
    ;;
  alloc)
    cat <<'EOF'
flen = 2097152
[opsize]
max = 262144
[weights]
close_open = 2
read = 10
write = 10
mapread = 5
mapwrite = 5
invalidate = 1
truncate = 6
fsync = 1
fdatasync = 1
posix_fallocate = 6
punch_hole = 6
sendfile = 2
posix_fadvise = 1
copy_file_range = 4
EOF
    ;;
  parallel)
    cat <<'EOF'
flen = 1048576
[opsize]
max = 131072
[weights]
close_open = 6
read = 10
write = 10
mapread = 5
mapwrite = 5
truncate = 4
punch_hole = 2
copy_file_range = 2
EOF
    ;;
  smallcdc)
    cat <<'EOF'
flen = 1048576
[opsize]
max = 65536
[weights]
close_open = 4
read = 10
write = 10
mapread = 5
mapwrite = 5
truncate = 4
punch_hole = 3
copy_file_range = 3
EOF
    ;;
  esac
}

# NAME OPS SEED PROCESSES MOUNT_OPTIONS. PROCESSES fsx runs in parallel,
# each on its own file with the same seed: they write the same bytes at the
# same offsets, so their commits share chunks (refcounts change
# concurrently, which fsck checks).
configs=(
  "default 5000 1 1 -"
  "large 500 2 1 -"
  "reopen 2500 3 1 -"
  "reopen-wb 1500 4 1 writeback_cache"
  "alloc 2500 5 1 -"
  "parallel 1200 7 3 -"
  "smallcdc 1500 6 1 codec=+cdc:min=1K:avg=2K:max=8K"
)

# fsx must notice a wrong byte on this mount: its hidden --inject N skips
# step N while its model still applies it (fsx's own miscompare test).
"$densefs" mkfs "$work/store-inject" >/dev/null || fail "densefs mkfs failed"
mkdir -p "$work/mnt-inject"
# (An embedded store: mounted without the suite's extra options.)
DENSEFS_TEST_MOUNT_OPTIONS='' mount_densefs "$work/store-inject" "$work/mnt-inject"
if (cd "$work" && "$fsx" -N 10 -S 10 --inject 3 -P "$work" "$work/mnt-inject/f" >"$work/inject.log" 2>&1); then
  fail "fsx with a skipped step (--inject 3) passed: it would not notice a mismatch"
fi
grep -q miscompare "$work/inject.log" ||
  fail "fsx --inject 3 failed without a miscompare: $(tail -n 5 "$work/inject.log")"
umount_densefs "$work/mnt-inject"

runs=0
total_ops=0
mismatches=0
for entry in "${configs[@]}"; do
  read -r name ops seed procs options <<<"$entry"
  if [[ $options == *writeback_cache* ]] && mounts_shared; then
    echo "fsx $name: skipped: -o writeback_cache is refused beside other writers"
    continue
  fi
  ops=$((${DENSEFS_FSX_OPS:-$ops} * soak))
  seed=${DENSEFS_FSX_SEED:-$seed}
  store=$work/store-$name
  mnt=$work/mnt-$name
  plain=$work/plain-$name
  mkdir -p "$mnt" "$plain"
  config=()
  if [[ $name != default ]]; then
    write_config "$name" >"$work/$name.toml"
    config=(-f "$work/$name.toml")
  fi
  mount_options=()
  [[ $options != - ]] && mount_options=(-o "$options")

  mkfs_store "$store"
  mount_densefs "$store" "$mnt" "${mount_options[@]}"
  echo "fsx $name: seed $seed, $ops ops, $procs process(es), mount options ${options/#-/none}" \
    "(replay: fsx ${config[*]} -N $ops -S $seed FILE)"
  t0=$(now)
  pids=()
  for p in $(seq 1 "$procs"); do
    (cd "$work" && exec "$fsx" "${config[@]}" -N "$ops" -S "$seed" -P "$work" "$mnt/fsx-file-$p" \
      >"$work/$name-$p.log" 2>&1) &
    pids+=($!)
  done
  if ((procs > 1)); then
    # Meanwhile, garbage collection and background re-encoding on the same
    # store, until the first fsx process ends: both walk the chunks the
    # writers are sharing and releasing.
    (
      while kill -0 "${pids[@]}" 2>/dev/null; do
        "$densefs" gc "$store" >/dev/null 2>>"$work/$name-gc.log" || echo "densefs gc failed" >>"$work/$name-gc.log"
        "$densefs" recompress "$mnt/fsx-file-1" >/dev/null 2>>"$work/$name-gc.log" ||
          echo "densefs recompress failed" >>"$work/$name-gc.log"
        echo pass >>"$work/$name-maintenance"
        sleep 0.2
      done
    ) &
    maintenance=$!
  fi
  for p in $(seq 1 "$procs"); do
    runs=$((runs + 1))
    if ! wait "${pids[$((p - 1))]}" || ! grep -q "All operations completed A-OK" "$work/$name-$p.log"; then
      mismatches=$((mismatches + 1))
      tail -n 60 "$work/$name-$p.log" >&2
      [[ -f $work/$name.toml ]] && { echo "fsx configuration $name:" && cat "$work/$name.toml"; } >&2
      echo "COUNTS: fsx runs=$runs ops=$total_ops mismatches=$mismatches"
      fail "fsx $name (seed $seed) failed on densefs ($mnt/fsx-file-$p)"
    fi
    total_ops=$((total_ops + ops))
  done
  if ((procs > 1)); then
    wait "$maintenance"
    if grep -q failed "$work/$name-gc.log"; then
      cat "$work/$name-gc.log" >&2
      fail "densefs gc or recompress failed while fsx $name ran"
    fi
    echo "fsx $name: $(wc -l <"$work/$name-maintenance" 2>/dev/null || echo 0) gc+recompress passes meanwhile"
  fi
  t1=$(now)

  # The reference: the same seed and configuration in a plain directory.
  (cd "$work" && "$fsx" "${config[@]}" -N "$ops" -S "$seed" -P "$plain" "$plain/fsx-file" \
    >"$work/$name-plain.log" 2>&1) || fail "fsx $name failed on a plain directory: $(tail -n 5 "$work/$name-plain.log")"
  for p in $(seq 1 "$procs"); do
    cmp "$plain/fsx-file" "$mnt/fsx-file-$p" ||
      fail "fsx $name: $mnt/fsx-file-$p differs from the reference"
  done

  umount_densefs "$mnt"
  "$densefs" fsck "$store" >"$work/$name-fsck.log" 2>&1 ||
    fail "densefs fsck $store after fsx $name is not clean: $(cat "$work/$name-fsck.log")"
  mount_densefs "$store" "$mnt"
  for p in $(seq 1 "$procs"); do
    cmp "$plain/fsx-file" "$mnt/fsx-file-$p" ||
      fail "fsx $name: after a remount $mnt/fsx-file-$p differs from the reference"
    [[ $(stat -c %s "$mnt/fsx-file-$p") == $(stat -c %s "$plain/fsx-file") ]] ||
      fail "fsx $name: after a remount the size of $mnt/fsx-file-$p differs from the reference"
  done
  umount_densefs "$mnt"
  echo "fsx $name: A-OK in $(elapsed "$t0" "$t1")s; fsck clean; identical after remount" \
    "($(stat -c %s "$plain/fsx-file") bytes)"
done

echo "COUNTS: fsx runs=$runs ops=$total_ops mismatches=$mismatches"
echo "PASS"
