#!/usr/bin/env bash
# The `systemctl` of the machines of production_setup_test.sh, which runs
# docs/production.md where systemd is not PID 1 (no systemd runs on the
# project's machines). It does what systemd does with the page's mount
# units, nothing else:
#
#   systemctl daemon-reload        every unit file in /etc/systemd/system
#                                  that is a regular file passes
#                                  `systemd-analyze verify`
#   systemctl enable --now X.mount the unit's name is its Where= escaped
#                                  (systemd refuses it otherwise), its
#                                  [Install] WantedBy= gets the link enable
#                                  makes, Where= is made, and
#                                  `mount -t Type -o Options What Where`
#                                  runs as systemd runs mount(8): an empty
#                                  environment but systemd's PATH and the
#                                  unit's EnvironmentFile=
#   systemctl stop X.mount         umount Where
#   systemctl is-active X.mount    "active" when Where is mounted
# Anything else fails, naming itself.
set -euo pipefail
units=/etc/systemd/system
systemd_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() {
  echo "systemctl (stand-in of production_setup_test.sh): $*" >&2
  exit 1
}

# unit_value FILE SECTION KEY: the last KEY= of SECTION (systemd's rule for
# single-valued settings).
unit_value() {
  awk -v section="[$2]" -v key="$3" '
    /^\[/ { in_section = ($0 == section); next }
    in_section && index($0, key "=") == 1 { value = substr($0, length(key) + 2) }
    END { print value }' "$1"
}

mount_unit() {
  local name=$1 file
  file=$units/$name
  [[ $name == *.mount ]] || die "$name: only .mount units are known here"
  [[ -f $file ]] || die "Unit $name does not exist (no $file)"
  what=$(unit_value "$file" Mount What)
  where=$(unit_value "$file" Mount Where)
  type=$(unit_value "$file" Mount Type)
  options=$(unit_value "$file" Mount Options)
  environment_file=$(unit_value "$file" Mount EnvironmentFile)
  wanted_by=$(unit_value "$file" Install WantedBy)
  [[ -n $what && -n $where ]] || die "$name has no What= or Where="
  [[ $(systemd-escape --path --suffix=mount "$where") == "$name" ]] ||
    die "$name: a mount unit is named after its Where= ($(systemd-escape --path --suffix=mount "$where"))"
}

case ${1:-} in
  daemon-reload)
    shopt -s nullglob
    for file in "$units"/*; do
      [[ -f $file && ! -L $file ]] || continue
      systemd-analyze verify --man=no "$file" || die "$file does not pass systemd-analyze verify"
    done
    ;;
  enable)
    [[ ${2:-} == --now && -n ${3:-} ]] || die "only 'enable --now UNIT' is known here"
    mount_unit "$3"
    [[ -n $wanted_by ]] || die "$3 has no [Install] WantedBy=: enable would do nothing"
    mkdir -p "$units/$wanted_by.wants"
    ln -sf "$units/$3" "$units/$wanted_by.wants/$3"
    environment=(PATH="$systemd_path")
    if [[ -n $environment_file ]]; then
      # systemd reads KEY=VALUE lines; '#' and ';' begin comments.
      while IFS= read -r line || [[ -n $line ]]; do
        [[ -z $line || $line == \#* || $line == \;* ]] && continue
        environment+=("$line")
      done <"${environment_file#-}"
    fi
    mkdir -p "$where"
    env -i "${environment[@]}" /bin/mount -t "${type:-auto}" ${options:+-o "$options"} "$what" "$where" ||
      die "mount of $3 failed"
    echo "Created symlink $units/$wanted_by.wants/$3 -> $units/$3."
    ;;
  stop)
    mount_unit "${2:?usage: systemctl stop UNIT}"
    umount "$where"
    ;;
  is-active)
    mount_unit "${2:?usage: systemctl is-active UNIT}"
    if mountpoint -q "$where"; then echo active; else
      echo inactive
      exit 3
    fi
    ;;
  *)
    die "'$*' is not known here"
    ;;
esac
