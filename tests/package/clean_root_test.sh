#!/usr/bin/env bash
# The Debian package from end to end, as a user gets it: made by CPack from
# a built tree, checked by lintian, installed with `apt-get install ./deb`
# in a fresh Debian 12 root (debootstrap), where a store is made and
# mounted, files are written and read back through the mount, and read
# again after a second mount; the man pages and the bash completion are
# checked there too.
#
# Needs root, /dev/fuse and the Debian mirror. Exits 77 (ctest: skipped)
# only when the mirror cannot be reached at all, and fails then under
# DENSEFS_REQUIRE_TOOLS=1 (CI).
#
# usage: clean_root_test.sh BUILD_DIR SOURCE_DIR
# Environment:
#   DENSEFS_CACHE_DIR      the pristine root is kept in its clean-root/ as
#                          bookworm-minbase-YEAR-wWEEK.tar.gz (made again each
#                          week, so the root does not age far behind the
#                          mirror; older ones are removed); default
#                          /var/cache/densefs
#   DENSEFS_DEBIAN_MIRROR  default http://deb.debian.org/debian
#   DENSEFS_DEBIAN_SECURITY_MIRROR  default http://deb.debian.org/debian-security
#   DENSEFS_PACKAGE_DEB    test this .deb instead of making one with cpack
set -euo pipefail

step() { printf 'clean_root: %s\n' "$*"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# --- Inside the root's private mount namespace --------------------------------
# Runs as `unshare --mount --propagation private -- bash THIS --in-root ROOT
# DEB`: /proc and /dev/fuse are mounted into ROOT only here, and every mount
# made here (the FUSE mounts included) goes away with the namespace.

# Runs a command in the root with a clean environment (the host's proxy
# settings kept, for apt).
in_root() {
  local env=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8
    DEBIAN_FRONTEND=noninteractive)
  local name
  for name in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n ${!name:-} ]] && env+=("$name=${!name}")
  done
  chroot "$root" /usr/bin/env -i "${env[@]}" "$@"
}

is_mounted() { grep -q " $root$1 " /proc/self/mountinfo; }

# On any exit: unmount the store if it is mounted, then stop whatever still
# runs in the root (a daemon that would not unmount), so the namespace and
# its mounts go away.
leave_root() {
  if is_mounted /mnt/d; then
    in_root densefs umount /mnt/d >/dev/null 2>&1 || umount -l "$root/mnt/d" || true
  fi
  local proc
  for proc in /proc/[0-9]*; do
    if [[ $(readlink "$proc/root" 2>/dev/null) == "$root" ]]; then
      kill -KILL "${proc#/proc/}" 2>/dev/null || true
    fi
  done
}

# Writes the files to compare into /var/tmp/ref in the root: a small text, an
# empty file, a file of more than 5 MiB of real bytes (the root's programs
# end to end) and a tree with links.
make_reference_files() {
  # shellcheck disable=SC2016 # run by the root's bash
  in_root bash -euo pipefail -c '
    mkdir -p /var/tmp/ref
    echo "densefs in a clean Debian root" >/var/tmp/ref/hello.txt
    : >/var/tmp/ref/empty
    find /usr/bin -maxdepth 1 -type f -exec cat {} + >/var/tmp/ref/big.bin
    cp -a /usr/share/doc /var/tmp/ref/tree
    ln -s hello.txt /var/tmp/ref/link'
  local big
  big=$(in_root stat -c %s /var/tmp/ref/big.bin)
  [[ $big -gt $((5 << 20)) ]] || fail "the big file has only $big bytes"
  echo "$big"
}

# Compares the mount's copy with the reference files.
compare_with_reference() {
  # shellcheck disable=SC2016 # run by the root's bash
  in_root bash -euo pipefail -c '
    for f in hello.txt empty big.bin; do cmp /var/tmp/ref/$f /mnt/d/$f; done
    [[ $(readlink /mnt/d/link) == hello.txt ]]
    diff -r --no-dereference /var/tmp/ref/tree /mnt/d/tree' ||
    fail "$1: the files read through the mount differ from the ones written (above)"
}

