#!/usr/bin/env bash
# The JPEG targets of the codecs issue, side by side in one run (ratios
# matter; the machines are shared and noisy). Not part of ctest.
#  1. Store size: the JPEG corpus through a mount (default policy, after the
#     background Lepton pass) against lepton_jpeg's own output for the files
#     it accepts plus the stored fallback size of the others (+0.5%).
#  2. Ingest speed: rsync of the corpus (copied N times so it takes long
#     enough to time) into a mount with the default lepton=background, with
#     the fast path alone (-o codec=zstd:level=1), and with lepton=sync.
# Usage: tests/bench/jpeg_ingest.sh [path/to/densefs] [workdir] [copies]
set -euo pipefail
densefs=${1:-build/tools/densefs}
work=${2:-/var/tmp/densefs-bench-jpeg}
copies=${3:-8}
corpus=$(cd "$(dirname "$0")/../../../shared/corpus/jpeg" && pwd)

cleanup() {
  for m in "$work"/*/mnt; do fusermount3 -u "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
rm -rf "$work" && mkdir -p "$work/input" "$work/tmp"

seconds() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); echo "$e - $s" | bc; }
fresh_mount() {  # NAME OPTIONS
  mkdir -p "$work/$1/mnt"
  "$densefs" mkfs "$work/$1/store" >/dev/null
  "$densefs" mount "$work/$1/store" "$work/$1/mnt" ${2:+-o "$2"}
}
wait_background() {  # MNT
  while [ "$("$densefs" stats "$1" --json | jq .pending_recompress)" != 0 ]; do sleep 1; done
}

# --- 1. store size against lepton_jpeg alone --------------------------------
fresh_mount size ""
cp -r "$corpus" "$work/size/mnt/jpeg"
wait_background "$work/size/mnt"
reference=0 accepted=0 corpus_bytes=0 stored_files=0
for f in "$corpus"/*.jpg; do
  name=$(basename "$f")
  size=$(stat -c %s "$f")
  corpus_bytes=$((corpus_bytes + size))
  stored=$("$densefs" info "$work/size/mnt/jpeg/$name" --json | jq .stored_bytes)
  stored_files=$((stored_files + stored))
  if "$densefs" codec compress --codec lepton "$f" "$work/tmp/$name.lep" 2>/dev/null; then
    accepted=$((accepted + 1))
    reference=$((reference + $(stat -c %s "$work/tmp/$name.lep")))
  else
    reference=$((reference + stored))  # its stored fallback size
  fi
done
diff -r "$corpus" "$work/size/mnt/jpeg" >/dev/null && exact=yes || exact=NO
stats=$("$densefs" stats "$work/size/mnt" --json)
"$densefs" umount "$work/size/mnt"
disk=$(du -sb "$work/size/store" | cut -f1)
limit=$((reference + corpus_bytes / 200))
echo "corpus: $(find "$corpus" -name "*.jpg" | wc -l) files, $corpus_bytes bytes; lepton_jpeg accepts $accepted"
echo "reference (lepton_jpeg output + fallback sizes): $reference bytes; limit +0.5%: $limit"
echo "densefs, sum of per-file stored bytes: $stored_files ($(echo "scale=4; $stored_files / $reference" | bc) x reference)"
echo "densefs, unique stored chunk bytes:   $(jq .stored_bytes <<<"$stats") (dedup included)"
echo "densefs, store directory on disk after unmount: $disk bytes"
echo "byte-exact: $exact; verdict: $([ "$stored_files" -le "$limit" ] && echo within || echo OVER) the limit"

# --- 2. ingest speed --------------------------------------------------------
for i in $(seq 1 "$copies"); do
  mkdir -p "$work/input/$i"
  # Distinct content per copy (dedup would otherwise hide the encode cost):
  # a comment segment after SOI makes each copy a different valid JPEG.
  for f in "$corpus"/*.jpg; do
    python3 - "$f" "$work/input/$i/$(basename "$f")" "$i" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
tag = b'densefs bench copy ' + sys.argv[3].encode()
com = b'\xff\xfe' + (len(tag) + 2).to_bytes(2, 'big') + tag
out = data[:2] + com + data[2:] if data[:2] == b'\xff\xd8' else data + tag
open(sys.argv[2], 'wb').write(out)
PY
  done
done
input_bytes=$(du -sb "$work/input" | cut -f1)
echo
echo "rsync -a of $copies distinct copies of the corpus ($input_bytes bytes):"
for mode in "background:" "fast_path:codec=zstd:level=1" "sync:lepton=sync"; do
  name=${mode%%:*}
  fresh_mount "$name" "${mode#*:}"
  t=$(seconds rsync -a "$work/input/" "$work/$name/mnt/in/")
  sync_t=$(seconds sync -f "$work/$name/mnt/in")
  after=$("$densefs" stats "$work/$name/mnt" --json | jq .stored_bytes)
  bg=""
  if [ "$name" = background ]; then
    bg_t=$(seconds wait_background "$work/$name/mnt")
    bg=", background Lepton pass $(printf %.1f "$bg_t") s more"
  fi
  final=$("$densefs" stats "$work/$name/mnt" --json | jq .stored_bytes)
  diff -r "$work/input" "$work/$name/mnt/in" >/dev/null && ok=exact || ok=MISMATCH
  printf '%-10s rsync %6.2f s (+sync %.2f s), stored %s right after, %s at the end%s; %s\n' \
    "$name" "$t" "$sync_t" "$after" "$final" "$bg" "$ok"
  "$densefs" umount "$work/$name/mnt"
done
