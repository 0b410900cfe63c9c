#!/usr/bin/env bash
# The third-party suites on scale-out volumes: pjdfstest (POSIX semantics),
# fsx (file data against a model) and the Hypothesis differential test
# (random operation sequences against a plain directory), each run as its
# own script with every store it makes a volume with its records in a
# private PostgreSQL (postgres_lib.sh) and its packs in a private radosgw
# (s3_lib.sh): mount_lib.sh's mkfs_store reads DENSEFS_TEST_POSTGRES and
# DENSEFS_TEST_S3_ENDPOINT. The same scripts, the same checks as on the
# embedded store (docs/scale-out.md). With DENSEFS_TEST_MOUNT_OPTIONS=shared
# every mount is a writer beside others (docs/scale-out.md, "Several
# writers"), and pjdfstest and the differential test run on two writers of
# each volume at once (ctest's extended.scale_out_tools_shared_soak).
# DENSEFS_SCALE_OUT_TOOLS picks suites (default "pjdfstest fsx
# differential").
# usage: scale_out_tools_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

command -v psql >/dev/null || missing_tool "psql (Debian postgresql-client-15)"
export DENSEFS_TEST_POSTGRES="host=$pg_socket_dir port=$pg_port user=postgres"
export DENSEFS_TEST_S3_ENDPOINT
# Fewer fsx operations and Hypothesis examples than on the embedded store
# (7,000 against 17,100; 30 examples per configuration against 70): every
# commit here is a round trip to PostgreSQL and an upload, and CI's time
# is shared. DENSEFS_FSX_OPS and DENSEFS_HYPO_EXAMPLES set them.
export DENSEFS_FSX_OPS=${DENSEFS_FSX_OPS:-1000}
export DENSEFS_HYPO_EXAMPLES=${DENSEFS_HYPO_EXAMPLES:-30}

failed=()
options=${DENSEFS_TEST_MOUNT_OPTIONS:-}
for suite in ${DENSEFS_SCALE_OUT_TOOLS:-pjdfstest fsx differential}; do
  label="$suite${options:+ -o $options}"
  echo "=== ${suite}_test.sh on PostgreSQL and S3 volumes${options:+, mounted -o $options}"
  start=$(now)
  rc=0
  # Mounted -o shared, pjdfstest and the differential test run on two
  # writers of each volume at once.
  writers=1
  [[ $options == *shared* ]] && writers=2
  DENSEFS_PJDFSTEST_WRITERS=$writers DENSEFS_HYPO_WRITERS=$writers \
    bash "$src/tests/mount/${suite}_test.sh" "$densefs" "$src" || rc=$?
  echo "=== ${suite}_test.sh: exit $rc in $(elapsed "$start" "$(now)") s"
  # 77: skipped (a missing tool): the script said why; that is a failure
  # only where the tools are required, which the script itself decides.
  ((rc == 0 || rc == 77)) || failed+=("$label")
  ((rc != 77)) || skipped_one=1
done
((${#failed[@]} == 0)) || fail "on scale-out volumes: ${failed[*]} failed"
[[ -z ${skipped_one:-} ]] || skip "a suite was skipped (see above)"
echo "PASS: pjdfstest, fsx and the differential test on scale-out volumes"
