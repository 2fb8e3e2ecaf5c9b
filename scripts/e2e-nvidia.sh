#!/usr/bin/env bash
# End-to-end check on a machine with an NVIDIA GPU (docs/nvidia.md): `gpuwatch run` with the NVML
# backend supervises the YOLOv8n-shaped benchmark training under the launcher (conv2d fallback on),
# with a pause limit a few °C above the idle temperature; prints a timeline and writes
# OUT_DIR/{timeline.md,timeline.csv,summary.json,status-*.txt,metrics.txt,daemon.log}.
# Exit 0 when the trainer paused over the limit, temperature and power fell, and it resumed below it.
#
# Usage: scripts/e2e-nvidia.sh [OUT_DIR] [options of benchmarks/e2e_nvidia.py, e.g. --margin-c 5]
# Needs: python3 with torch, nvidia-ml-py and gpuwatch's deps (pip install -e '.[nvidia,train]').
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-e2e-nvidia-out}
shift || true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" -c 'import torch, pynvml, pydantic, prometheus_client, psutil, tomli_w, gpuwatch' \
  || { echo "e2e-nvidia: missing packages: pip install -e '.[nvidia,train]'" >&2; exit 2; }
"$PY" -c 'import pynvml; pynvml.nvmlInit(); print("NVIDIA GPUs:", pynvml.nvmlDeviceGetCount())' \
  || { echo "e2e-nvidia: NVML cannot be initialised (no NVIDIA driver/GPU?)" >&2; exit 2; }
exec "$PY" benchmarks/e2e_nvidia.py --out "$OUT" "$@"
