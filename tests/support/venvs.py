"""A user's own training venv as the tests make one, and the few torch steps their scripts run in it.

The venv (``python -m venv --without-pip``, from the test's interpreter or another, such as Debian's for a user who
cannot run one under root's home) sees torch through one ``.pth`` line naming the test environment's
site-packages folder: torch is importable, while the ``.pth`` files inside that folder (gpuwatch's editable install
among them) are not read, so it has no gpuwatch, as a user's own torch venv has none. ``activated`` is its
``source venv/bin/activate`` (its bin first on PATH: what `gpuwatch train -- python` takes)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# A script's training: a few SGD steps of a tiny model on the CPU (``STEPS`` of them, formatted in).
TORCH_STEPS = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range({steps}):
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
"""


def torch_steps(steps: int) -> str:
    return TORCH_STEPS.format(steps=steps)


def torch_site_packages() -> str:
    """The folder this test environment's torch is installed in (importing torch: call it from a torch test)."""
    import torch

    return os.path.dirname(os.path.dirname(torch.__file__))


def make_venv(where: Path, site_packages: str | None, python: str = sys.executable) -> Path:
    """A venv at ``where`` made by ``python``; it sees ``site_packages`` (torch_site_packages()) when given, else
    nothing but the standard library. Its interpreter's path."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    interpreter = where / "bin" / "python"
    if site_packages is not None:
        own = subprocess.run([str(interpreter), "-c", "import site; print(site.getsitepackages()[0])"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        Path(own, "torch-only.pth").write_text(site_packages + "\n")
    return interpreter


def activated(env: Mapping[str, str], python: str | Path) -> dict[str, str]:
    """``env`` as after ``source VENV/bin/activate`` for the venv of ``python``: its bin first on PATH."""
    return {**env, "PATH": f"{os.path.dirname(python)}{os.pathsep}{env.get('PATH', os.defpath)}"}
