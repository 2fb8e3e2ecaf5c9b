"""The injected sitecustomize: off without the switch, installs right after `import torch` and not before,
chains the sitecustomize it shadows, costs a process without torch no gpuwatch import, and its limit
(`python -I` ignores PYTHONPATH) leaves the training untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.train.argv import INJECT_DIR, injection_env

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

PROBE = """
import json, sys
before = sorted(m for m in sys.modules if m.startswith("gpuwatch"))
if "--torch" in sys.argv:
    import torch
    from torch.optim import optimizer
    hooks = len(optimizer._global_optimizer_pre_hooks)
    conv = torch.nn.Conv2d._conv_forward.__name__
else:
    hooks = conv = None
after = sorted(m for m in sys.modules if m.startswith("gpuwatch"))
chained = getattr(sys.modules.get("sitecustomize"), "CHAINED", False)
print(json.dumps({"before": before, "after": after, "hooks": hooks, "conv": conv, "chained": chained}))
"""


def probe(env: dict[str, str], *flags: str, torch: bool = True) -> dict[str, object]:
    argv = [sys.executable, *flags, "-c", PROBE] + (["--torch"] if torch else [])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    other = tmp_path / "other"  # a sitecustomize of the user's, after ours on PYTHONPATH
    other.mkdir()
    (other / "sitecustomize.py").write_text("CHAINED = True\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")}
    base["PYTHONPATH"] = str(other)
    base["GPUWATCH_HEARTBEAT_FILE"] = str(tmp_path / "heartbeat.json")
    return injection_env(base, ["--conv2d-fallback", "on"])


def test_installs_after_import_torch_with_the_launcher_options(env: dict[str, str]) -> None:
    assert env["PYTHONPATH"].split(os.pathsep)[0] == INJECT_DIR
    assert sorted(os.listdir(INJECT_DIR)) in (["sitecustomize.py"], ["__pycache__", "sitecustomize.py"])
    result = probe(env)
    assert result["before"] == [] and "gpuwatch.train.launch" in result["after"]  # type: ignore[operator]
    assert result["hooks"] == 1 and result["conv"] == "_patched_conv_forward"
    assert result["chained"] is True


def test_a_process_without_torch_never_imports_gpuwatch(env: dict[str, str]) -> None:
    result = probe(env, torch=False)
    assert result["after"] == [] and result["chained"] is True


def test_off_without_the_switch_and_under_python_isolated_mode(env: dict[str, str]) -> None:
    off = probe({**env, "GPUWATCH_INJECT": "0"})
    assert off["after"] == [] and off["hooks"] == 0 and off["chained"] is True  # the user's still runs
    isolated = probe(env, "-I")  # -I (and -E) ignore PYTHONPATH: documented limit, the training is untouched
    assert isolated["after"] == [] and isolated["hooks"] == 0
