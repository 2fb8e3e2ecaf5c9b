"""``gpuwatch train`` leaves a seeded script's random streams alone: the same losses, bit for bit (issue 32).

The default ``--conv2d-fallback auto`` probes the native convolution at the script's first
convolution, inside the script's process; that probe once drew from the global generator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import GPUWATCH

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SEEDED = """
import random, sys
import numpy
import torch
from torch import nn

torch.manual_seed(0)
random.seed(0)
numpy.random.seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Dropout(0.5), nn.Linear(256, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
lines = []
for step in range(10):
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 4, (8,))  # drawn after the first convolution's probe
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    lines.append(f"{loss.item().hex()} {random.random().hex()} {float(numpy.random.rand()).hex()}")
with open(sys.argv[1], "w") as handle:
    handle.write("\\n".join(lines))
"""


@pytest.mark.timeout(240)
def test_seeded_losses_are_the_same_bit_for_bit_under_gpuwatch_train(tmp_path: Path) -> None:
    script = tmp_path / "seeded.py"
    script.write_text(SEEDED)
    plain, hooked = tmp_path / "plain.txt", tmp_path / "hooked.txt"
    subprocess.run([sys.executable, str(script), str(plain)], check=True, timeout=120)
    run = subprocess.run([GPUWATCH, "train", "--", "python", str(script), str(hooked)], capture_output=True,
                         text=True, timeout=120, env=_env(tmp_path))
    assert run.returncode == 0, run.stderr
    assert hooked.read_text().splitlines() == plain.read_text().splitlines()


def _env(tmp_path: Path) -> dict[str, str]:
    # The autotuner's cache goes to this test's folder, not the user's; the pause file exists nowhere.
    # `python` is the caller's PATH's (issue 50): this venv's bin first, as when it is activated.
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    return dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), GPUWATCH_PAUSE_FILE=str(tmp_path / "pause"),
                PATH=path)
