#!/usr/bin/env bash
# The Debian package's hand-kept metadata agrees with the tree:
# - packaging/copyright gives densefs the licence of LICENSE (Apache 2.0),
#   names every Rust crate codec/rust/Cargo.lock pins, and has a licence
#   paragraph for every licence its files paragraphs name;
# - packaging/changelog's newest entry is for the version project() sets,
#   and dpkg-parsechangelog reads it (when dpkg-dev is installed).
# Each check is first run on a copy with a known defect, so a check that
# accepts anything cannot pass.
# usage: package_metadata_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: package_metadata_test.sh SOURCE_DIR}

python3 - "$src" <<'EOF'
import re
import sys
import tomllib

src = sys.argv[1]


def paragraphs(text):
    """The copyright file's paragraphs as {field: value} (deb822)."""
    result = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields, name = {}, None
        for line in block.split("\n"):
            if line.startswith((" ", "\t")) and name:
                fields[name] += "\n" + line.strip()
            elif ":" in line:
                name, value = line.split(":", 1)
                fields[name] = value.strip()
        result.append(fields)
    return result


def copyright_problems(text, lock_text, licence_text):
    problems = []
    paras = paragraphs(text)
    if not paras or not paras[0].get("Format", "").startswith("https://www.debian.org/doc/packaging-manuals/copyright-format/1.0"):
        problems.append("the first paragraph has no copyright-format 1.0 Format field")
    files = [p for p in paras if "Files" in p]
    star = [p for p in files if p["Files"].split() == ["*"]]
    if "Apache License" not in licence_text or "Version 2.0, January 2004" not in licence_text:
        problems.append("LICENSE is no longer the Apache License 2.0: change packaging/copyright with it")
    if len(star) != 1 or star[0].get("License", "").split("\n")[0] != "Apache-2.0":
        problems.append("the 'Files: *' paragraph does not give densefs LICENSE's Apache-2.0")
    # Every crate Cargo.lock pins (from crates.io) is named, as a
    # rust-crates/NAME-VERSION/* paragraph or, not built here, in a comment.
    lock = tomllib.loads(lock_text)
    for package in lock["package"]:
        if "source" not in package:
            continue
        crate = f"{package['name']}-{package['version']}"
        if not re.search(rf"(^|[\s/]){re.escape(crate)}([/\s,.]|$)", text, re.M):
            problems.append(f"crate {crate} (codec/rust/Cargo.lock) is not named: "
                            "run packaging/rust_crates_copyright.py")
    # Every licence a files paragraph names has a paragraph with its text.
    defined = {p["License"].split("\n")[0] for p in paras if "License" in p and "Files" not in p}
    for p in files:
        expression = p.get("License", "").split("\n")[0]
        for name in re.split(r"\s+(?:or|and)\s+|[()]", expression):
            name = name.strip()
            if not name or p.get("License", "").count("\n"):
                continue  # empty, or the text is given in the paragraph itself
            name = name.split(" with ")[0]
            if name not in defined:
                problems.append(f"licence {name} ({p['Files'].split()[0]}) has no License paragraph")
    return sorted(set(problems))


def changelog_problems(changelog, cmake):
    problems = []
    head = re.match(r"densefs \(([^)]+)-([^)-]+)\) \S+; urgency=\S+\n", changelog)
    project = re.search(r"project\(densefs VERSION ([0-9.]+)", cmake)
    if not head:
        problems.append("the first line is not 'densefs (VERSION-REVISION) DIST; urgency=U'")
    elif not project:
        problems.append("CMakeLists.txt has no project(densefs VERSION ...)")
    elif head.group(1) != project.group(1):
        problems.append(f"the newest entry is for {head.group(1)}, project() says "
                        f"{project.group(1)}: add an entry (dch -v {project.group(1)}-1)")
    if not re.search(r"^ -- .+ <[^>]+>  \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d [+-]\d{4}$", changelog, re.M):
        problems.append("no trailer line ' -- NAME <EMAIL>  DAY, DD MON YYYY HH:MM:SS +ZZZZ'")
    return problems


def read(path):
    with open(f"{src}/{path}", encoding="utf-8") as f:
        return f.read()


copyright_text = read("packaging/copyright")
lock_text = read("codec/rust/Cargo.lock")
licence_text = read("LICENSE")
changelog = read("packaging/changelog")
cmake = read("CMakeLists.txt")

# Known defects are caught.
broken_lock = lock_text + '\n[[package]]\nname = "not-a-crate"\nversion = "9.9.9"\nsource = "registry+x"\n'
assert any("not-a-crate-9.9.9" in p for p in copyright_problems(copyright_text, broken_lock, licence_text)), \
    "a crate missing from packaging/copyright was not caught"
assert copyright_problems(copyright_text.replace("License: Apache-2.0\n", "License: MIT\n", 1), lock_text, licence_text), \
    "a 'Files: *' paragraph under another licence was not caught"
assert copyright_problems(copyright_text.replace("\nLicense: Zlib\n ", "\nLicense: Zlib-old\n ", 1), lock_text, licence_text), \
    "a licence without its paragraph was not caught"
assert changelog_problems(changelog.replace(" (", " (0.0.0.1-", 1), cmake), \
    "a changelog entry for another version was not caught"

problems = [f"packaging/copyright: {p}" for p in copyright_problems(copyright_text, lock_text, licence_text)]
problems += [f"packaging/changelog: {p}" for p in changelog_problems(changelog, cmake)]
if problems:
    print("FAIL:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
EOF

if command -v dpkg-parsechangelog >/dev/null; then
  version=$(dpkg-parsechangelog -l "$src/packaging/changelog" -S Version)
  echo "packaging/changelog: dpkg-parsechangelog reads version $version"
fi
echo "package metadata OK"
