#!/usr/bin/env bash
# The program help2man runs for one man page: `command_help.sh --help`
# prints `densefs [COMMAND] --help` in the shape help2man parses.
# make_man_pages.sh sets the environment:
#   DENSEFS_BIN           the densefs binary
#   DENSEFS_MAN_COMMAND   the command (empty: densefs itself)
# help2man runs its program through the shell with no other arguments, so
# the command travels in the environment; it gets --version-string and so
# never asks a command for its version.
# The words are the CLI's own; only their layout changes, where help2man
# would misread it (each function says what it misreads).
set -euo pipefail
densefs=${DENSEFS_BIN:?DENSEFS_BIN must name the densefs binary}
command=${DENSEFS_MAN_COMMAND:-}

if [[ $# -ne 1 || $1 != --help ]]; then
  echo "usage: DENSEFS_BIN=... [DENSEFS_MAN_COMMAND=CMD] $0 --help" >&2
  exit 2
fi

# The hand-written usage texts (densefs's own, mount's) begin "usage:"
# with further forms indented beneath it; help2man takes a SYNOPSIS only
# from "Usage:" with further forms as "or:" lines. They list their options
# without an "Options:" heading, which would put them in OPTIONS.
shape_usage_text() {
  awk '
    NR == 1 && sub(/^usage:/, "Usage:") { hand_written = in_usage = 1; print; next }
    in_usage && /^       [^ ]/ { sub(/^       /, "   or: "); print; next }
    { in_usage = 0 }
    hand_written && /^  -/ { print "Options:"; hand_written = 0 }
    { print }'
}

# In `densefs help`, an entry whose synopsis needs two lines goes on at
# column 7 and may start its description at column 37 on that line;
# help2man would take each line for a paragraph of its own. The synopsis
# is joined into one line and the description moved beneath it.
join_command_synopses() {
  awk '
    function flush() { if (held != "") print held; held = "" }
    /^commands:$/ { flush(); listing = 1; print; next }
    listing && /^  [a-z]/ { flush(); held = $0; next }
    listing && /^       [^ ]/ && held != "" {
      synopsis = $0; description = ""
      if (length($0) > 37 && substr($0, 37, 1) == " " && substr($0, 38, 1) != " ") {
        synopsis = substr($0, 1, 36); description = substr($0, 38)
      }
      sub(/^ +/, "", synopsis); sub(/ +$/, "", synopsis)
      held = held " " synopsis
      if (description != "") { flush(); printf "%37s%s\n", "", description }
      next
    }
    listing && !/^ / { listing = 0 }
    { flush(); print }
    END { flush() }'
}

# mount nests its -o options in a table under -o, whose continuation lines
# help2man lays out as stray paragraphs. densefs-mount.h2m's MOUNT OPTIONS
# section describes every one of them (tests/lint/man_options_test.sh
# checks that it names each option tools/mount_args.cpp accepts), so the
# table gives way to a pointer there.
point_to_mount_options() {
  awk '
    /^  -o / { print "  -o OPTIONS            comma-separated, may be repeated: see MOUNT OPTIONS"; nested = 1; next }
    nested && (/^$/ || /^  -/) { nested = 0 }
    !nested { print }'
}

# help2man does not part an option from a description that starts with a
# dash ("--size TEXT=300M   --prepare: cap of the tree"): it takes two
# options side by side for that. Such a description goes on the next line,
# at its column.
part_dash_descriptions() {
  awk '
    /^  -/ && match($0, /[^ ]  +-/) {
      column = RSTART + 1
      while (substr($0, column, 1) == " ") column++
      printf "%s\n%*s%s\n", substr($0, 1, RSTART), column - 1, "", substr($0, column)
      next
    }
    { print }'
}

# The subcommands a CLI11 help lists under "Subcommands:".
subcommands_in() {
  awk '/^Subcommands:$/ { on = 1; next } on && /^  [a-z]/ { print $1; next } { on = 0 }'
}

if [[ -z $command ]]; then
  "$densefs" --help | shape_usage_text | join_command_synopses
  exit 0
fi

main_help=$("$densefs" "$command" --help)
if [[ $command == mount ]]; then
  shape_usage_text <<<"$main_help" | point_to_mount_options
else
  shape_usage_text <<<"$main_help" | part_dash_descriptions
fi

# A command with subcommands (codec, czip, key, snapshot): each one's help
# follows in a section of its own, so its options are in the man page too.
# help2man would join a subcommand's description and its usage line into
# one paragraph, and move the lines under a bare "Options:" into the page's
# OPTIONS section: a blank line parts the first two, and the headings name
# the subcommand.
while IFS= read -r sub; do
  printf '\n*densefs %s %s*\n\n' "$command" "$sub"
  "$densefs" "$command" "$sub" --help | part_dash_descriptions |
    sed -e 's/^Usage:/\nUsage:/' \
      -e "s/^Options:\$/Options of densefs $command $sub:/" \
      -e "s/^Positionals:\$/Arguments of densefs $command $sub:/"
done < <(subcommands_in <<<"$main_help")
