#!/usr/bin/env bash
# The S3 server the S3 tests run against (s3_lib.sh: Ceph's radosgw on a
# private one-node cluster, on loopback) does what densefs's payload store
# needs, spoken to with curl's own SigV4 signing, so no densefs code is
# involved: a bucket, a 9 MiB object PUT with its payload hash signed, ranged
# GETs (one byte, across radosgw's 4 MiB stripe boundary, open-ended,
# suffix, past the end, and an unsatisfiable one), HEAD, a prefix LIST,
# DELETE; requests with a wrong secret, an unknown key, no signature or a
# body that does not match its signed hash refused; and the object still
# exact after radosgw is stopped (TERM and KILL) and started again, and
# after the whole cluster is.
# usage: s3_server_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# A server of its own: this test stops and restarts it.
# shellcheck disable=SC2034 # read by s3_lib.sh
s3_private=1
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

bucket="densefs-smoke"
key=packs/00000001.pack
url=$S3_ENDPOINT/$bucket/$key
size=$((9 << 20))
obj=$work/obj
body=$work/body
headers=$work/headers

# req [curl args...] URL: the HTTP status; the body in $body, the response
# headers in $headers.
req() { s3_curl -o "$body" -D "$headers" -w '%{http_code}' "$@"; }
header() { tr -d '\r' <"$headers" | awk -v h="${1,,}:" 'tolower($1) == h { $1 = ""; sub(/^ /, ""); print }'; }
error_code() { sed -nE 's|.*<Code>([^<]*)</Code>.*|\1|p' "$body"; }
expect() {
  local want=$1 got=$2 what=$3
  [[ $got == "$want" ]] || fail "$what: HTTP $got, expected $want ($(error_code))"
}
# the object's bytes [OFFSET, OFFSET+LENGTH)
slice() { dd if="$obj" iflag=skip_bytes,count_bytes skip="$1" count="$2" bs=1M status=none; }
check_whole_object() {
  expect 200 "$(req "$url")" "GET $key ($1)"
  cmp -s "$body" "$obj" || fail "GET $key ($1): the bytes differ from what was PUT"
}

# --- bucket and object.
expect 200 "$(req -X PUT "$S3_ENDPOINT/$bucket")" "PUT bucket"
head -c "$size" /dev/urandom >"$obj"
sha=$(sha256sum "$obj" | cut -d' ' -f1)
md5=$(md5sum "$obj" | cut -d' ' -f1)
start=$(now)
expect 200 "$(req -T "$obj" -H "x-amz-content-sha256: $sha" "$url")" "PUT 9 MiB"
echo "PUT of 9 MiB (payload hash signed): $(elapsed "$start" "$(now)") s"
[[ $(header etag) == "\"$md5\"" ]] || fail "PUT: ETag $(header etag), expected \"$md5\""

# A body that does not match the hash it was signed with is refused, and
# nothing is stored under its key.
head -c 1000 /dev/zero >"$work/zeros"
expect 400 "$(req -T "$work/zeros" -H "x-amz-content-sha256: $sha" "$S3_ENDPOINT/$bucket/damaged")" \
  "PUT with a body that does not match its signed hash"
[[ $(error_code) == XAmzContentSHA256Mismatch ]] || fail "damaged PUT: error $(error_code)"
expect 404 "$(req -I "$S3_ENDPOINT/$bucket/damaged")" "HEAD of the refused object"

# --- HEAD and the whole object.
expect 200 "$(req -I "$url")" "HEAD"
[[ $(header content-length) == "$size" ]] || fail "HEAD: Content-Length $(header content-length), expected $size"
[[ $(header etag) == "\"$md5\"" ]] || fail "HEAD: ETag $(header etag), expected \"$md5\""
check_whole_object "after PUT"

# --- ranged GETs: RANGE FIRST LAST (the bytes the answer must hold).
ranges=(
  "0-0 0 0"
  "4194303-4194304 4194303 4194304"   # across radosgw's 4 MiB stripes
  "1000000-5999999 1000000 5999999"   # 5 MB over two stripe boundaries
  "$((size - 101))- $((size - 101)) $((size - 1))"
  "-4096 $((size - 4096)) $((size - 1))"
  "$((size - 1))-$((size + 1000)) $((size - 1)) $((size - 1))" # clipped
)
for r in "${ranges[@]}"; do
  read -r range first last <<<"$r"
  expect 206 "$(req -H "Range: bytes=$range" "$url")" "GET Range: bytes=$range"
  [[ $(header content-range) == "bytes $first-$last/$size" ]] ||
    fail "Range: bytes=$range: Content-Range '$(header content-range)', expected 'bytes $first-$last/$size'"
  cmp -s "$body" <(slice "$first" $((last - first + 1))) ||
    fail "Range: bytes=$range: the bytes are not the object's $first-$last"
