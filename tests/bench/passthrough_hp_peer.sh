#!/usr/bin/env bash
# Sourced by targets.sh: the floor, libfuse's own passthrough_hp
# (third_party/passthrough_hp, the example of libfuse 3.18) over an ext4
# directory, with its fastest settings (the kernel's caches for 24 hours,
# splice, FUSE passthrough of reads and writes to the backing files, one
# worker thread per request in flight, and FUSE over io_uring where densefs
# uses it). It is the cost of FUSE itself on this machine: densefs answers
# metadata requests from its own records instead of a syscall into a
# second file system, so on every metadata row it should be faster.
#
# passthrough_hp_peer MOUNT_DIR BACKING_DIR ENTRIES builds the binary once
# (against the libfuse tools/setup.sh built, into its cache), mounts it and
# appends --target passthrough_hp=MOUNT_DIR to peers; where it cannot, it
# prints a note and adds nothing. It keeps a descriptor open for every inode
# the kernel knows, and `densefs bench` holds two copies of its input tree
# at once (cp's copy stays for the reads while tar -x unpacks another), so
# an input of ENTRIES entries needs twice that many: where the
# hard limit on open files is lower (20,000 on the CI VM, which root there
# cannot raise), it is left out with a note too. passthrough_hp_unmount
# MOUNT_DIR undoes the mount.
# shellcheck disable=SC2034  # peers is the caller's

passthrough_hp_binary() {
  local repo source cache_dir prefix key out
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  source=$repo/third_party/passthrough_hp
  cache_dir=${DENSEFS_CACHE_DIR:-/var/cache/densefs}
  prefix=$(find "$cache_dir" -maxdepth 1 -name 'libfuse-3.18*' -type d 2>/dev/null | sort | tail -n 1)
  if [[ -z $prefix || ! -f $prefix/lib/pkgconfig/fuse3.pc ]]; then
    echo "no libfuse 3.18 in $cache_dir (run tools/setup.sh first)" >&2
    return 1
  fi
  key=$(cat "${BASH_SOURCE[0]}" "$source"/* "$prefix/lib/pkgconfig/fuse3.pc" | sha256sum | cut -c1-12)
  out=$cache_dir/passthrough_hp-$key
  if [[ ! -x $out ]]; then
    # What libfuse's meson finds on Linux with glibc (its private config.h,
    # which the installed headers do not carry); without HAVE_UTIMENSAT
    # every utimes of a path fails with EOPNOTSUPP.
    local have=(-DHAVE_UTIMENSAT -DHAVE_FALLOCATE -DHAVE_POSIX_FALLOCATE -DHAVE_SETXATTR
      -DHAVE_SYS_XATTR_H)
    # shellcheck disable=SC2046  # pkg-config prints words
    g++ -O2 -std=c++17 -w "${have[@]}" -o "$out.tmp" "$source/passthrough_hp.cc" \
      $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs --static fuse3) >&2 &&
      mv "$out.tmp" "$out" || return 1
  fi
  echo "$out"
}

passthrough_hp_peer() {
  local dir=$1 backing=$2 entries=$3 binary options="" limit
  limit=$(ulimit -Hn)
  if [[ $limit != unlimited ]] && ((limit < 2 * entries + 1000)); then
    echo "note: no passthrough_hp peer for $entries entries: it holds a descriptor per inode, for two" \
      "copies of them at once, and the hard limit on open files is $limit"
    return 0
  fi
  if ! binary=$(passthrough_hp_binary); then
    echo "note: no passthrough_hp peer: it did not build (above)"
    return 0
  fi
  [[ $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null) == Y ]] && options=io_uring
  mkdir -p "$dir" "$backing"
  if ! "$binary" ${options:+-o "$options"} "$backing" "$dir" 2>"$backing.err" ||
    ! mountpoint -q "$dir"; then
    echo "note: no passthrough_hp peer: $(tail -n 1 "$backing.err")"
    return 0
  fi
  peers+=(--target "passthrough_hp=$dir")
}

passthrough_hp_unmount() {
  if mountpoint -q "$1" 2>/dev/null; then umount "$1" || umount -l "$1"; fi
}
