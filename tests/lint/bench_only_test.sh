#!/usr/bin/env bash
# The standalone benchmark harness (cmake -DDENSEFS_BENCH_ONLY=ON, for
# macOS/APFS, docs/bench.md) stays portable:
#   - its files include no Linux-only header and nothing from codec/, store/,
#     fs/ or the CLI plumbing (a file with such an include is rejected first);
#   - it configures and builds alone, without FUSE, RocksDB or Rust;
#   - densefs-bench prepares a tiny input and runs every workload on a temp dir.
# usage: bench_only_test.sh SOURCE_DIR
# shellcheck source=lint_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lint_lib.sh"
src=$(realpath "${1:?usage: bench_only_test.sh SOURCE_DIR}")

cmake=$(find_tool cmake) || missing_tool "cmake (Debian cmake)"
tmp=$(mktemp -d /var/tmp/densefs-bench-only.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# check_portable FILE...: no include a non-Linux system would lack, and no
# part of the file system.
check_portable() {
  if grep -nE '#include ["<](linux/|sys/(xattr|sysmacros|vfs|statfs|inotify|epoll)\.h|liburing|fuse|rocksdb|codec/|store/|fs/|tools/cli\.h)' "$@"; then
    return 1
  fi
}
printf '#include <sys/xattr.h>\n' >"$tmp/bad.cpp"
if check_portable "$tmp/bad.cpp" >/dev/null; then
  echo "FAIL: the portability check accepted a Linux-only include" >&2
  exit 1
fi
# The portable set as the top CMakeLists.txt lists it, plus the standalone's own files.
mapfile -t files < <(sed -n '/^set(densefs_bench_portable_sources/,/)/p' "$src/CMakeLists.txt" |
  grep -oE 'tools/[a-z_/]+\.cpp')
[[ ${#files[@]} -ge 7 ]] || { echo "FAIL: no portable file list in CMakeLists.txt" >&2; exit 1; }
files+=(tools/bench/bench.h tools/bench/portable_hooks.cpp tools/bench/standalone_main.cpp
  tools/format.h tools/tool_main.h)
(cd "$src" && check_portable "${files[@]}") || {
  echo "FAIL: a Linux-only or densefs-internal include in the standalone harness (above)" >&2
  exit 1
}

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
"$cmake" -S "$src" -B "$tmp/build" "${generator[@]}" "${launcher[@]}" -DDENSEFS_BENCH_ONLY=ON \
  >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log" >&2; echo "FAIL: configure" >&2; exit 1; }
nice "$cmake" --build "$tmp/build" -j2 >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; echo "FAIL: build" >&2; exit 1; }
bench=$tmp/build/tools/bench/densefs-bench
[[ -x $bench ]] || { echo "FAIL: no densefs-bench was built" >&2; exit 1; }

mkdir -p "$tmp/source/sub" "$tmp/target" "$tmp/no-jpegs"
for i in 1 2 3; do printf 'line %s\n' $(seq 1 300) >"$tmp/source/sub/f$i.txt"; done
"$bench" --prepare "$tmp/input" --size 1M --big-size 4K --source "$tmp/source" \
  --big-source "$tmp/source" --jpeg "$tmp/no-jpegs" 2>/dev/null || { echo "FAIL: --prepare" >&2; exit 1; }
# An explicit --jpeg that is not a directory is a one-line error, before anything is made.
if "$bench" --prepare "$tmp/input2" --size 1M --big-size 4K --source "$tmp/source" \
  --big-source "$tmp/source" --jpeg "$tmp/none" 2>"$tmp/jpeg.err"; then
  echo "FAIL: --jpeg of a missing directory was accepted" >&2
  exit 1
fi
grep -q "^densefs: bench: --jpeg $tmp/none: not a directory\$" "$tmp/jpeg.err" ||
  { cat "$tmp/jpeg.err" >&2; echo "FAIL: no one-line error for a missing --jpeg" >&2; exit 1; }
[[ ! -e $tmp/input2 ]] || { echo "FAIL: --prepare made its directory before failing" >&2; exit 1; }
"$bench" --input "$tmp/input" --target "t=$tmp/target" --warm-only --procs 1,2 >"$tmp/table" ||
  { echo "FAIL: densefs-bench run" >&2; exit 1; }
for row in walk read-small read-large write-big write-cp space; do
  grep -q "^$row " "$tmp/table" || { cat "$tmp/table"; echo "FAIL: no $row row" >&2; exit 1; }
done
"$bench" --bogus 2>/dev/null && { echo "FAIL: a bad option was accepted" >&2; exit 1; }
echo "standalone densefs-bench OK"
