#!/usr/bin/env bash
# The performance targets, side by side with ext4, with btrfs
# compress-force=zstd:3 (the compressing peer users compare with) and with
# libfuse's passthrough_hp over ext4 (the cost of FUSE itself,
# passthrough_hp_peer.sh) in one run (not a test: about 30 minutes; compare
# ratios, with nothing else running on the machine).
# Prepares the inputs once (a copy of all of /usr/share, a 1 GiB big.bin
# from /usr/lib and /usr/share, the JPEG corpus), makes a fresh store, an
# ext4 directory and a btrfs file system on a loop file, all on the same
# disk, runs `densefs bench` on the three, prints the table and checks it
# with targets.py. btrfs is left out, with a note, where mkfs.btrfs
# (btrfs-progs) is missing or the kernel cannot mount it. Needs root (cold
# rows drop caches, the loop device).
# Usage: tests/bench/targets.sh [path/to/densefs] [WORK_DIR] [-- MOUNT_OPTIONS [MKFS_OPTIONS]]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
densefs=$(realpath "${1:-$repo/build/tools/densefs}")
work=${2:-/var/tmp/densefs-targets}
shift $(($# > 2 ? 2 : $#))
[[ ${1:-} == -- ]] && shift
mount_options=${1:-}
mkfs_options=${2:-}

input=$work/input
if [[ ! -f $input/big.bin ]]; then
  rm -rf "$input"
  "$densefs" bench --prepare "$input" --size 1G --big-size 1G \
    --jpeg "$repo/../shared/corpus/jpeg"
fi
run=$work/run
if mountpoint -q "$run/mnt" 2>/dev/null; then "$densefs" umount "$run/mnt"; fi
if mountpoint -q "$run/btrfs" 2>/dev/null; then umount "$run/btrfs"; fi
# shellcheck source=tests/bench/passthrough_hp_peer.sh
source "$repo/tests/bench/passthrough_hp_peer.sh"
passthrough_hp_unmount "$run/passthrough_hp"
rm -rf "$run" && mkdir -p "$run/ext4" "$run/mnt" "$run/btrfs"
cleanup() {
  "$densefs" umount "$run/mnt" 2>/dev/null || true
  if mountpoint -q "$run/btrfs"; then umount "$run/btrfs" || true; fi
  passthrough_hp_unmount "$run/passthrough_hp" || true
  rm -f "$run/btrfs.img"
}
trap cleanup EXIT

# shellcheck source=tests/bench/btrfs_peer.sh
source "$repo/tests/bench/btrfs_peer.sh"
btrfs_peer "$run/btrfs" "$run/btrfs.img"
# -H: the input may be a symbolic link to inputs prepared elsewhere.
passthrough_hp_peer "$run/passthrough_hp" "$run/passthrough_hp.ext4" "$(find -H "$input" | wc -l)"

# shellcheck disable=SC2086  # MKFS_OPTIONS are words
"$densefs" mkfs $mkfs_options "$run/store" >/dev/null
"$densefs" mount "$run/store" "$run/mnt" ${mount_options:+-o "$mount_options"}
"$densefs" bench --input "$input" --procs 1,2,4 --target "ext4=$run/ext4" "${peers[@]}" \
  --target "densefs=$run/mnt" --save-json "$work/run.json" --svg "$work/run.svg" |
  tee "$work/run.txt"

# The floor where passthrough_hp cannot serve the whole input: the metadata
# rows again on a smaller copy of /usr/share that it can, with ext4 and a
# second fresh store (a fresh one: the first holds these files' chunks).
floor_args=()
if [[ " ${peers[*]} " != *" passthrough_hp="* ]]; then
  "$densefs" umount "$run/mnt"
  small=$work/input-small
  if [[ ! -f $small/big.bin ]]; then
    rm -rf "$small"
    "$densefs" bench --prepare "$small" --size 60M --big-size 16M
  fi
  entries=$(find -H "$small" | wc -l)
  peers=()
  passthrough_hp_peer "$run/passthrough_hp" "$run/passthrough_hp.ext4" "$entries"
  if [[ ${#peers[@]} -gt 0 ]]; then
    # shellcheck disable=SC2086  # MKFS_OPTIONS are words
    "$densefs" mkfs $mkfs_options "$run/store-floor" >/dev/null
    "$densefs" mount "$run/store-floor" "$run/mnt" ${mount_options:+-o "$mount_options"}
    echo
    echo "the floor, on $small ($entries entries):"
    "$densefs" bench --input "$small" --workloads write,walk --procs 1,2,4 \
      --target "ext4=$run/ext4" "${peers[@]}" --target "densefs=$run/mnt" \
      --save-json "$work/floor.json" | tee "$work/floor.txt"
    floor_args=(--floor-run "$work/floor.json")
  fi
fi
echo
python3 "$repo/tests/bench/targets.py" "$work/run.json" "${floor_args[@]}" | tee "$work/targets.txt"
