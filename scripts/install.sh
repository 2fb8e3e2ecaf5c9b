#!/usr/bin/env bash
# Installs gpuwatch as a systemd service: a venv under $PREFIX, the unit, the example config (only if
# none exists), a `gpuwatch` link on every user's PATH, then `systemctl daemon-reload` (skipped with a note
# where systemd is not PID 1: image builds, chroots, containers). Does not enable or start anything; it prints how.
#
#   PREFIX=/opt/gpuwatch        the venv (bin/gpuwatch); the unit is rewritten to point here
#   SYSCONFDIR=/etc             config goes to $SYSCONFDIR/gpuwatch/gpuwatch.toml
#   UNITDIR=/etc/systemd/system where gpuwatch.service goes (admin-installed units live in /etc)
#   DESTDIR=                    staging root for packaging: the unit, config and docs land under $DESTDIR,
#                               paths inside them name the final location, and systemctl is not run.
#                               Needs WITH_VENV=0: a venv cannot be staged (see below)
#   BINDIR=/usr/local/bin       where the `gpuwatch` link to $PREFIX/bin/gpuwatch goes (on every user's PATH;
#                               uninstall.sh removes it); empty: no link. A file there that is not such a
#                               link is left alone, with a note
#   SYSTEMCTL=systemctl         `true` in tests, so the real system is never touched
#   PYTHON=python3              interpreter for the venv (3.11+)
#   PIP_INSTALL_ARGS=           extra pip arguments (an offline wheelhouse: --no-index --find-links DIR)
#   WITH_VENV=1                 0: only refresh the unit, config and docs; keep the venv at $PREFIX as is
#   DATADIR=/usr/share          shell completion goes to $DATADIR/bash-completion/completions/gpuwatch,
#                               $DATADIR/zsh/vendor-completions/_gpuwatch (ZSH_COMPLETIONDIR overrides the
#                               folder: site-functions on distributions other than Debian's) and
#                               $DATADIR/fish/vendor_completions.d/gpuwatch.fish; COMPLETION=0 skips it
set -euo pipefail
# shellcheck source=scripts/systemctl-or-note.sh
. "$(dirname "$0")/systemctl-or-note.sh"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${PREFIX:-/opt/gpuwatch}"
SYSCONFDIR="${SYSCONFDIR:-/etc}"
UNITDIR="${UNITDIR:-/etc/systemd/system}"
DESTDIR="${DESTDIR:-}"
SYSTEMCTL="${SYSTEMCTL:-systemctl}"
PYTHON="${PYTHON:-python3}"
WITH_VENV="${WITH_VENV:-1}"
DATADIR="${DATADIR:-/usr/share}"
ZSH_COMPLETIONDIR="${ZSH_COMPLETIONDIR:-$DATADIR/zsh/vendor-completions}"
COMPLETION="${COMPLETION:-1}"
BINDIR="${BINDIR-/usr/local/bin}"
read -r -a pip_args <<<"${PIP_INSTALL_ARGS:-}"

if [ -n "$DESTDIR" ] && [ "$WITH_VENV" = 1 ]; then
  # A venv records where it was made and the interpreter it was made with (bin/python links to it,
  # pyvenv.cfg names it): staged under DESTDIR it would point at this build tree and this host's
  # Python. Refuse rather than stage something that breaks once installed.
  cat >&2 <<MSG
install.sh: DESTDIR stages the unit, config and docs only; add WITH_VENV=0.
  A venv cannot be staged: it names the place it was made and this host's interpreter.
  Package the Python side at its final place instead, either
    - a venv built at $PREFIX in the package's build root or chroot (dh-virtualenv does this):
        python3 -m venv $PREFIX && $PREFIX/bin/pip install .
    - or the distribution's Python: pip install --root "\$DESTDIR" --prefix /usr . (then PREFIX=/usr here)
  then: make install DESTDIR=$DESTDIR PREFIX=$PREFIX WITH_VENV=0
MSG
  exit 2
fi

venv="$DESTDIR$PREFIX"
confdir="$DESTDIR$SYSCONFDIR/gpuwatch"
unitdir="$DESTDIR$UNITDIR"

if [ "$WITH_VENV" = 1 ]; then
  echo "installing gpuwatch into $venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "${pip_args[@]}" "$SRC"
fi

install -d -m 0755 "$venv/share/doc/gpuwatch"
install -m 0644 "$SRC/docs/systemd.md" "$venv/share/doc/gpuwatch/systemd.md"

if [ "$COMPLETION" = 1 ]; then
  # The scripts the package ships (gpuwatch/cli/completions, generated from the parser; `gpuwatch completion
  # SHELL` prints the same), where each shell's completion loader looks for a command's script.
  comp="$SRC/gpuwatch/cli/completions"
  install -D -m 0644 "$comp/gpuwatch.bash" "$DESTDIR$DATADIR/bash-completion/completions/gpuwatch"
  install -D -m 0644 "$comp/_gpuwatch" "$DESTDIR$ZSH_COMPLETIONDIR/_gpuwatch"
  install -D -m 0644 "$comp/gpuwatch.fish" "$DESTDIR$DATADIR/fish/vendor_completions.d/gpuwatch.fish"
  echo "shell completion: $DESTDIR$DATADIR/bash-completion/completions/gpuwatch, $DESTDIR$ZSH_COMPLETIONDIR/_gpuwatch," \
    "$DESTDIR$DATADIR/fish/vendor_completions.d/gpuwatch.fish"
fi

cli="$PREFIX/bin/gpuwatch"  # how the hints below name the command: `gpuwatch` once it is on PATH
if [ -n "$BINDIR" ] && [ "$BINDIR" != "$PREFIX/bin" ]; then
  # A link, not a copy or a wrapper: the entry point's #! names the venv's python, so the venv is what runs
  # whoever types `gpuwatch`; uninstall.sh removes exactly this link.
  link="$DESTDIR$BINDIR/gpuwatch"
  if [ -e "$link" ] && ! [ -L "$link" ]; then
    echo "note: $link exists and is not a link: left alone (run $PREFIX/bin/gpuwatch, or remove it and install again)" >&2
  else
    install -d -m 0755 "$DESTDIR$BINDIR"
    ln -sfn "$PREFIX/bin/gpuwatch" "$link"
    echo "command: $link -> $PREFIX/bin/gpuwatch"
    cli=gpuwatch
  fi
fi

install -d -m 0755 "$unitdir"
sed -e "s#/opt/gpuwatch#$PREFIX#g" -e "s#/etc/gpuwatch/#$SYSCONFDIR/gpuwatch/#g" \
  "$SRC/systemd/gpuwatch.service" >"$unitdir/gpuwatch.service.tmp"
chmod 0644 "$unitdir/gpuwatch.service.tmp"
mv "$unitdir/gpuwatch.service.tmp" "$unitdir/gpuwatch.service"
echo "unit: $unitdir/gpuwatch.service"

install -d -m 0755 "$confdir"
if [ -e "$confdir/gpuwatch.toml" ]; then
  echo "config: $confdir/gpuwatch.toml exists, left as is (example: $SRC/config/gpuwatch.toml)"
else
  install -m 0644 "$SRC/config/gpuwatch.toml" "$confdir/gpuwatch.toml"
  echo "config: $confdir/gpuwatch.toml (from the example; edit it, then: $cli check-config)"
fi

if [ -z "$DESTDIR" ]; then
  systemctl_or_note daemon-reload
fi
echo
echo "done. Start it now and at every boot with:"
echo "  systemctl enable --now gpuwatch"
