#!/usr/bin/env bash
# Installs the Debian packages the tests use for real, when they are missing (needs root or sudo):
# prometheus (promtool), prometheus-node-exporter, prometheus-alertmanager (amtool), systemd-analyze.
#
# None of their services may start: prometheus, prometheus-node-exporter and prometheus-alertmanager
# each ship an init script and a systemd unit, and their postinst starts them (`invoke-rc.d NAME
# start`, or `deb-systemd-invoke start` on a systemd host), listening on every interface (Alertmanager
# on *:9093 and its gossip on *:9094) and outliving the test run; the tests start their own on
# 127.0.0.1. Both honour /usr/sbin/policy-rc.d, exit code 101 = "not allowed": one is put in place
# for the install when the machine has none, and removed afterwards.
set -euo pipefail
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ -x /usr/bin/prometheus-node-exporter ] || missing+=(prometheus-node-exporter)
# Debian names the binary prometheus-alertmanager, upstream alertmanager (the tests take either).
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
  || missing+=(prometheus-alertmanager)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "make test needs these Debian packages, and installing them needs root: ${missing[*]}" >&2
    echo "  as root: apt-get install --no-install-recommends ${missing[*]}" >&2
    echo "  (or run make test as root, or where sudo is available; then run make test again)" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# gpuwatch scripts/install-system-deps.sh: start no service while installing\nexit 101\n' \
    | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
