# Sourced by scripts/install.sh and scripts/uninstall.sh: `systemctl_or_note ARGS...` runs "$SYSTEMCTL" ARGS.
# Where systemd is not PID 1 (an image build, a chroot, a container, a rescue shell) systemctl can only fail
# ("System has not been booted with systemd as init system"); what it was asked to do then has no object (no
# manager to reload or stop), so the step is skipped with one line and the script goes on, as Debian's
# maintainer scripts do (debhelper's `if [ -d /run/systemd/system ]`; sd_booted(3) is the same test). Where
# systemd runs, a failure is reported as systemctl's own and is the caller's to handle.
systemctl_or_note() {
  local said
  if said="$("$SYSTEMCTL" "$@" 2>&1)"; then
    [ -z "$said" ] || printf '%s\n' "$said"
    return 0
  fi
  if [ ! -d /run/systemd/system ]; then
    echo "note: systemd is not running here (no /run/systemd/system): skipped \`systemctl $*\`" >&2
    return 0
  fi
  printf '%s\n' "$said" >&2
  return 1
}
