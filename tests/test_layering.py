"""DESIGN.md's module map: lower layers never import higher ones; only the train extra imports torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpuwatch"

# 0 leaves, 1 parsing & pure logic, 2 effects, 3 entry points, 9 optional torch extra.
LAYERS: dict[str, int] = {
    "__init__": 0, "model": 0, "sysfs": 0, "config": 0, "heartbeat": 0, "gpus": 1,
    "fan": 1, "curveplot": 1,
    "limits": 1, "document": 1, "status": 1, "metrics": 1,
    "sim": 2,  # the simulator (docs/simulator.md)
    "policy": 1,
    "state": 2, "checkpoint": 2, "trainerproc": 2, "supervisor": 2, "control": 2, "http": 2,
    "summary": 1, "reload": 1, "sdnotify": 2,
    "daemon": 3, "cli": 3, "__main__": 3,
    "launch_argv": 1,  # torch-free argv builder shared by `gpuwatch train` and the launcher
    "launch": 9, "train": 9,
}
TORCH_OK = {"launch", "train"}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        found.append((rel.parts[0], path))
    return found


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "gpuwatch":
                names.update(f"gpuwatch.{alias.name}" for alias in node.names if not alias.name.startswith("__"))
    return names


@pytest.mark.parametrize("top, path", _modules(), ids=lambda v: str(v))
def test_module_respects_layers(top: str, path: Path) -> None:
    assert top in LAYERS, f"{path.name}: add the new module to LAYERS (and DESIGN's module map)"
    own = LAYERS[top]
    for name in _imports(path):
        root = name.split(".")[0]
        if root == "torch" or root == "torchvision":
            assert top in TORCH_OK, f"{path}: only the train extra may import torch"
        if root != "gpuwatch" or name == "gpuwatch":
            continue
        target = name.split(".")[1]
        assert target in LAYERS, f"{path}: imports unknown module {name}"
        if top in TORCH_OK:
            continue
        assert LAYERS[target] != 9, f"{path}: the daemon side must not import the torch extra ({name})"
        assert LAYERS[target] <= own, f"{path} (layer {own}) imports higher layer {name} ({LAYERS[target]})"


def test_cli_does_not_pull_in_torch() -> None:
    import subprocess
    import sys

    code = "import sys, gpuwatch.cli, gpuwatch.daemon; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
