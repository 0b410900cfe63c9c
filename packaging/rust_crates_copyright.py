#!/usr/bin/env python3
"""Prints the packaging/copyright paragraphs of the Rust crates that
codec/rust/Cargo.lock pins, read from the crates cargo has fetched.

The crates are compiled into /usr/bin/densefs (or, proc-macro crates, used
to compile it), so the package's copyright file names each one with its
authors and licence. Run it after a build has fetched the crates, when
Cargo.lock changes (tests/package/copyright_test.sh says so), and put its
output in place of the rust-crates paragraphs of packaging/copyright:

    python3 packaging/rust_crates_copyright.py [CARGO_HOME]

A crate cargo has not fetched is not built for Linux (winapi, say); it is
listed on standard error, for the header paragraph's Comment. Licence texts that /usr/share/common-licenses
lacks are paragraphs of their own in packaging/copyright, written by hand.
"""
import glob
import os
import re
import sys
import tomllib

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# SPDX names as the Debian copyright format spells them.
DEP5_NAMES = {
    "MIT": "Expat",
    "BSD-2-Clause": "BSD-2-clause",
    "BSD-3-Clause": "BSD-3-clause",
    "LGPL-3.0-or-later": "LGPL-3+",
}

# Crates whose Cargo.toml names no authors: the holder their licence file
# or repository names.
HOLDERS = {
    "cabac": "the cabac authors (https://github.com/mcroomp/cabac)",
    "glam": "2020 Cameron Hart",
    "libc": "The Rust Project Developers",
    "zlib-rs": "2024 Trifecta Tech Foundation",
}


def dep5_licence(spdx):
    # "A/B" is the old crates.io spelling of "A OR B".
    words = re.split(r"(\s+|\(|\)|/)", spdx.replace("/", " OR "))
    out = []
    for word in words:
        if word in ("OR", "AND", "WITH"):
            out.append(word.lower())
        else:
            out.append(DEP5_NAMES.get(word, word))
    return re.sub(r"\s+", " ", "".join(out)).strip()


def main():
    cargo_home = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "CARGO_HOME", os.path.expanduser("~/.cargo"))
    with open(os.path.join(SOURCE_DIR, "codec/rust/Cargo.lock"), "rb") as f:
        lock = tomllib.load(f)
    not_fetched = []
    for package in lock["package"]:
        if "source" not in package:
            continue  # densefs_codec_rs itself
        name, version = package["name"], package["version"]
        found = glob.glob(os.path.join(
            cargo_home, "registry/src/*", f"{name}-{version}/Cargo.toml"))
        if not found:
            not_fetched.append(f"{name}-{version}")
            continue
        with open(found[0], "rb") as f:
            manifest = tomllib.load(f)["package"]
        authors = manifest.get("authors") or [HOLDERS.get(name, f"the {name} authors")]
        print(f"Files: rust-crates/{name}-{version}/*")
        print("Copyright: " + "\n ".join(authors))
        print(f"License: {dep5_licence(manifest['license'])}")
        print()
    if not_fetched:
        # The header paragraph's Comment names them (the format has no
        # comment lines).
        print("Not fetched, so not built here (name them in the header's"
              " Comment): " + ", ".join(not_fetched), file=sys.stderr)


if __name__ == "__main__":
    main()
