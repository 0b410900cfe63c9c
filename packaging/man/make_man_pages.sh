#!/usr/bin/env bash
# Writes densefs.1.gz and densefs-COMMAND.1.gz for every command into
# OUT_DIR, made by help2man from the built binary's own help, so a page can
# never disagree with the CLI. The commands are those `densefs help` lists;
# H2M_DIR/densefs.h2m and H2M_DIR/densefs-COMMAND.h2m add hand-written
# sections (help2man --include).
# usage: make_man_pages.sh DENSEFS HELP2MAN H2M_DIR CHANGELOG OUT_DIR
set -euo pipefail
if [[ $# -ne 5 ]]; then
  echo "usage: $0 DENSEFS HELP2MAN H2M_DIR CHANGELOG OUT_DIR" >&2
  exit 2
fi
densefs=$1 help2man=$2 h2m_dir=$3 changelog=$4 out=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# help2man prints the date in each page; the newest changelog entry's date
# (what dpkg-buildpackage exports) makes a rebuild byte for byte the same.
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  entry_date=$(sed -n 's/^ -- .*>  //p' "$changelog" | awk 'NR == 1')
  SOURCE_DATE_EPOCH=$(date -d "$entry_date" +%s)
  export SOURCE_DATE_EPOCH
fi

version=$("$densefs" --version | awk 'NR == 1 { print $2 }')
# The names in the "commands:" list of `densefs help`: lines indented by
# exactly two spaces (deeper lines continue an entry). `help` has no page.
mapfile -t commands < <("$densefs" help | awk '
  /^commands:$/ { listing = 1; next }
  listing && /^  [a-z]/ { if ($1 != "help") print $1; next }
  listing && !/^ / { listing = 0 }')
if [[ -z $version || ${#commands[@]} -eq 0 ]]; then
  echo "make_man_pages.sh: could not read the version or the command list from" \
    "'$densefs --version' and '$densefs help'" >&2
  exit 1
fi

# A NAME line is one phrase: a description up to its first full stop,
# semicolon or colon outside parentheses. A colon after the first word
# labels what follows ("CZIP: one file packed into ..."), so it stays.
first_phrase() {
  awk '{
    depth = 0; words = 1
    for (i = 1; i < length($0); i++) {
      c = substr($0, i, 1)
      if (c == "(") depth++
      else if (c == ")") depth--
      else if (c == " ") words++
      else if (depth == 0 && substr($0, i + 1, 1) == " " &&
               (c == "." || c == ";" || (c == ":" && words > 1))) {
        print substr($0, 1, i - 1); exit
      }
    }
    sub(/\.$/, ""); print
  }'
}

# help2man runs its program with --help through the shell: an executable
# copy of the wrapper, whatever mode the checkout gave the file.
wrapper=$work/densefs-help
install -m 0755 "$here/command_help.sh" "$wrapper"
export DENSEFS_BIN=$densefs

# SEE ALSO of densefs.1: every command's page.
{
  echo '[SEE ALSO]'
  echo '.PP'
  echo 'The pages of the commands:'
  last=$((${#commands[@]} - 1))
  for i in "${!commands[@]}"; do
    if [[ $i -lt $last ]]; then sep=,; else sep=; fi
    echo ".BR densefs\\-${commands[i]} (1)$sep"
  done
} >"$work/densefs-commands.h2m"

DENSEFS_MAN_COMMAND='' "$help2man" --no-info --section=1 \
  --source="densefs $version" --version-string="densefs $version" \
  --include="$h2m_dir/densefs.h2m" --include="$work/densefs-commands.h2m" \
  --output="$work/densefs.1" "$wrapper"

for command in "${commands[@]}"; do
  page=densefs-$command
  includes=()
  own_h2m=$h2m_dir/$page.h2m
  [[ -f $own_h2m ]] && includes+=(--include="$own_h2m")
  # NAME: the start of the command's description (CLI11 prints it first),
  # unless a hand-written [NAME] is given (mount's help has none).
  name_option=()
  if [[ ! -f $own_h2m ]] || ! grep -qix '\[name\]' "$own_h2m"; then
    first_line=$("$densefs" "$command" --help | awk 'NR == 1')
    if [[ -z $first_line || $first_line == [Uu]sage:* ]]; then
      echo "make_man_pages.sh: 'densefs $command --help' starts with no description;" \
        "give the page a NAME in packaging/man/$page.h2m ([NAME] section)" >&2
      exit 1
    fi
    summary=$(first_phrase <<<"$first_line")
    # Lower case as NAME lines are, unless the first word is an acronym (CZIP).
    [[ $summary =~ ^[A-Z][A-Z] ]] || summary=${summary,}
    name_option=(--name="$summary")
  fi
  # SEE ALSO densefs(1), joined by a comma to what the h2m file lists.
  sep=
  if [[ -f $own_h2m ]] && grep -qix '\[see also\]' "$own_h2m"; then sep=,; fi
  printf '[SEE ALSO]\n.BR densefs (1)%s\n' "$sep" >"$work/$page-see-also.h2m"
  DENSEFS_MAN_COMMAND=$command "$help2man" --no-info --section=1 \
    --source="densefs $version" --version-string="$page $version" "${name_option[@]}" \
    --include="$work/$page-see-also.h2m" "${includes[@]}" \
    --output="$work/$page.1" "$wrapper"
done

# Debian wants man pages gzip'd at maximum compression, without the
# timestamp gzip would otherwise record (lintian checks both).
rm -rf "$out"
mkdir -p "$out"
for page in "$work"/*.1; do
  file=$(basename "$page")
  gzip -9n <"$page" >"$out/$file.gz"
done
echo "man pages: densefs.1 and ${#commands[@]} command pages in $out"
