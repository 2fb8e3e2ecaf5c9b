#!/usr/bin/env bash
# Removes what scripts/install.sh installed: stops and disables the service (the unit's ExecStopPost
# gives the fans back), removes the unit and the venv. The config in $SYSCONFDIR/gpuwatch is kept
# unless PURGE=1. Same variables as install.sh (PREFIX, SYSCONFDIR, UNITDIR, DESTDIR, SYSTEMCTL, DATADIR,
# ZSH_COMPLETIONDIR, BINDIR); the shell completion and the `gpuwatch` link go too. Where systemd is not PID 1
# the systemctl steps are skipped with a note (scripts/systemctl-or-note.sh).
set -euo pipefail
# shellcheck source=scripts/systemctl-or-note.sh
. "$(dirname "$0")/systemctl-or-note.sh"
PREFIX="${PREFIX:-/opt/gpuwatch}"
SYSCONFDIR="${SYSCONFDIR:-/etc}"
UNITDIR="${UNITDIR:-/etc/systemd/system}"
DESTDIR="${DESTDIR:-}"
SYSTEMCTL="${SYSTEMCTL:-systemctl}"
PURGE="${PURGE:-0}"
DATADIR="${DATADIR:-/usr/share}"
ZSH_COMPLETIONDIR="${ZSH_COMPLETIONDIR:-$DATADIR/zsh/vendor-completions}"
BINDIR="${BINDIR-/usr/local/bin}"

unit="$DESTDIR$UNITDIR/gpuwatch.service"
if [ -z "$DESTDIR" ] && [ -e "$unit" ]; then
  # A failure here (not loaded, not running) must not stop the removal.
  systemctl_or_note disable --now gpuwatch.service || echo "systemctl disable --now gpuwatch failed; removing anyway" >&2
fi
rm -f "$unit"
rm -rf "$DESTDIR$UNITDIR/gpuwatch.service.d"
for completion in "$DATADIR/bash-completion/completions/gpuwatch" "$ZSH_COMPLETIONDIR/_gpuwatch" \
  "$DATADIR/fish/vendor_completions.d/gpuwatch.fish"; do
  rm -f "$DESTDIR$completion"
  # install -D made the shell's folders where this system had none: remove them (the folder and the
  # shell's own one above it, never $DATADIR) when nothing else is in them; rmdir leaves a non-empty one.
  folder="$(dirname "$DESTDIR$completion")"
  rmdir "$folder" 2>/dev/null && rmdir "$(dirname "$folder")" 2>/dev/null || true
done
if [ -n "$BINDIR" ] && [ -L "$DESTDIR$BINDIR/gpuwatch" ] \
  && [ "$(readlink "$DESTDIR$BINDIR/gpuwatch")" = "$PREFIX/bin/gpuwatch" ]; then
  rm -f "$DESTDIR$BINDIR/gpuwatch"  # only install.sh's own link, never another gpuwatch
fi
if [ -x "$DESTDIR$PREFIX/bin/python" ] && [ -e "$DESTDIR$PREFIX/pyvenv.cfg" ]; then
  rm -rf "$DESTDIR$PREFIX"
elif [ -e "$DESTDIR$PREFIX" ]; then
  echo "$DESTDIR$PREFIX is not a gpuwatch venv: left alone" >&2
fi
if [ "$PURGE" = 1 ]; then
  rm -rf "$DESTDIR$SYSCONFDIR/gpuwatch"
else
  echo "kept $DESTDIR$SYSCONFDIR/gpuwatch (PURGE=1 removes it)"
fi
if [ -z "$DESTDIR" ]; then
  systemctl_or_note daemon-reload
fi
echo "gpuwatch uninstalled"