done
expect 416 "$(req -H "Range: bytes=$size-" "$url")" "GET a range past the end"
echo "ranged GETs: ${#ranges[@]} exact, one past the end refused (416)"

# --- LIST: a prefix selects; sizes and ETags as stored. (The query is
# written encoded: curl 7.88 signs it as written, SigV4 wants '/' as %2F.)
printf 'small\n' >"$work/small"
expect 200 "$(req -T "$work/small" "$S3_ENDPOINT/$bucket/index/small")" "PUT a small object"
expect 200 "$(req "$S3_ENDPOINT/$bucket?list-type=2&prefix=packs%2F")" "LIST prefix=packs/"
list=$(cat "$body")
[[ $list == *"<KeyCount>1</KeyCount>"* && $list == *"<Key>$key</Key>"* &&
  $list == *"<Size>$size</Size>"* && $list == *"&quot;$md5&quot;"* ]] ||
  fail "LIST prefix=packs/ does not show exactly $key with its size and ETag: $list"
expect 200 "$(req "$S3_ENDPOINT/$bucket?list-type=2")" "LIST"
grep -q '<KeyCount>2</KeyCount>' "$body" || fail "LIST of the bucket: not 2 keys: $(cat "$body")"

# --- refusals.
code=$(curl -sS -o "$body" -w '%{http_code}' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:wrong$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$url")
expect 403 "$code" "GET with a wrong secret"
[[ $(error_code) == SignatureDoesNotMatch ]] || fail "wrong secret: error $(error_code)"
code=$(curl -sS -o "$body" -w '%{http_code}' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
  --user "AKIANOSUCHKEY0000000:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$url")
expect 403 "$code" "GET with an unknown access key"
[[ $(error_code) == InvalidAccessKeyId ]] || fail "unknown key: error $(error_code)"
expect 403 "$(curl -sS -o "$body" -w '%{http_code}' "$url")" "GET without a signature"
code=$(curl -sS -o "$body" -w '%{http_code}' -X DELETE --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:wrong$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$url")
expect 403 "$code" "DELETE with a wrong secret"
check_whole_object "after the refused requests"

# --- restarts: radosgw alone (TERM, then KILL), then the whole cluster.
s3_stop
if curl -s -o /dev/null --max-time 5 "$S3_ENDPOINT/"; then fail "radosgw still answers after s3_stop"; fi
s3_start
echo "radosgw restart after TERM: answering in $s3_rgw_start_seconds s"
check_whole_object "after radosgw was restarted"
s3_stop KILL
s3_start
echo "radosgw restart after KILL: answering in $s3_rgw_start_seconds s"
check_whole_object "after radosgw was killed and started"
start=$(now)
s3_cluster_stop
s3_cluster_start
echo "whole cluster stopped and started in $(elapsed "$start" "$(now)") s"
check_whole_object "after the cluster was restarted"

# --- what the server takes in memory, with the object stored and read.
rss() { awk '/^VmRSS:/ { printf "%d MiB", $2 / 1024 }' "/proc/$1/status"; }
echo "RSS: ceph-mon $(rss "$(s3_daemon_pid mon.a ceph-mon)")," \
  "ceph-osd $(rss "$(s3_daemon_pid osd.0 ceph-osd)"), radosgw $(rss "$(s3_pid)")"

# --- DELETE: gone from GET, HEAD and LIST; then the bucket.
expect 204 "$(req -X DELETE "$url")" "DELETE $key"
expect 404 "$(req "$url")" "GET after DELETE"
[[ $(error_code) == NoSuchKey ]] || fail "GET after DELETE: error $(error_code)"
expect 404 "$(req -I "$url")" "HEAD after DELETE"
expect 200 "$(req "$S3_ENDPOINT/$bucket?list-type=2&prefix=packs%2F")" "LIST after DELETE"
grep -q '<KeyCount>0</KeyCount>' "$body" || fail "LIST after DELETE still shows keys: $(cat "$body")"
expect 409 "$(req -X DELETE "$S3_ENDPOINT/$bucket")" "DELETE of a bucket that is not empty"
expect 204 "$(req -X DELETE "$S3_ENDPOINT/$bucket/index/small")" "DELETE index/small"
expect 204 "$(req -X DELETE "$S3_ENDPOINT/$bucket")" "DELETE bucket"
expect 404 "$(req -I "$S3_ENDPOINT/$bucket")" "HEAD of the deleted bucket"

echo "s3 server smoke test: passed"
