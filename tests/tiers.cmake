# Which ctest tests run where (docs/testing.md, "Tiers and phases").
#
# Every test carries labels, and tools/setup.sh's phases select by them
# (never by a list of names to leave out):
#
#   a tier, one per test   unit     GoogleTest without a mount
#                          mount    real mounts (GoogleTest), RUN_SERIAL
#                          script   the shell suites (also `mount`)
#                          fuzz     libFuzzer replays and runs (ASan tree)
#                          lint     checks of the sources and examples
#                          service  a server the phase shares (fixtures)
#                          extended soaks and long runs: not in a phase;
#                                   `tools/setup.sh test --extended` runs
#                                   them all, CI one shard of them
#   what it needs          scaleout PostgreSQL and radosgw volumes
#   opt-in sanitizers      asan     run again in the ASan+UBSan tree
#                          tsan     run again in the TSan tree
#
# A test is labelled asan or tsan for what that sanitizer can find there:
# TSan the concurrent parts (write-back, worker pool, caches, the batched
# reader, metadata engines, read-path races, shared writers), ASan the
# parsers, codecs, fuzz replays and one variant of each mount suite.
#
# The phases (tools/setup.sh):
#   main        release tree   -LE '^extended$'
#   asan+ubsan  ASan tree      -L '^asan$' -LE '^extended$'
#   tsan        TSan tree      -L '^tsan$' -LE '^extended$'
#   extended    release tree   -L '^extended$' (ASan tree: -L extended -L fuzz)

# densefs_gtest_groups(TARGET <binary target> [PREFIX <ctest name prefix>]
#     [MODE POST_BUILD|PRE_TEST] [PROPERTIES <text>] [EXCLUDE <gtest filter>]
#     GROUPS <labels> <gtest filter> <properties text or ->...)
#
# Discovers the GoogleTest cases of TARGET in groups; the first group whose
# filter (positive patterns only) matches a case gives it its labels
# (comma-separated) and its properties (text for set_tests_properties, "-"
# for none), on top of PROPERTIES. A case no group matches is not a ctest
# test: end with a group of filter "*".
# EXCLUDE names cases no ctest test runs (a script runs them).
#
# gtest_discover_tests cannot carry a list (several labels) in its own
# PROPERTIES, so each group's properties are set by an include file of its
# own that ctest reads after the discovered tests (TEST_LIST).
function(densefs_gtest_groups)
  cmake_parse_arguments(arg "" "TARGET;PREFIX;MODE;PROPERTIES;EXCLUDE" "GROUPS" ${ARGN})
  if(NOT arg_MODE)
    set(arg_MODE POST_BUILD)
  endif()
  list(LENGTH arg_GROUPS n)
  math(EXPR remainder "${n} % 3")
  if(NOT remainder EQUAL 0)
    message(FATAL_ERROR "densefs_gtest_groups(${arg_TARGET}): GROUPS takes triples: labels, filter, properties")
  endif()
  set(taken "${arg_EXCLUDE}")
  set(index 0)
  while(index LESS n)
    list(GET arg_GROUPS ${index} labels)
    math(EXPR i "${index} + 1")
    list(GET arg_GROUPS ${i} filter)
    math(EXPR i "${index} + 2")
    list(GET arg_GROUPS ${i} properties)
    math(EXPR group "${index} / 3")
    # Groups cannot leave cases out (a negative filter would drop them
    # from the later groups too): an earlier group takes them instead.
    if(filter MATCHES "-")
      message(FATAL_ERROR "densefs_gtest_groups(${arg_TARGET}): '${filter}' has a negative part; put the cases it leaves out in an earlier group")
    endif()
    # What earlier groups took is left out of this one (gtest's filter:
    # POSITIVE[-NEGATIVE], each a list joined by ':').
    set(discover_filter "${filter}")
    if(taken)
      set(discover_filter "${filter}-${taken}")
    endif()
    set(list_var "densefs_${arg_TARGET}_group${group}")
    gtest_discover_tests(${arg_TARGET}
      TEST_PREFIX "${arg_PREFIX}"
      TEST_FILTER "${discover_filter}"
      TEST_LIST ${list_var}
      DISCOVERY_MODE ${arg_MODE}
      DISCOVERY_TIMEOUT 60)
    string(REPLACE "," ";" labels "${labels}")
    if(properties STREQUAL "-")
      set(properties "")
    endif()
    set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${arg_TARGET}_group${group}_properties.cmake")
    file(WRITE "${include_file}"
      "# Written by tests/tiers.cmake: the labels of ${arg_TARGET}'s group ${group} (${filter}).\n"
      "if(${list_var})\n"
      "  set_tests_properties(\${${list_var}} PROPERTIES LABELS \"${labels}\" ${arg_PROPERTIES} ${properties})\n"
      "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
    if(taken)
      set(taken "${taken}:${filter}")
    else()
      set(taken "${filter}")
    endif()
    math(EXPR index "${index} + 3")
  endwhile()
endfunction()

# The PostgreSQL server a phase shares (tests/services/postgres_service.sh,
# a ctest fixture): started once before the first test that needs it,
# stopped after the last. Each test makes databases of its own on it.
# Under /var/tmp, not the build tree: the server's `postgres` user must
# reach it (a checkout under /root or /work may be private). One per tree.
string(MD5 densefs_tree_hash "${CMAKE_BINARY_DIR}")
string(SUBSTRING "${densefs_tree_hash}" 0 10 densefs_tree_hash)
set(DENSEFS_SERVICE_DIR /var/tmp/densefs-services-${densefs_tree_hash})
set(DENSEFS_POSTGRES_SERVICE_DIR ${DENSEFS_SERVICE_DIR}/postgres)
set(densefs_postgres_service
  "FIXTURES_REQUIRED postgres ENVIRONMENT DENSEFS_TEST_POSTGRES_SERVICE=${DENSEFS_POSTGRES_SERVICE_DIR}")
# The radosgw the phase shares (tests/services/s3_service.sh), the same way.
set(DENSEFS_S3_SERVICE_DIR ${DENSEFS_SERVICE_DIR}/s3)
# For add_test'ed scripts: the environment that names both servers.
set(densefs_services_environment
  "DENSEFS_TEST_POSTGRES_SERVICE=${DENSEFS_POSTGRES_SERVICE_DIR}"
  "DENSEFS_TEST_S3_SERVICE=${DENSEFS_S3_SERVICE_DIR}")
