# bash completion for densefs (installed as
# /usr/share/bash-completion/completions/densefs).
#
# The commands, subcommands and options come from the densefs being
# completed, at completion time (`densefs help`, `densefs CMD [SUB] --help`),
# so they cannot drift from the CLI. Needs only bash: none of
# bash-completion's helpers (_init_completion, _filedir, _parse_help).

# The commands `densefs help` lists: the lines of its "commands:" list
# indented by exactly two spaces (deeper lines continue an entry).
_densefs_commands() {
  "$1" help 2>/dev/null | awk '
    /^commands:$/ { listing = 1; next }
    listing && /^  [a-z]/ { print $1; next }
    listing && !/^ / { listing = 0 }'
}

# The subcommands a CLI11 help lists under "Subcommands:" (czip pack, ...).
_densefs_subcommands() {
  "$@" --help 2>/dev/null | awk '
    /^Subcommands:$/ { on = 1; next }
    on && /^  [a-z]/ { print $1; next }
    { on = 0 }'
}

# The option names of a help text: the left column of the lines that start
# with a dash at an indent of at most four ("  -h,--help   Print ...",
# "  --codec TEXT   ...", mount's "  -o OPTIONS   ..."); deeper lines are
# descriptions or nested lists. "--codec=x" forms are cut at the "=".
_densefs_options() {
  "$@" --help 2>/dev/null | awk '
    /^ +-/ {
      match($0, /^ +/)
      if (RLENGTH > 4) next
      left = substr($0, RLENGTH + 1)
      sub(/  .*/, "", left)
      n = split(left, words, /[ ,]+/)
      for (i = 1; i <= n; i++) {
        if (words[i] !~ /^-/) continue
        sub(/[=[].*/, "", words[i])
        print words[i]
      }
    }'
}

# The -o option names of `densefs mount --help`: its nested list under -o,
# indented by five ("     ro / rw   ...", "     codec=SPEC   ...",
# "     debug, foreground  as -d, -f"). Options that take a value end in "=".
_densefs_mount_options() {
  "$1" mount --help 2>/dev/null | awk '
    /^     [a-z_]/ && !/^      / {
      left = $0
      sub(/^ +/, "", left)
      sub(/  .*/, "", left)
      n = split(left, words, /( \/ |, )/)
      for (i = 1; i <= n; i++) {
        word = words[i]
        if (word ~ /[^a-z_=A-Z|]/) continue
        sub(/=.*/, "=", word)
        print word
      }
    }'
}

_densefs() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local prev=${COMP_WORDS[COMP_CWORD - 1]}
  # The densefs being completed (a build tree's, say), else the one on PATH.
  local densefs=${COMP_WORDS[0]}
  densefs=${densefs/#\~/$HOME}
  command -v -- "$densefs" >/dev/null 2>&1 || densefs=densefs
  COMPREPLY=()

  if [[ $COMP_CWORD -eq 1 ]]; then
    if [[ $cur == -* ]]; then
      mapfile -t COMPREPLY < <(compgen -W '--help --version' -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -W "$(_densefs_commands "$densefs")" -- "$cur")
    fi
    return 0
  fi

  local command=${COMP_WORDS[1]}
  if [[ $command == help ]]; then
    [[ $COMP_CWORD -eq 2 ]] &&
      mapfile -t COMPREPLY < <(compgen -W "$(_densefs_commands "$densefs")" -- "$cur")
    return 0
  fi

  local commands
  commands=$(_densefs_commands "$densefs")
  # -o VALUE of mount, and of the mount.fuse3 form `densefs STORE MNT -o`
  # (no command): mount options, completed after the last comma. (cat's -o
  # is a file.)
  if [[ $prev == -o && ($command == mount || $'\n'$commands$'\n' != *$'\n'$command$'\n'*) ]]; then
    local done_part="" word
    [[ $cur == *,* ]] && done_part=${cur%,*},
    compopt -o nospace 2>/dev/null
    while IFS= read -r word; do
      [[ $word == "${cur##*,}"* ]] && COMPREPLY+=("$done_part$word")
    done < <(_densefs_mount_options "$densefs")
    return 0
  fi

  # A command with subcommands (czip, codec, snapshot, key): the
  # subcommand comes first; its options are the ones to offer after it.
  local subcommands help_of=("$densefs" "$command")
  subcommands=$(_densefs_subcommands "$densefs" "$command")
  if [[ -n $subcommands ]]; then
    if [[ $COMP_CWORD -eq 2 && $cur != -* ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$subcommands" -- "$cur")
      return 0
    fi
    local word
    for word in $subcommands; do
      [[ ${COMP_WORDS[2]} == "$word" ]] && help_of+=("$word")
    done
  fi

  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_densefs_options "${help_of[@]}")" -- "$cur")
    return 0
  fi
  # Arguments are paths: stores, mount points, files, directories.
  compopt -o filenames 2>/dev/null
  mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  return 0
}

complete -F _densefs densefs
