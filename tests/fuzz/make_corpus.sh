#!/usr/bin/env bash
# Regenerates the checked-in seed corpora in tests/fuzz/corpus (review the
# diff, then commit). Needs a DENSEFS_FUZZ build (for fuzz_seed_gen).
#
#   tests/fuzz/make_corpus.sh BUILD_DIR
#
# Seeds: real records, encoded chunks and czip files from fuzz_seed_gen;
# small JPEGs from ../shared/corpus/jpeg (the Lepton projects' Apache-2.0
# test images, the small ones); control socket
# requests; and the Rust targets' seeds derived from the C++ ones.
# The checked-in corpora also hold inputs found by fuzzing, merged in with
#   build-fuzz/tests/fuzz/NAME_fuzz -merge=1 tests/fuzz/corpus/NAME FOUND_DIR
# (only inputs that add coverage); this script starts the seeds over.
set -euo pipefail
build=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
corpus=$here/corpus

jpegs=()
shared=$here/../../../shared/corpus/jpeg
for f in tiny.jpg colorswap.jpg half_scan.jpg nofsync.jpg truncbad.jpg mismatch_encode.jpg; do
  [[ -f $shared/$f ]] && jpegs+=("$shared/$f")
done

# Small gzip files for the deflate targets: two members, a name field, and
# a man page's worth of roff at three levels.
gz=$(mktemp -d)
trap 'rm -rf "$gz"' EXIT
printf '.TH DENSEFS 1\n.SH NAME\ndensefs \\- a file system\n%.0s' {1..40} >"$gz/page"
for level in 1 6 9; do gzip -"$level" -n -c "$gz/page" >"$gz/page$level.gz"; done
gzip -9 -c "$gz/page" >"$gz/named.gz"
cat "$gz/page1.gz" "$gz/page9.gz" >"$gz/members.gz"
# A small zip (a deflated and a stored entry) and a small PNG.
python3 -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("page", open(sys.argv[2]).read(), zipfile.ZIP_DEFLATED)
    z.writestr("stored", "x", zipfile.ZIP_STORED)' "$gz/entries.zip" "$gz/page"
python3 -c 'import struct, sys, zlib
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
rows = b"".join(b"\0" + bytes((x * 9 + y) % 256 for x in range(48)) for y in range(16))
sys.stdout.buffer.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
    + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))' >"$gz/tiny.png"

rm -rf "$corpus"
"$build/tests/fuzz/fuzz_seed_gen" "$corpus" "${jpegs[@]}" "$gz"/*.gz "$gz"/*.zip "$gz"/*.png

mkdir -p "$corpus/control_request"
n=0
for r in '{"op":"cat","ino":2}' '{"op":"cat","ino":2,"encoding":"br"}' \
  '{"op":"cat","ino":2,"encoding":"identity"}' '{"op":"chunks","ino":2,"reuse":"keep"}' \
  '{"op":"chunks","ino":2,"reuse":"zstd"}' '{"op":"cat","ino":1}' '{"op":"cat","ino":99}' \
  '{"op":"nope"}' '[1,2]' '{"op":"cat","ino":-1}'; do
  printf '%s\n' "$r" >"$corpus/control_request/req$n"
  n=$((n + 1))
done

# The Rust targets: decode seeds without the C++ plain-size field; round
# trips as they are; Lepton round trips take bare JPEGs, deflate round trips
# bare gzip files.
for c in lepton broccoli; do
  mkdir -p "$corpus/rust_${c}_decode" "$corpus/rust_${c}_roundtrip"
  for f in "$corpus/codec_decode_$c"/*; do
    tail -c +4 "$f" >"$corpus/rust_${c}_decode/$(basename "$f")"
  done
done
cp "$corpus/codec_roundtrip_broccoli"/* "$corpus/rust_broccoli_roundtrip/"
mkdir -p "$corpus/rust_deflate_roundtrip"  # rust_deflate_decode: fuzz_seed_gen
cp "$gz"/*.gz "$gz"/*.zip "$gz"/*.png "$corpus/rust_deflate_roundtrip/"
for f in "${jpegs[@]}"; do cp "$f" "$corpus/rust_lepton_roundtrip/"; done
# POSIX ACL xattrs as the kernel writes them (getfattr -e hex of setfacl's
# results): a mode-only ACL, one with named entries and a mask, and a
# default ACL; the fuzzer finds the malformed ones.
mkdir -p "$corpus/posix_acl"
n=0
for hex in \
  0200000001000600ffffffff04000400ffffffff20000400ffffffff \
  0200000001000600ffffffff02000400e803000004000400ffffffff08000700d007000010000400ffffffff20000000ffffffff \
  0200000001000700ffffffff02000700e903000004000700ffffffff10000700ffffffff20000500ffffffff; do
  xxd -r -p <<<"$hex" >"$corpus/posix_acl/acl$n"
  n=$((n + 1))
done
find "$corpus" -type f | wc -l
