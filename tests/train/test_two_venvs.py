"""``gpuwatch train`` with another virtualenv's interpreter, one that has torch and no gpuwatch (issue 32).

The setup docs/training-patches.md promises: gpuwatch in its own environment, the training in a venv
of its own. The training venv here (tests/support/venvs.py) sees the test environment's torch through a
``.pth`` line naming its site-packages folder; the ``.pth`` files inside that folder (gpuwatch's editable install
among them) are not processed for such a line, so gpuwatch is not importable there. ``gpuwatch`` itself
runs from this checkout without PYTHONPATH, which the training interpreter would inherit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.heartbeat import read_heartbeat, read_rank_heartbeats
from tests.support.paths import REPO
from tests.support.venvs import make_venv, torch_site_packages, torch_steps

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SCRIPT = "import json, os, sys\n" + torch_steps(3) + """
gpuwatch = sys.modules.get("gpuwatch")
with open(sys.argv[1], "w") as handle:
    json.dump({"gpuwatch": getattr(gpuwatch, "__file__", None), "conv": torch.nn.Conv2d._conv_forward.__name__,
               "path0": sys.path[0]}, handle)
"""
# `gpuwatch ARGS` from this checkout, with no PYTHONPATH for the processes it starts to inherit.
CLI = f"import runpy, sys; sys.path.insert(0, {str(REPO)!r}); sys.argv[0] = 'gpuwatch'; " \
      "runpy.run_module('gpuwatch.cli', run_name='__main__')"


def env_without_pythonpath(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GPUWATCH_")}
    return env | {"XDG_CACHE_HOME": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}


def gpuwatch_train(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, "train", "--heartbeat-file", str(tmp_path / "hb.json"), "--",
                           *command], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env=env_without_pythonpath(tmp_path))


@pytest.fixture(scope="module")
def train_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = make_venv(tmp_path_factory.mktemp("train-venv") / "venv", torch_site_packages())
    found = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('torch') is not None, u.find_spec('gpuwatch') is not None)"],
                           capture_output=True, text=True, timeout=60, cwd="/",
                           env=env_without_pythonpath(Path("/tmp")))
    assert found.stdout.split() == ["True", "False"], found  # the setup: torch, and no gpuwatch
    return python


@pytest.mark.timeout(300)
def test_another_venvs_python_running_a_script(tmp_path: Path, train_python: Path) -> None:
    script, out = tmp_path / "train.py", tmp_path / "out.json"
    script.write_text(SCRIPT)
    done = gpuwatch_train(tmp_path, str(train_python), str(script), str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["gpuwatch"] == str(REPO / "gpuwatch" / "__init__.py")  # this gpuwatch, loaded by its path
    assert result["path0"] == str(tmp_path) and result["conv"] == "_patched_conv_forward"  # auto: the hook
    beat = read_heartbeat(tmp_path / "hb.json")
    assert beat is not None and beat.steps_total == 3


@pytest.mark.timeout(300)
def test_another_venvs_python_running_torch_distributed_run(tmp_path: Path, train_python: Path) -> None:
    script, out = tmp_path / "train.py", tmp_path / "out.json"
    # A well-formed DDP script destroys its group: a gloo group left to the interpreter's exit can abort the
    # rank ("terminate called without an active exception", pytorch/pytorch#190489), seen once here.
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n" + SCRIPT
                      + "dist.destroy_process_group()\n")
    done = gpuwatch_train(tmp_path, str(train_python), "-m", "torch.distributed.run", "--nproc-per-node", "1",
                          "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(script), str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["gpuwatch"] == str(REPO / "gpuwatch" / "__init__.py")  # the rank's hooks
    beats = read_rank_heartbeats(tmp_path / "hb.json")
    assert [(b.rank, b.steps_total) for b in beats] == [(0, 3)]


@pytest.mark.timeout(120)
def test_without_torch_one_line_naming_the_fix(tmp_path: Path) -> None:
    python = make_venv(tmp_path / "bare", None)
    (tmp_path / "train.py").write_text("print('never runs')\n")
    done = gpuwatch_train(tmp_path, str(python), "train.py")
    # The command's stderr goes through the wrapper's output copy to the wrapper's stderr (docs/attached-runs.md).
    assert done.returncode == 1 and done.stdout == "", done
    said = [line for line in done.stderr.splitlines() if "this run is not protected" not in line]  # no daemon here
    assert f"{python} has no torch: install torch into that environment" in done.stderr and len(said) == 1, done.stderr


def _free_port() -> int:
    from tests.support.processes import free_port

    return free_port()
