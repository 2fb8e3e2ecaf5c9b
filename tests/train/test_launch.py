"""The launcher runs unmodified scripts as __main__ with their argv, patched, with heartbeat and pause."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from gpuwatch.heartbeat import Heartbeat, read_heartbeat  # noqa: E402
from gpuwatch.train.launch import main, parse_args  # noqa: E402
from tests.support.cli import GPUWATCH  # noqa: E402
from tests.support.paths import REPO  # noqa: E402
from tests.support.venvs import activated, torch_steps  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

PROBE_SCRIPT = """
import json, sys
import torch, torch.nn as nn, torch.nn.functional as F
import helper_beside_script  # importable only if sys.path[0] is the script's folder
result = {
    "name": __name__,
    "argv": sys.argv,
    "conv_hook": nn.Conv2d._conv_forward.__name__,
    "functional": F.conv2d.__name__,
    "multithreaded_backward": torch.autograd.is_multithreading_enabled(),
    "children_get": __import__("os").environ.get("GPUWATCH_LAUNCH_OPTIONS"),
}
with open(sys.argv[1], "w") as handle:
    json.dump(result, handle)
if "--fail" in sys.argv:
    sys.exit(3)
"""

TRAIN_SCRIPT = """
import json, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):  # defined in __main__: spawned workers must re-import this script
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), torch.tensor(i % 2)


def main():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Squares(), batch_size=4, num_workers=int(sys.argv[2]))
    steps = 0
    for _ in range(2):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            steps += 1
    info = {"steps": steps, "persistent": loader.persistent_workers, "hook": nn.Conv2d._conv_forward.__name__}
    with open(sys.argv[1], "w") as handle:
        json.dump(info, handle)


if __name__ == "__main__":
    main()
"""


STEPS_SCRIPT = "import sys\n" + torch_steps(50) + """
if "--fail" in sys.argv:
    raise RuntimeError("diverged")
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    (tmp_path / "helper_beside_script.py").write_text("")
    script = tmp_path / "probe.py"
    script.write_text(PROBE_SCRIPT)
    return script


def test_runs_script_as_main_with_argv_and_path(probe, tmp_path):
    out = tmp_path / "out.json"
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    assert main(["--conv2d-fallback", "on", str(probe), str(out), "--lr", "0.1"]) == 0
    result = json.loads(out.read_text())
    assert result["name"] == "__main__"
    assert result["argv"] == [str(probe), str(out), "--lr", "0.1"]
    assert result["conv_hook"] == "_patched_conv_forward" and result["functional"] == "_patched_functional"
    assert result["multithreaded_backward"] is False  # the fallback's backward runs on the script's thread
    assert result["children_get"] == "--conv2d-fallback on"  # the script's own Python children: the same
    assert sys.argv == saved_argv and sys.path == saved_path
    assert "GPUWATCH_LAUNCH_OPTIONS" not in os.environ and "GPUWATCH_INJECT" not in os.environ
    assert nn.Conv2d._conv_forward.__name__ == "_conv_forward" and F.conv2d is torch.conv2d
    assert torch.autograd.is_multithreading_enabled()  # restored after the script


def test_off_mode_and_script_exit_code(probe, tmp_path):
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exited:
        main(["--conv2d-fallback=off", "--", str(probe), str(out), "--fail"])
    assert exited.value.code == 3
    result = json.loads(out.read_text())
    assert result["conv_hook"] == "_conv_forward" and result["multithreaded_backward"] is True
    assert nn.Conv2d._conv_forward.__name__ == "_conv_forward"


