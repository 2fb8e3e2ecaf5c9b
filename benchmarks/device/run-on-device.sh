#!/bin/bash
# The daemon's cost (benchmarks/daemon_cost.py, issue 52's load) on the device machine: 16 quiet CPUs, Python 3.12,
# no network, no Prometheus. Run from the repository root with the carry folder made by prepare-device.sh:
#
#   bash benchmarks/device/run-on-device.sh [daemon_cost.py's options...]      # carry: .devcarry-daemon
#
# It makes a venv (--system-site-packages: the machine's own Python and PyTorch), installs the runtime
# dependencies from the carried wheelhouse (the dev venv's versions, no index) and this checkout, then runs
# daemon_cost.py at 8 GPUs, 2 attached runs, benchmarks/scrape_loop.py scraping every second in place of
# Prometheus, the carried node_exporter measured beside, and the carried baseline checkout (the commit
# before the change) side by side: REPEAT runs (default 2) of WINDOW_S seconds (default 60). Everything
# it prints goes to $OUT (the device's result folder; ./daemon-cost-out without it).
set -euo pipefail
repo=$(pwd)
carry=${CARRY:-$repo/.devcarry-daemon}
out=${OUT:-$repo/daemon-cost-out}
mkdir -p "$out"
[ -d "$carry/wheels" ] || { echo "no wheelhouse at $carry/wheels: run benchmarks/device/prepare-device.sh and carry it" >&2; exit 2; }
venv=$(mktemp -d /tmp/gpuwatch-cost-venv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
if python3 -m venv --system-site-packages "$venv"; then
    pip=("$venv/bin/python" -m pip)
else  # a Python without ensurepip (Debian's without python3-venv): the venv bare, the system's pip installs into it
    python3 -m venv --clear --system-site-packages --without-pip "$venv"
    pip=(python3 -m pip --python "$venv/bin/python")
fi
# --ignore-installed: the wheelhouse's versions in the venv, whatever the system site-packages hold.
"${pip[@]}" install -q --no-index --find-links "$carry/wheels" --ignore-installed -r "$carry/wheels/requirements.txt"
"${pip[@]}" install -q --no-index --find-links "$carry/wheels" --no-deps "$repo"
{
    echo "date: $(date -u +%FT%TZ)"; echo "commit: $(cat "$carry/commit" 2>/dev/null || echo unknown)"
    echo "baseline: $(cat "$carry/baseline/COMMIT" 2>/dev/null || echo none)"
    echo "python: $("$venv/bin/python" -V 2>&1)"; echo "cpus: $(nproc)"; echo "loadavg: $(cat /proc/loadavg)"
    grep -m1 "model name" /proc/cpuinfo || true
    "${pip[@]}" list 2>/dev/null | grep -iE "^(pydantic|prometheus.client|psutil|pyyaml|bcrypt|tomli.w) " || true
} | tee "$out/machine.txt"
args=(--gpus 8 --attached 2 --scraper python --window-s "${WINDOW_S:-60}")
[ -x "$carry/node_exporter" ] && args+=(--node-exporter "$carry/node_exporter")
[ -d "$carry/baseline/gpuwatch" ] && args+=(--baseline "$carry/baseline")
status=0
for run in $(seq 1 "${REPEAT:-2}"); do
    echo "== run $run: daemon_cost.py ${args[*]} $*" | tee -a "$out/daemon_cost.txt"
    "$venv/bin/python" benchmarks/daemon_cost.py "${args[@]}" "$@" 2>&1 | tee -a "$out/daemon_cost.txt" || status=$?
    echo "loadavg after run $run: $(cat /proc/loadavg)" | tee -a "$out/daemon_cost.txt"
done
exit "$status"
