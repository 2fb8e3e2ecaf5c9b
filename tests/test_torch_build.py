"""Which PyTorch build `make` installs (scripts/torch-build.sh, the Makefile's TORCH_BUILD): PyTorch's ROCm
build where an amdgpu GPU is, found in fake sysfs trees laid out from real captures; elsewhere what pip
finds (the CPU wheel of pip's find-links here and on CI); an explicit TORCH_INDEX_URL always wins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.paths import REPO
from tests.support.trees import capture

ROCM = "https://download.pytorch.org/whl/rocm7.1"


def build(root: Path) -> str:
    done = subprocess.run([str(REPO / "scripts/torch-build.sh"), str(root)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


def planned(*args: str) -> list[str]:
    """The commands `make` would run to make .venv (make -n), with these variables."""
    done = subprocess.run(["make", "-n", "-B", ".venv/.installed", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize(("cards", "loaded", "expected"), [
    ([], False, "default"),  # no GPU at all (CI, this machine)
    (["navi21-rx6900xt-sapphire-nitro"], False, "rocm"),  # a discrete card bound to amdgpu
    (["apu-phoenix-lenovo"], False, "rocm"),  # an APU's graphics: amdgpu too
    (["radeon-driver-pitcairn-hd7870"], False, "default"),  # the old radeon driver: no ROCm there
    (["radeon-driver-pitcairn-hd7870", "navi10-rx5700xt-sapphire"], False, "rocm"),  # the second card is amdgpu's
    ([], True, "rocm"),  # the module is loaded (its card not bound yet, or hidden from DRM)
])
def test_the_build_follows_the_amdgpu_driver(tmp_path: Path, cards: list[str], loaded: bool, expected: str) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    for index, name in enumerate(cards):
        tree.add_capture(capture(name), card=f"card{index}", pci_slot=f"0000:{0x10 + index:02x}:00.0")
    if cards:
        tree.add_connector("card0", "card0-DP-1")  # a connector's DRM entry: no device driver of its own
    if loaded:
        (tmp_path / "sys/module/amdgpu/parameters").mkdir(parents=True)
    assert build(tmp_path / "sys") == expected


def test_a_missing_sysfs_is_no_amdgpu(tmp_path: Path) -> None:
    assert build(tmp_path / "nothing-here") == "default"


def test_make_installs_the_rocm_build_on_an_amdgpu_machine_and_says_so(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"))
    steps = planned(f"TORCH_SYSFS_ROOT={tmp_path / 'sys'}")
    rocm = [line for line in steps if "--index-url" in line]
    assert rocm == [f".venv/bin/python -m pip install -q 'torch==2.13.0' --index-url '{ROCM}'"]
    # Before the package and its extras, which then find torch installed; the choice is said out loud.
    assert steps.index(rocm[0]) < next(i for i, line in enumerate(steps) if ".[test,train]" in line)
    said = " ".join(line for line in steps if line.startswith("echo"))
    assert "ROCm build" in said and "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in said
    # Another ROCm release, the CPU build instead, or PyPI's default: each a variable away.
    assert any(f"--index-url '{ROCM[:-3]}6.4'" in line
               for line in planned(f"TORCH_SYSFS_ROOT={tmp_path / 'sys'}", "TORCH_ROCM=rocm6.4"))
    cpu = planned(f"TORCH_SYSFS_ROOT={tmp_path / 'sys'}", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu")
    assert not any("--index-url" in line or "ROCm" in line for line in cpu)
    assert any(line.endswith("--extra-index-url 'https://download.pytorch.org/whl/cpu'") for line in cpu)
    default = planned(f"TORCH_SYSFS_ROOT={tmp_path / 'sys'}", "TORCH_BUILD=default")
    assert not any("--index-url" in line or "ROCm" in line for line in default)


def test_without_amdgpu_make_keeps_what_pip_finds(tmp_path: Path) -> None:
    """CI and the developers' machines: torch==2.13.0 from pip's find-links (its CPU wheel), as before."""
    (tmp_path / "sys/class/drm").mkdir(parents=True)
    steps = planned(f"TORCH_SYSFS_ROOT={tmp_path / 'sys'}")
    assert not any("--index-url" in line or "ROCm" in line for line in steps)
    assert ".venv/bin/python -m pip install -q -e '.[test,train]' 'torch==2.13.0'" in [s.rstrip() for s in steps]
    if not os.path.isdir("/sys/module/amdgpu"):
        assert not any("--index-url" in line for line in planned())  # this machine's own /sys
