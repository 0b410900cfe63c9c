#!/usr/bin/env bash
# store/object/s3_object_store.cpp against a real S3 server: Ceph's radosgw on a
# private one-node cluster (s3_lib.sh). Runs the GoogleTest cases of
# tests/store/s3_object_store_test.cpp, which skip without a server, with
# the server's endpoint and a user's key pair in the environment: puts and
# ranged gets byte for byte, listings over several pages, odd names, a wrong
# secret refused, no server at all, threads. Then the server is killed
# (kill -9) and started again while the cases run, and they must still pass
# (the client retries).
# usage: s3_object_store_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# A server of its own: this test stops and restarts it.
# shellcheck disable=SC2034 # read by s3_lib.sh
s3_private=1
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

tests=$(dirname "$densefs")/../tests/densefs_unit_tests
[[ -x $tests ]] || fail "the unit test binary $tests is missing (build densefs_unit_tests)"

"$tests" --gtest_filter='s3_object_store_test.*:s3_url.*' --gtest_brief=1 ||
  fail "the S3 object store's cases failed against radosgw"
# Every case ran against the server: none skipped.
skipped=$("$tests" --gtest_filter='s3_object_store_test.*' 2>&1 | grep -c '^\[  SKIPPED \]' || true)
[[ $skipped == 0 ]] || fail "$skipped S3 cases skipped with a server running"

# radosgw killed and back within the client's retries (5 tries over ~8.5 s):
# the cases pass all the same.
(
  sleep 2
  s3_stop KILL
  sleep 1
  s3_start
) &
restarter=$!
"$tests" --gtest_filter='s3_object_store_test.threads_share_one_store:s3_object_store_test.an_object_reads_back_exactly_in_any_range' --gtest_repeat=3 --gtest_brief=1 ||
  fail "the S3 cases failed across a radosgw restart"
wait "$restarter" || fail "restarting radosgw failed"
echo "PASS: the S3 object store against radosgw, also across a radosgw kill -9"
