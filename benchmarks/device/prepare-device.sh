#!/bin/bash
# Makes the carry folder run-on-device.sh needs (.devcarry-daemon/, git-ignored through .git/info/exclude): a
# wheelhouse of the runtime dependencies for CPython 3.12 manylinux x86_64 at the versions of this machine's dev
# venv, setuptools to build the checkout, the node_exporter binary, and the baseline checkout's package.
#
#   benchmarks/device/prepare-device.sh [BASELINE_COMMIT]      # default: main
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
carry=$repo/.devcarry-daemon
baseline=${1:-main}
rm -rf "$carry"
mkdir -p "$carry/wheels" "$carry/baseline"
pins=$("$repo/.venv/bin/pip" list --format=freeze 2>/dev/null |
    grep -iE "^(pydantic|pydantic.core|prometheus.client|psutil|tomli.w|pyyaml|bcrypt|annotated.types|typing.extensions|typing.inspection)==")
echo "$pins" > "$carry/wheels/requirements.txt"
"$repo/.venv/bin/pip" download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any -d "$carry/wheels" -r "$carry/wheels/requirements.txt" \
    "setuptools>=77"
cp "$(command -v prometheus-node-exporter || command -v node_exporter)" "$carry/node_exporter"
git -C "$repo" archive "$baseline" gpuwatch | tar -x -C "$carry/baseline"
git -C "$repo" rev-parse --short "$baseline" > "$carry/baseline/COMMIT"
git -C "$repo" rev-parse --short HEAD > "$carry/commit"
cp "$repo/benchmarks/device/run-on-device.sh" "$carry/run-on-device.sh"
du -sh "$carry"
