#!/usr/bin/env bash
# Removes what scripts/install.sh installed: stops and disables the service (the unit's ExecStopPost
# gives the fans back), removes the unit and the venv. The config in $SYSCONFDIR/gpuwatch is kept
# unless PURGE=1. Same variables as install.sh (PREFIX, SYSCONFDIR, UNITDIR, DESTDIR, SYSTEMCTL, DATADIR,
# ZSH_COMPLETIONDIR); the shell completion goes too.
set -euo pipefail
PREFIX="${PREFIX:-/opt/gpuwatch}"
SYSCONFDIR="${SYSCONFDIR:-/etc}"
UNITDIR="${UNITDIR:-/etc/systemd/system}"
DESTDIR="${DESTDIR:-}"
SYSTEMCTL="${SYSTEMCTL:-systemctl}"
PURGE="${PURGE:-0}"
DATADIR="${DATADIR:-/usr/share}"
ZSH_COMPLETIONDIR="${ZSH_COMPLETIONDIR:-$DATADIR/zsh/vendor-completions}"

unit="$DESTDIR$UNITDIR/gpuwatch.service"
if [ -z "$DESTDIR" ] && [ -e "$unit" ]; then
  # A failure here (not loaded, not running) must not stop the removal.
  "$SYSTEMCTL" disable --now gpuwatch.service || echo "systemctl disable --now gpuwatch failed; removing anyway" >&2
fi
rm -f "$unit"
rm -rf "$DESTDIR$UNITDIR/gpuwatch.service.d"
rm -f "$DESTDIR$DATADIR/bash-completion/completions/gpuwatch" "$DESTDIR$ZSH_COMPLETIONDIR/_gpuwatch" \
  "$DESTDIR$DATADIR/fish/vendor_completions.d/gpuwatch.fish"
if [ -x "$DESTDIR$PREFIX/bin/python" ] && [ -e "$DESTDIR$PREFIX/pyvenv.cfg" ]; then
  rm -rf "$DESTDIR$PREFIX"
else
  echo "$DESTDIR$PREFIX is not a gpuwatch venv: left alone" >&2
fi
if [ "$PURGE" = 1 ]; then
  rm -rf "$DESTDIR$SYSCONFDIR/gpuwatch"
else
  echo "kept $DESTDIR$SYSCONFDIR/gpuwatch (PURGE=1 removes it)"
fi
if [ -z "$DESTDIR" ]; then
  "$SYSTEMCTL" daemon-reload
fi
echo "gpuwatch uninstalled"
