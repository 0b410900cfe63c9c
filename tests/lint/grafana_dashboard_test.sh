#!/usr/bin/env bash
# docs/grafana/densefs.json, the Grafana dashboard docs/metrics.md offers,
# loads:
# - Grafana's own dashboard model (grafana-foundation-sdk, the Python types
#   Grafana generates from its schema; tools/setup.sh installs it in its
#   venv) reads it and writes it back without losing a key or changing a
#   value: every field is one the schema knows;
# - every query is PromQL that promtool accepts, with the dashboard's
#   variables set as Grafana sets them;
# - every densefs_ metric a query names is one docs/metrics.md lists.
# The checks run first on copies with a known defect (a misspelled key, a
# broken query, a metric no one serves), so a check that accepts anything
# cannot pass. Whether the queries find data is metrics_test.sh's part: it
# runs them against the Prometheus that scrapes a mount.
# usage: grafana_dashboard_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: grafana_dashboard_test.sh SOURCE_DIR}
# shellcheck source=tests/lint/lint_lib.sh
source "$(dirname "$0")/lint_lib.sh"

promtool=$(find_tool promtool) || missing_tool "promtool (Debian prometheus)"
python=${DENSEFS_TOOLS_DIR:-/opt/densefs-tools}/venv/bin/python3
if ! [[ -x $python ]] || ! "$python" -c 'import grafana_foundation_sdk' 2>/dev/null; then
  missing_tool "grafana-foundation-sdk in ${DENSEFS_TOOLS_DIR:-/opt/densefs-tools}/venv"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" - "$src" "$promtool" "$work" <<'EOF'
import copy
import json
import re
import subprocess
import sys

from grafana_foundation_sdk.models import dashboard

src, promtool, work = sys.argv[1:4]
metrics_doc = open(f"{src}/docs/metrics.md").read()
documented = set(re.findall(r"`(densefs_[a-z0-9_]+)`", metrics_doc))


def plain(value):
    """The SDK's objects as JSON values."""
    return json.loads(json.dumps(value, default=lambda o: o.to_json()))


def lost_or_changed(given, read, path=""):
    """Keys of `given` that `read` lost or changed (defaults it adds are fine)."""
    if isinstance(given, dict) and isinstance(read, dict):
        for key, value in given.items():
            if key not in read:
                yield f"{path}/{key}: not in Grafana's dashboard schema"
            else:
                yield from lost_or_changed(value, read[key], f"{path}/{key}")
    elif isinstance(given, list) and isinstance(read, list) and len(given) == len(read):
        for i, (a, b) in enumerate(zip(given, read)):
            yield from lost_or_changed(a, b, f"{path}[{i}]")
    elif given != read:
        yield f"{path}: {given!r} read as {read!r}"


def queries(board):
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def problems(board):
    found = list(lost_or_changed(board, plain(dashboard.Dashboard.from_json(board).to_json())))
    for title, expr in queries(board):
        for name in re.findall(r"\b(densefs_[a-z0-9_]+)", expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in documented and base not in documented:
                found.append(f"panel {title!r}: {name} is not in docs/metrics.md")
    # Grafana's variables as it sets them: $instance a regex, the rate
    # interval a duration.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"densefs:dashboard_query_{i}",
         "expr": expr.replace("$instance", ".*").replace("$__rate_interval", "1m")}
        for i, (_, expr) in enumerate(queries(board))]}]}
    path = f"{work}/rules.json"
    with open(path, "w") as f:
        json.dump(rules, f)
    check = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    if check.returncode != 0:
        found.append("promtool check rules: " + (check.stdout + check.stderr).strip())
    return found


board = json.load(open(f"{src}/docs/grafana/densefs.json"))
assert board["panels"] and any(True for _ in queries(board)), "a dashboard without queries"

# Each check must catch its defect.
defects = {
    "a misspelled key": lambda b: b["panels"][1].__setitem__("gridPoss", {}),
    "a broken query": lambda b: b["panels"][1]["targets"][0].__setitem__("expr", "rate(densefs_fuse_requests_total[1m]"),
    "a metric no one serves": lambda b: b["panels"][1]["targets"][0].__setitem__("expr", "densefs_no_such_total"),
}
for what, make in defects.items():
    broken = copy.deepcopy(board)
    make(broken)
    if not problems(broken):
        sys.exit(f"FAIL: the checks did not catch {what}")

found = problems(board)
if found:
    print("\n".join(found), file=sys.stderr)
    sys.exit("FAIL: docs/grafana/densefs.json (above)")
print(f"PASS: grafana dashboard ({len(board['panels'])} panels, {sum(1 for _ in queries(board))} queries)")
EOF
