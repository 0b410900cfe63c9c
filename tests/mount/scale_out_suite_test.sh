#!/usr/bin/env bash
# The real-mount GoogleTest suite (tests/mount/*.cpp) once more, with every
# store a scale-out volume: records in PostgreSQL (a private server,
# postgres_lib.sh) and packs as objects in S3 (a private radosgw,
# s3_lib.sh). DENSEFS_TEST_POSTGRES and DENSEFS_TEST_S3_ENDPOINT make the
# mount fixture create a new database and an object prefix for each test's
# store (densefs mkfs --meta ... --data ...). The same tests, the same
# assertions: the fs/ layer must not notice where the store keeps things.
# usage: scale_out_suite_test.sh DENSEFS_BINARY SOURCE_DIR
# Environment:
#   DENSEFS_SCALE_OUT_SUITE_FILTER=PATTERN  a gtest filter instead of the
#                                           default (every suite that uses
#                                           the fixture's store)
#   DENSEFS_SCALE_OUT_SUITE_S3=0            records in PostgreSQL, packs in
#                                           the store directory (format 5)
#   DENSEFS_TEST_MOUNT_OPTIONS=shared       every mount a writer beside
#                                           others (docs/scale-out.md,
#                                           "Several writers": every
#                                           namespace operation and data
#                                           commit reads its records inside
#                                           the commit's lock, every open
#                                           re-reads the file's record;
#                                           needs packs in object storage):
#                                           ctest's extended.scale_out_suite_shared
#                                           and mount.scale_out_sanitized
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
if [[ ${DENSEFS_SCALE_OUT_SUITE_S3:-1} != 0 ]]; then
  # shellcheck source=s3_lib.sh
  source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"
else
  unset DENSEFS_TEST_S3_ENDPOINT
fi

tests=$(dirname "$densefs")/../tests/mount/densefs_mount_tests
[[ -x $tests ]] || fail "the mount test binary $tests is missing (build densefs_mount_tests)"
command -v psql >/dev/null || missing_tool "psql (Debian postgresql-client-15)"

# Every suite whose stores come from the fixture's mkfs, but: those that
# make their own stores or damage RocksDB's files (faults, full_disk, gc,
# lifecycle, codecs_damage), the long crash rounds (postgres_store_test.sh
# kills a daemon on a PostgreSQL store), and the suites whose time is codec
# CPU, the payload path or 100,000 creates rather than records (codecs,
# large_jpeg, deflate, recompress, czip, export, io, names, remount_wait):
# 91 tests, about 2.5 minutes instead of 8 here.
# DENSEFS_SCALE_OUT_SUITE_FILTER='*' runs everything (failures: tests that
# damage RocksDB's or the store directory's pack files).
default_filter='*-faults.*:full_disk.*:gc.*:lifecycle.*:crash.*:codecs*:names.*:remount_wait.*:large_jpeg*:deflate*:recompress.*:czip*:export*:io/*'
filter=${DENSEFS_SCALE_OUT_SUITE_FILTER:-$default_filter}

export DENSEFS_TEST_POSTGRES="host=$pg_socket_dir port=$pg_port user=postgres"
where="PostgreSQL${DENSEFS_TEST_S3_ENDPOINT:+ and S3} volumes"
echo "densefs_mount_tests --gtest_filter=$filter on $where"
"$tests" --gtest_filter="$filter" --gtest_brief=1 || fail "mount tests on $where failed"
