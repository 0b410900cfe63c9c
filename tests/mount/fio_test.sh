#!/usr/bin/env bash
# fio verify jobs on a densefs mount (buffered I/O, direct=0). Every block
# carries a crc32c header (verify=crc32c) and half-compressible data
# (buffer_compress_percentage), so chunks go through zstd rather than the raw
# guard. Three runs:
#   live      a sequential write, then four random writers in parallel with
#             mixed block sizes that read back what they wrote while writing
#             (verify_backlog) and all of it at the end, then two writers
#             overwriting their files six times over in random 16 KiB
#             blocks; on a default mount, then on a `-o writeback_cache` mount
#   remount   a sequential and two random writers without reading back
#             (on the writeback_cache mount); unmount, mount without it, and
#             the same jobs with verify_only=1
#   damage    one byte of one of those files overwritten through the mount:
#             verify_only must now fail, so the verification can fail
# Then `densefs fsck` must be clean.
# usage: fio_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

fio=$(find_tool fio) || missing_tool "fio (Debian fio)"
command -v jq >/dev/null || missing_tool "jq (Debian jq)"
size_factor=1
[[ ${DENSEFS_SOAK:-0} == 1 ]] && size_factor=8

store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"

common="[global]
directory=$mnt
direct=0
ioengine=psync
verify=crc32c
buffer_compress_percentage=50
buffer_compress_chunk=4k
refill_buffers=1
randrepeat=1
"
cat >"$work/live.fio" <<EOF
$common
[seq]
rw=write
bs=128k
size=$((128 * size_factor))m

[rand]
stonewall
rw=randwrite
numjobs=4
bsrange=4k-64k
size=$((32 * size_factor))m
verify_backlog=64

# Overwrites: 6x the file size in random 16 KiB blocks, so committed chunks
# are rewritten; with norandommap fio remembers the last write of each
# block (a fixed block size keeps that exact) and verifies those.
[over]
stonewall
rw=randwrite
norandommap=1
numjobs=2
bs=16k
size=$((8 * size_factor))m
io_size=$((48 * size_factor))m
verify_backlog=32
EOF
# The verify_only run needs do_verify=1 (with do_verify=0 it reads nothing
# and passes), so the write and the verify runs get their own job files.
remount_jobs="
[keep-seq]
rw=write
bs=1m
size=$((64 * size_factor))m

[keep-rand]
rw=randwrite
numjobs=2
bsrange=4k-128k
size=$((32 * size_factor))m
"
remount_bytes=$(((64 + 2 * 32) * size_factor * 1048576))
printf '%s\ndo_verify=0\n%s' "$common" "$remount_jobs" >"$work/remount-write.fio"
printf '%s\nverify_only=1\ndo_verify=1\n%s' "$common" "$remount_jobs" >"$work/remount-verify.fio"

jobs=0
verified=0
errors=0
# run_fio NAME JOBFILE [fio options]: runs fio with JSON output into
# $work/NAME.json; returns fio's exit status and adds up the counts.
run_fio() {
  local name=$1 jobfile=$2 rc=0
  shift 2
  # From $work: fio leaves its verify state files in the current directory.
  (cd "$work" && "$fio" --output-format=json --output="$work/$name.json" "$@" "$jobfile") >"$work/$name.out" 2>&1 || rc=$?
  if [[ -s $work/$name.json ]] && jq -e .jobs "$work/$name.json" >/dev/null 2>&1; then
    jobs=$((jobs + $(jq '.jobs | length' "$work/$name.json")))
    # Verification reads are the read bytes of these write-only jobs.
    verified=$((verified + $(jq '[.jobs[].read.io_bytes] | add' "$work/$name.json")))
    errors=$((errors + $(jq '[.jobs[].error | select(. != 0)] | length' "$work/$name.json")))
  fi
  return $rc
}
report() { echo "COUNTS: fio jobs=$jobs verified_bytes=$verified errors=$errors"; }

"$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs $store failed"
mount_densefs "$store" "$mnt"

t0=$(now)
for variant in default writeback_cache; do
  if [[ $variant == writeback_cache ]]; then
    umount_densefs "$mnt"
    mount_densefs "$store" "$mnt" -o writeback_cache
  fi
  run_fio "live-$variant" "$work/live.fio" || {
    report
    cat "$work/live-$variant.out" >&2
    fail "fio write+verify jobs failed on the mount ($variant)"
  }
  rm -f "$mnt"/seq.* "$mnt"/rand.* "$mnt"/over.*
done
t1=$(now)
echo "fio live: write+verify, sequential, 4 random and 2 overwriting writers, on a default and a" \
  "writeback_cache mount, in $(elapsed "$t0" "$t1")s"

# Written through the writeback_cache mount, verified after a plain mount.

run_fio remount-write "$work/remount-write.fio" || {
  report
  cat "$work/remount-write.out" >&2
  fail "fio writes for the remount check failed"
}
stats=$("$densefs" stats "$mnt" --json) || fail "densefs stats $mnt --json failed"
echo "fio remount: written; stats: logical $(jq .logical_bytes <<<"$stats") bytes," \
  "stored $(jq .stored_bytes <<<"$stats") bytes"
umount_densefs "$mnt"
mount_densefs "$store" "$mnt"
before=$verified
run_fio remount-verify "$work/remount-verify.fio" || {
  report
  cat "$work/remount-verify.out" >&2
  fail "fio verify_only after a remount failed"
}
((verified - before == remount_bytes)) ||
  fail "fio verify_only after the remount read $((verified - before)) bytes, not the $remount_bytes written"
t2=$(now)
echo "fio remount: verify_only after the remount clean in $(elapsed "$t1" "$t2")s"

# The same verification must catch one changed byte (fio's crc32c header
# covers each block). Not counted: this run is meant to fail.
saved=("$jobs" "$verified" "$errors")
# The byte's complement, so the file surely changes.
damage_at=$((5 * 1048576 + 777))
old_byte=$(od -An -tu1 -j "$damage_at" -N 1 "$mnt/keep-seq.0.0" | tr -d ' ')
# shellcheck disable=SC2059 # the format is the octal escape of the new byte
printf "\\$(printf '%03o' $((255 - old_byte)))" |
  dd of="$mnt/keep-seq.0.0" bs=1 seek="$damage_at" conv=notrunc status=none
[[ $(od -An -tu1 -j "$damage_at" -N 1 "$mnt/keep-seq.0.0" | tr -d ' ') == $((255 - old_byte)) ]] ||
  fail "could not change byte $damage_at of keep-seq.0.0 through the mount"
if run_fio damage "$work/remount-verify.fio" --section=keep-seq; then
  fail "fio verify_only did not notice a changed byte in keep-seq.0.0"
fi
grep -q "verify: bad\|crc32c: verify failed\|bad magic\|verify failed" "$work/damage.out" ||
  echo "note: fio failed on the damaged file without its usual message: $(tail -n 3 "$work/damage.out")"
jobs=${saved[0]} verified=${saved[1]} errors=${saved[2]}
echo "fio damage: a changed byte fails verify_only, as it must"

umount_densefs "$mnt"
"$densefs" fsck "$store" >"$work/fsck.log" 2>&1 ||
  fail "densefs fsck $store after fio is not clean: $(cat "$work/fsck.log")"
report
((errors == 0)) || fail "fio reported $errors job errors"
echo "PASS"
