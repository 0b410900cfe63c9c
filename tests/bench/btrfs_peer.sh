#!/usr/bin/env bash
# Sourced by targets.sh and compare.sh: the btrfs compress-force=zstd:3 peer.
# btrfs_peer MOUNT_DIR IMAGE mounts a fresh btrfs on a sparse 16 GiB loop file
# IMAGE (big enough for every write row; btrfs only takes what it stores) and
# sets peers=(--target btrfs-zstd=MOUNT_DIR); where mkfs.btrfs is missing or
# the kernel cannot mount it, it prints a note and leaves peers empty.
# shellcheck disable=SC2034  # peers is the caller's
btrfs_peer() {
  local dir=$1 image=$2
  peers=()
  if ! command -v mkfs.btrfs >/dev/null; then
    echo "note: no btrfs peer: mkfs.btrfs not installed (apt-get install btrfs-progs)"
  elif ! { truncate -s 16G "$image" && mkfs.btrfs -q "$image" &&
    mount -o loop,compress-force=zstd:3 "$image" "$dir"; } 2>"$image.err"; then
    echo "note: no btrfs peer: $(tail -n 1 "$image.err")"
  else
    peers=(--target "btrfs-zstd=$dir")
  fi
}
