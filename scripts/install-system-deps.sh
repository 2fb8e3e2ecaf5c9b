#!/usr/bin/env bash
# Installs the Debian packages the tests use for real, when they are missing (needs root or sudo):
# prometheus (promtool), prometheus-node-exporter, prometheus-alertmanager (amtool), systemd-analyze, g++,
# zsh and fish (their shells check gpuwatch's completion scripts), chromium (the live page's browser test), and for the container tests (tests/e2e/systemd) mmdebstrap and systemd-container (systemd-nspawn),
# and for the real Slurm of tests/cluster (root only) slurm-wlm (slurmctld, slurmd, scontrol) and munge.
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
# The TLS tests make their CA and certificates with the openssl command line (tests/support/certs.py).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The conv2d fallback's compiled host code (gpuwatch/train/conv2d/host.py) is built with the C++ compiler.
command -v c++ >/dev/null 2>&1 || missing+=(g++)
# tests/cli/test_completion.py checks the zsh script with zsh and drives the fish one with fish (bash is here).
command -v zsh >/dev/null 2>&1 || missing+=(zsh)
command -v fish >/dev/null 2>&1 || missing+=(fish)
# tests/e2e/test_page.py loads the live page in Debian's headless Chromium (driven by Playwright).
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
# The container tests run as root only (nspawn, cgroups, mounts): elsewhere they skip, needing neither.
if [ "$(id -u)" -eq 0 ]; then
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
  # tests/cluster/test_slurm_e2e.py starts its own munged, slurmctld and slurmd (tests/support/slurm.py);
  # their postinst would start the services: the policy-rc.d below forbids it, as for Prometheus.
  command -v slurmd >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
  command -v munged >/dev/null 2>&1 || missing+=(munge)
fi
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
export DEBIAN_FRONTEND=noninteractive
# Other engineers' or CI jobs' apt-get may hold the lock: wait for it instead of failing.
apt=($sudo apt-get -o DPkg::Lock::Timeout=600)
"${apt[@]}" update -qq

# systemd-container depends on systemd (= its own version): a plain install takes the newest one and
# upgrades the host's systemd, libsystemd0 and udev with it. Pin it to the installed systemd; if the
# archive no longer has that version, leave it out (the container tests then skip and say why).
installed_systemd="$(dpkg-query -W -f='${Version}' systemd 2>/dev/null || true)"
for i in "${!missing[@]}"; do
  if [ "${missing[$i]}" = systemd-container ] && [ -n "$installed_systemd" ]; then
    if apt-cache madison systemd-container | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -xF "$installed_systemd" >/dev/null; then
      missing[$i]="systemd-container=$installed_systemd"
    else
      echo "systemd-container $installed_systemd is not in the archive: not installing it (it would upgrade systemd)" >&2
      unset 'missing[i]'
    fi
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${missing[*]}"
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# gpuwatch scripts/install-system-deps.sh: start no service while installing\nexit 101\n' \
    | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
