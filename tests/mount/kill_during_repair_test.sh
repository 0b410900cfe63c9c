#!/usr/bin/env bash
# kill -9 at random moments during `densefs scrub` (of a live mount: the
# daemon, and of an unmounted store: the command) and during `densefs fsck
# --repair-from` (issue 38's target): afterwards the store mounts, fsck
# finds only the damage made on purpose, and once healed, every file reads
# exact and fsck is clean. DENSEFS_KILL_TRIALS kills of each kind (default 4).
# usage: kill_during_repair_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

trials=${DENSEFS_KILL_TRIALS:-4}
store=$work/store
mnt=$work/mnt
tree=$work/tree
mkdir -p "$mnt" "$tree/sub"
# Many files before the damaged ones, so that a kill can land mid-walk.
for i in $(seq 1 40); do
  head -c $((20000 + i * 3000)) /dev/urandom >"$tree/sub/r$i"
  seq 1 $((i * 3000)) >"$tree/t$i"
done
"$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs failed"
mount_densefs "$store" "$mnt"
cp -a "$tree/." "$mnt/"
umount_densefs "$mnt"

# Damage three random payloads: a byte in the middle of r5, r17 and r33 as
# stored raw in the pack (random data is stored as it is).
python3 - "$store" "$tree/sub" <<'PY'
import os, sys
store, src = sys.argv[1], sys.argv[2]
packs = [os.path.join(d, n) for d, _, ns in os.walk(os.path.join(store, "packs")) for n in ns]
for name in ("r5", "r17", "r33"):
    data = open(os.path.join(src, name), "rb").read()
    probe = data[len(data) // 2:len(data) // 2 + 64]
    for p in packs:
        blob = open(p, "rb").read()
        at = blob.find(probe)
        if at >= 0:
            with open(p, "r+b") as f:
                f.seek(at)
                f.write(bytes([blob[at] ^ 0x01]))
            break
    else:
        sys.exit(f"{name}: its payload is not in any pack")
PY

# damage_left: the number of bad payloads fsck reports (it fails on
# anything else).
damage_left() {
  local out
  out=$("$densefs" fsck "$store" --json 2>/dev/null) || true
  jq -e '.problems | keys - ["bad_payload", "stored_bytes_mismatch"] | length == 0' <<<"$out" >/dev/null ||
    fail "fsck finds more than the damage made: $out"
  jq -r '.problems.bad_payload.found // 0' <<<"$out"
}
[[ $(damage_left) == 3 ]] || fail "fsck does not find the 3 damaged payloads"

# The source fsck --repair-from reads: the tree and 96 MiB of other files,
# so that a kill can land while it walks.
source_dir=$work/source
mkdir -p "$source_dir"
cp -a "$tree" "$source_dir/tree"
for i in 1 2 3; do head -c 32M /dev/urandom >"$source_dir/filler$i"; done

random_delay() { awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.02 + (r % 600) / 1000 }'; }

damaged=3
for i in $(seq 1 "$trials"); do
  # The live scrub: kill -9 of the daemon while it scrubs.
  mount_densefs "$store" "$mnt"
  "$densefs" scrub "$store" >/dev/null 2>&1 &
  scrub_pid=$!
  sleep "$(random_delay)"
  pid=$(sed -n 's/^pid //p' "$store/LOCK.densefs")
  kill -9 "$pid"
  wait "$scrub_pid" || true
  umount -l "$mnt" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  [[ $(damage_left) == "$damaged" ]] || fail "kill -9 during a live scrub (trial $i) changed the damage"
  # The offline scrub, killed.
  "$densefs" scrub "$store" >/dev/null 2>&1 &
  scrub_pid=$!
  sleep "$(random_delay)"
  kill -9 "$scrub_pid" 2>/dev/null || true
  wait "$scrub_pid" || true
  [[ $(damage_left) == "$damaged" ]] || fail "kill -9 during an offline scrub (trial $i) changed the damage"
  # fsck --repair-from, killed: it heals some or none, never breaks more.
  "$densefs" fsck "$store" --repair-from "$source_dir" >/dev/null 2>&1 &
  repair_pid=$!
  sleep "$(random_delay)"
  kill -9 "$repair_pid" 2>/dev/null || true
  wait "$repair_pid" || true
  left=$(damage_left)
  ((left <= damaged)) || fail "kill -9 during fsck --repair-from (trial $i): $left damaged, $damaged before"
  damaged=$left
  echo "trial $i: $left damaged payload(s) left after a killed repair"
done

"$densefs" fsck "$store" --repair-from "$source_dir" >/dev/null 2>&1 || fail "fsck --repair-from does not heal the rest"
[[ $(damage_left) == 0 ]] || fail "damage left after fsck --repair-from"
mount_densefs "$store" "$mnt"
diff -r "$tree" "$mnt" || fail "files differ from their source after the repair"
[[ $("$densefs" scrub "$store" --json | jq -r .damaged) == 0 ]] || fail "a scrub after the repair finds damage"
umount_densefs "$mnt"
echo "PASS"