def test_runs_module_as_main(probe, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out.json"
    assert main(["-m", "probe", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["name"] == "__main__" and result["argv"] == [str(probe), str(out)]


def test_flag_without_value_and_a_whole_python_command(probe, tmp_path):
    out = tmp_path / "out.json"
    options = parse_args(["--conv2d-fallback", "--", sys.executable, "-u", str(probe), str(out)])
    assert options.conv2d_fallback == "on" and options.python_flags == ("-u",)
    assert options.script == str(probe) and options.args == [str(out)]
    assert parse_args(["--conv2d-fallback", "off", "python3", "-m", "pkg.train", "-x"]).module == "pkg.train"
    assert main(["--conv2d-fallback", "--", "python", str(probe), str(out)]) == 0
    assert json.loads(out.read_text())["argv"] == [str(probe), str(out)]


def test_autotune_options(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    options = parse_args(["train.py"])
    assert options.conv2d_autotune and options.conv2d_tune_cache == str(tmp_path / "gpuwatch")
    options = parse_args(["--conv2d-autotune", "off", "--conv2d-tune-cache", "none", "train.py", "--conv2d-autotune"])
    assert not options.conv2d_autotune and options.conv2d_tune_cache is None
    assert options.script == "train.py" and options.args == ["--conv2d-autotune"]


def test_parse_args_keeps_script_options_for_the_script():
    options = parse_args(["--spawn", "train.py", "--spawn", "--conv2d-fallback", "x"])
    assert options.spawn and options.conv2d_fallback == "auto"
    assert options.script == "train.py" and options.args == ["--spawn", "--conv2d-fallback", "x"]
    with pytest.raises(SystemExit):
        parse_args(["--spawn"])
    assert main(["no_such_script.py"]) == 2


def test_subprocess_with_spawn_heartbeat_and_pause(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    beat_file, pause_file, out = tmp_path / "hb.json", tmp_path / "pause", tmp_path / "out.json"
    pause_file.touch()  # paused before the first step: the trainer must hold at step 0
    env = {
        **os.environ,
        "GPUWATCH_HEARTBEAT_FILE": str(beat_file),
        "GPUWATCH_PAUSE_FILE": str(pause_file),
        "GPUWATCH_HEARTBEAT_INTERVAL_S": "0",
        "PYTHONPATH": str(REPO),
    }
    launch = [sys.executable, "-m", "gpuwatch.train.launch", "--conv2d-fallback", "on", "--spawn"]
    cmd = [*launch, str(script), str(out), "1"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        def paused() -> Heartbeat | None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            beat = read_heartbeat(beat_file)
            return beat if beat is not None and beat.paused else None

        beat = wait_for(paused, "a paused heartbeat", 60)
        assert beat.steps_total == 0 and beat.pid == proc.pid
        assert not out.exists()
        pause_file.unlink()
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0, stderr
    info = json.loads(out.read_text())
    assert info == {"steps": 4, "persistent": True, "hook": "_patched_conv_forward"}
    final = read_heartbeat(beat_file)
    assert final is not None and final.steps_total == 4 and not final.paused


def test_launch_shim_module(probe, tmp_path, monkeypatch):
    import runpy

    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["gpuwatch.launch", "--conv2d-fallback", "off", str(probe), str(out)])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("gpuwatch.launch", run_name="__main__")
    assert exited.value.code == 0 and json.loads(out.read_text())["name"] == "__main__"


@pytest.mark.parametrize("fail", [False, True])
def test_the_last_heartbeat_counts_every_step_however_the_script_ends(tmp_path, fail):
    """Through the real `gpuwatch train`; the throttle (one write a minute here) holds back all but the first."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS_SCRIPT)
    beat_file = tmp_path / "hb.json"
    env = activated({**os.environ, "GPUWATCH_HEARTBEAT_INTERVAL_S": "60"}, sys.executable)  # the venv, activated
    env.pop("GPUWATCH_PAUSE_FILE", None)
    done = subprocess.run([GPUWATCH, "train", "--conv2d-fallback", "off", "--heartbeat-file", str(beat_file), "--",
                           "python", str(script), *(["--fail"] if fail else [])],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == (1 if fail else 0), done.stderr
    # The command's stderr comes through the wrapper's output copy to the wrapper's stderr (docs/attached-runs.md).
    assert ("RuntimeError: diverged" in done.stderr) == fail and "RuntimeError" not in done.stdout
    beat = read_heartbeat(beat_file)
    assert beat is not None and beat.steps_total == 50 and not beat.paused
