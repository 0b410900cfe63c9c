#!/usr/bin/env bash
# Every -o option tools/mount_args.cpp accepts, and every fstab word it
# ignores, is named in the MOUNT OPTIONS section of densefs-mount(1)
# (packaging/man/densefs-mount.h2m): that section replaces the help's
# option table in the man page (packaging/man/command_help.sh), so an
# option added to the parser must be described there too.
# usage: man_options_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: man_options_test.sh SOURCE_DIR}
parser=$src/tools/mount_args.cpp
page=$src/packaging/man/densefs-mount.h2m
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The names the parser compares an option with: `key == "name"` in
# apply_option, and the strings of is_dropped (fstab's words: "nofail",
# "comment=", "x-", ...).
parser_options() {
  grep -oE 'key == "[a-z_]+"' "$1" | sed -E 's/key == "(.*)"/\1/'
  sed -n '/^bool is_dropped/,/^}/p' "$1" | grep -oE '"[a-z_-]+=?"' | tr -d '"'
}

# The words of the tag lines (the line after each .TP) of the MOUNT OPTIONS
# section, without roff: font requests and escapes, quotes, "\-" for "-".
page_option_tags() {
  awk '
    /^\[/ { in_section = ($0 == "[MOUNT OPTIONS]"); next }
    in_section && tag { print; tag = 0; next }
    in_section && /^\.TP/ { tag = 1 }' "$1" |
    sed -E -e 's/^\.[A-Z]+ //' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/\\&//g' -e 's/"//g'
}

# Prints each parser option no tag line of the page names.
missing_options() {
  local tags option
  tags=$(page_option_tags "$2")
  while IFS= read -r option; do
    # A name, not part of a longer one ("auto" is not found in "io=auto").
    if ! grep -qE "(^|[ ,|/])${option//./\\.}([ ,|/=*.]|$)" <<<"$tags"; then
      echo "$option"
    fi
  done < <(parser_options "$1" | sort -u)
}

options=$(parser_options "$parser" | sort -u)
# The parser still reads as this test expects: it finds the options every
# version has had. Without this, a rewrite of mount_args.cpp would leave
# nothing to check and the test would pass.
for known in allow_other codec transport commit nofail x-; do
  if ! grep -qx -- "$known" <<<"$options"; then
    echo "FAIL: found no '$known' in $parser: this test no longer understands it" \
      "(it reads \`key == \"name\"\` and the strings of is_dropped)" >&2
    exit 1
  fi
done

# A page without an option's tag is caught.
grep -v '^\.BI commit= SEC$' "$page" >"$tmp/without-commit.h2m"
if ! grep -qx commit <<<"$(missing_options "$parser" "$tmp/without-commit.h2m")"; then
  echo "FAIL: a densefs-mount.h2m without the commit= tag was not caught" >&2
  exit 1
fi

missing=$(missing_options "$parser" "$page")
if [[ -n $missing ]]; then
  echo "FAIL: $parser accepts these -o options, which the MOUNT OPTIONS section" \
    "of $page does not name in a tag line (.TP):" >&2
  echo "  ${missing//$'\n'/$'\n'  }" >&2
  exit 1
fi
echo "man options OK: $(wc -l <<<"$options") options of mount_args.cpp in densefs-mount.h2m"