in_root_main() {
  root=$1
  local deb=$2
  trap leave_root EXIT
  mount -t proc proc "$root/proc"
  # /dev/fuse bound onto a file of that name (debootstrap makes no node).
  [[ -e $root/dev/fuse ]] || touch "$root/dev/fuse"
  mount --bind /dev/fuse "$root/dev/fuse"

  step "apt-get update"
  in_root apt-get update -q >/dev/null || fail "apt-get update in the root failed"
  step "apt-get install ./$deb"
  # shellcheck disable=SC2016 # run by the root's bash
  in_root bash -c 'cd /tmp && apt-get install -y -q --no-install-recommends "./$1"' install "$deb" \
    >"$root/tmp/apt-install.log" 2>&1 || {
    tail -n 30 "$root/tmp/apt-install.log" >&2
    fail "apt-get install ./$deb failed (above)"
  }

  local version
  version=$(in_root densefs --version) || fail "densefs --version failed"
  step "densefs --version: $version"
  [[ $version == "densefs "[0-9]* ]] || fail "densefs --version printed '$version'"

  step "densefs mkfs /var/tmp/store"
  in_root densefs mkfs /var/tmp/store >/dev/null || fail "densefs mkfs failed"
  step "densefs mount /var/tmp/store /mnt/d"
  in_root mkdir -p /mnt/d
  in_root densefs mount /var/tmp/store /mnt/d || fail "densefs mount failed"
  is_mounted /mnt/d || fail "densefs mount returned but /mnt/d is not mounted"

  local big
  big=$(make_reference_files)
  step "write: hello.txt, an empty file, big.bin ($big bytes), a tree of $(in_root find /var/tmp/ref/tree | wc -l) entries, a symlink"
  in_root cp -a /var/tmp/ref/. /mnt/d/ || fail "copying into the mount failed"
  step "read back and compare"
  compare_with_reference "after writing"

  step "densefs umount /mnt/d"
  in_root densefs umount /mnt/d || fail "densefs umount failed"
  ! is_mounted /mnt/d || fail "/mnt/d is still mounted after densefs umount"
  step "mount again, read back and compare"
  in_root densefs mount /var/tmp/store /mnt/d || fail "the second densefs mount failed"
  compare_with_reference "after mounting again"
  in_root densefs umount /mnt/d || fail "the second densefs umount failed"

  step "man pages"
  local page
  for page in densefs densefs-mount; do
    in_root test -s "/usr/share/man/man1/$page.1.gz" || fail "no /usr/share/man/man1/$page.1.gz"
  done
  [[ $(in_root zcat /usr/share/man/man1/densefs-mount.1.gz | grep -c 'MOUNT OPTIONS') -gt 0 ]] ||
    fail "densefs-mount.1.gz has no MOUNT OPTIONS section"
  # A page for every command `densefs help` lists.
  local command
  while IFS= read -r command; do
    in_root test -s "/usr/share/man/man1/densefs-$command.1.gz" ||
      fail "no man page for 'densefs $command' (/usr/share/man/man1/densefs-$command.1.gz)"
  done < <(in_root densefs help | awk '/^commands:$/ { on = 1; next }
    on && /^  [a-z]/ { if ($1 != "help") print $1; next } on && !/^ / { on = 0 }')

  step "bash completion"
  local completion=/usr/share/bash-completion/completions/densefs
  # What the completion offers for WORD... (the last word is the one being
  # completed), one per line.
  complete_words() {
    # shellcheck disable=SC2016 # expanded by the root's bash
    in_root bash -c 'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
      _densefs densefs "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
      printf "%s\n" "${COMPREPLY[@]}"' "$completion" "$@"
  }
  grep -qx mount <<<"$(complete_words densefs mo)" ||
    fail "completing 'densefs mo' does not offer mount"
  # mount's own help (-f, --foreground, ..., -o) and a CLI11 command's.
  grep -qx -- -o <<<"$(complete_words densefs mount -)" ||
    fail "completing 'densefs mount -' does not offer -o"
  grep -qx -- --foreground <<<"$(complete_words densefs mount --)" ||
    fail "completing 'densefs mount --' does not offer --foreground"
  grep -qx -- --codec <<<"$(complete_words densefs mkfs --)" ||
    fail "completing 'densefs mkfs --' does not offer --codec"
  step "OK"
}

if [[ ${1:-} == --in-root ]]; then
  in_root_main "$2" "$3"
  exit 0
fi

# --- On the host ----------------------------------------------------------------
build=${1:?usage: clean_root_test.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: clean_root_test.sh BUILD_DIR SOURCE_DIR}
mirror=${DENSEFS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${DENSEFS_CACHE_DIR:-/var/cache/densefs}/clean-root

[[ $(id -u) -eq 0 ]] || fail "run as root: debootstrap, chroot and mounts need it"
missing=()
for tool in cpack lintian debootstrap dpkg-shlibdeps dpkg-parsechangelog file unshare chroot wget; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  fail "missing ${missing[*]}: apt-get install cmake lintian debootstrap dpkg-dev file util-linux wget"
fi
[[ -c /dev/fuse ]] || fail "/dev/fuse is missing (modprobe fuse)"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/densefs-clean-root.XXXXXX")
trap 'rm -rf "$work"' EXIT

# (a) The package.
if [[ -n ${DENSEFS_PACKAGE_DEB:-} ]]; then
  deb=$DENSEFS_PACKAGE_DEB
  [[ -f $deb ]] || fail "DENSEFS_PACKAGE_DEB names no file: $deb"
  step "package: $deb (DENSEFS_PACKAGE_DEB)"
else
  [[ -f $build/CPackConfig.cmake ]] ||
    fail "no $build/CPackConfig.cmake: configure the tree with packaging/ (add_subdirectory(packaging))"
  # The cpack of the CMake that configured the tree.
  cmake=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$build/CMakeCache.txt")
  cpack=$(dirname "$cmake")/cpack
  [[ -x $cpack ]] || cpack=cpack
  step "cpack -G DEB --config $build/CPackConfig.cmake"
  "$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$work/cpack" >"$work/cpack.log" 2>&1 || {
    tail -n 30 "$work/cpack.log" >&2
    fail "cpack failed (above)"
  }
  debs=("$work"/cpack/densefs_*.deb)
  [[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || fail "cpack made no densefs_*.deb in $work/cpack"
  deb=${debs[0]}
fi
version=$(dpkg-deb -f "$deb" Version)
step "$(basename "$deb"): $version, Depends: $(dpkg-deb -f "$deb" Depends)"
changelog_version=$(dpkg-parsechangelog -l "$src/packaging/changelog" -S Version)
[[ $version == "$changelog_version" ]] ||
  fail "the package is version $version, packaging/changelog's newest entry $changelog_version"
# Only what the package is for: the binary and files under /usr/share.
allowed='^\./(usr/(bin/(densefs)?|share/((man|doc|bash-completion|zsh|lintian)/)?|share/(man/man1|doc/densefs|bash-completion/completions|zsh/vendor-completions|lintian/overrides)(/.*)?)?)?$'
stray=$(dpkg-deb -c "$deb" | awk '{ print $6 }' | grep -vE "$allowed" || true)
[[ -z $stray ]] || fail "the package holds files it should not:"$'\n'"$stray"
# The man pages are made from `--help`: none may name the machine the
# package was built on (its source or build tree).
dpkg-deb -x "$deb" "$work/unpacked"
# help2man writes '-' as '\-': the pages are read with that undone.
for page in "$work"/unpacked/usr/share/man/man1/*.gz; do
  for tree in "$src" "$(realpath "$src")" "$build" "$(realpath "$build")"; do
    if zcat "$page" | sed 's/\\-/-/g' | grep -qF -- "$tree"; then
      fail "$(basename "$page") names the build machine's $tree"
    fi
  done
done

# (b) lintian: errors and warnings fail unless packaging/lintian-overrides
# overrides them, with its reason.
step "lintian"
if ! lintian --tag-display-limit 0 --fail-on error,warning "$deb" >"$work/lintian.txt" 2>&1; then
  tags=$(grep -E '^[EW]: ' "$work/lintian.txt" || true)
  printf '%s\n' "${tags:-$(cat "$work/lintian.txt")}" >&2
  fail "lintian: errors or warnings (above); fix them, or override them in packaging/lintian-overrides saying why"
fi

# (c) A fresh Debian 12 root.
step "Debian mirror $mirror"
if ! wget -q -T 20 -t 2 -O /dev/null "$mirror/dists/bookworm/Release"; then
  # tools/setup.sh test (CI) sets DENSEFS_REQUIRE_TOOLS: a skip there would hide it.
  [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]] &&
    fail "cannot reach the Debian mirror $mirror, which debootstrap and apt-get need"
  echo "SKIP: cannot reach the Debian mirror $mirror, which debootstrap and apt-get need" >&2
  exit 77
fi
mkdir -p "$cache"
tarball=$cache/bookworm-minbase-$(date -u +%G-w%V).tar.gz
# One debootstrap at a time (another build tree's run may be making it).
exec 9>"$cache/.lock"
flock 9
if [[ ! -f $tarball ]]; then
  step "debootstrap --variant=minbase bookworm (kept as $tarball)"
  fresh=$(mktemp -d "$cache/debootstrap.XXXXXX")
  if ! debootstrap --variant=minbase bookworm "$fresh/root" "$mirror" >"$fresh/log" 2>&1; then
    tail -n 30 "$fresh/log" >&2
    rm -rf "$fresh"
    fail "debootstrap failed (above)"
  fi
  # The packages debootstrap downloaded are installed; keeping them would
  # double the tarball.
  rm -f "$fresh"/root/var/cache/apt/archives/*.deb
  tar -C "$fresh/root" --numeric-owner -czf "$fresh/root.tar.gz" .
  mv "$fresh/root.tar.gz" "$tarball"
  rm -rf "$fresh"
  find "$cache" -maxdepth 1 -name 'bookworm-minbase-*.tar.gz' ! -name "$(basename "$tarball")" -delete
fi
root=$work/root
mkdir "$root"
tar -C "$root" --numeric-owner -xzf "$tarball"
exec 9>&-
step "fresh root from $(basename "$tarball")"
# The root's network settings are the host's of today, not of the day the
# tarball was made.
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp -L /etc/hosts "$root/etc/hosts" 2>/dev/null || true
# The security suite too: the package's Depends come from the host's
# libraries, which may be a security update newer than bookworm's own.
security_mirror=${DENSEFS_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
  "$mirror" "$mirror" "$security_mirror" >"$root/etc/apt/sources.list"
cp "$deb" "$root/tmp/"

unshare --mount --propagation private -- bash "${BASH_SOURCE[0]}" --in-root "$root" "$(basename "$deb")"
