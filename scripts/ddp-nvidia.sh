#!/usr/bin/env bash
# The job-wide pause on a machine with an NVIDIA GPU and NCCL (docs/nvidia.md, "A DDP job on NCCL"):
# benchmarks/ddp_nvidia.py measures the agreement's cost per step next to a YOLOv8n-shaped DDP step, then
# lets `gpuwatch run` (NVML backend, every GPU) supervise `gpuwatch train -- torchrun ...` (one rank per
# GPU) and pauses it: one hold twice the job's NCCL timeout, then 50 at random moments, while sampling NVML
# on every GPU; coherence is judged from the ranks' own step logs. Writes OUT_DIR/{summary.json,
# pauses.jsonl,agree.json,agree.log,timeline.csv,steps.rank*.tsv,daemon.log,status-training.txt}.
#
# Usage: scripts/ddp-nvidia.sh [OUT_DIR] [options of benchmarks/ddp_nvidia.py, e.g. --nproc 1]
# Needs python3 with torch (CUDA), nvidia-ml-py and gpuwatch's dependencies. Wheels in .whl/ beside
# gpuwatch/ are installed into /tmp/site first (a machine without a package index).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-ddp-nvidia-out}
shift || true
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
NVML=pynvml; [[ " $* " == *" --dry-run "* ]] && NVML=json  # a dry run needs no GPU
python3 -c "import torch, $NVML, pydantic, prometheus_client, psutil, tomli_w, gpuwatch" \
  || { echo "ddp-nvidia: missing packages (pip install -e '.[nvidia,train]', or wheels in .whl/)" >&2; exit 2; }
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
exec python3 benchmarks/ddp_nvidia.py --out "$OUT" "$@"
