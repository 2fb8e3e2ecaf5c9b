#!/bin/sh
# Which PyTorch build `make` puts in .venv on this machine (the Makefile's TORCH_BUILD):
#   rocm     an amdgpu GPU is here: the amdgpu kernel module is loaded (/sys/module/amdgpu), or a DRM card's
#            PCI device is bound to it (/sys/class/drm/card*/device/driver -> .../drivers/amdgpu; a card of
#            the older radeon driver does not count, ROCm does not run on it). An APU's integrated graphics
#            count too: amdgpu drives them.
#   default  anything else: what pip finds for TORCH_SPEC (PyPI's CUDA build, or a CPU wheel pip's
#            find-links offers, as on CI).
#     scripts/torch-build.sh [SYSFS_ROOT]    (default /sys; the tests pass a fake tree)
root="${1:-/sys}"
if [ -d "$root/module/amdgpu" ]; then
  echo rocm
  exit 0
fi
for driver in "$root"/class/drm/card*/device/driver; do
  [ -L "$driver" ] || continue
  if [ "$(basename "$(readlink "$driver")")" = amdgpu ]; then
    echo rocm
    exit 0
  fi
done
echo default
