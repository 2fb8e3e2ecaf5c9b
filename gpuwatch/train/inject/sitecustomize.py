"""gpuwatch's start-up hook for every Python process of a trainer's tree (``gpuwatch train``).

``gpuwatch train`` (and ``python -m gpuwatch.launch``) put this file's folder first on PYTHONPATH with
``GPUWATCH_INJECT=1``. Python runs the first ``sitecustomize`` on ``sys.path`` at start-up (site.py),
before the main script, so this runs in torchrun's agent and in each rank it starts, in ranks a
script starts itself (``python -m torch.distributed.run``, ``torch.multiprocessing.spawn``) and in
spawned DataLoader workers. The folder holds only this file: the trainer's own packages (another
virtualenv's torch) stay first for everything else.

It imports neither torch nor gpuwatch here: a finder on ``sys.meta_path`` wraps torch's loader and,
right after ``import torch`` has finished, installs the launcher's patches and step hooks from the
environment (``gpuwatch.train.launch.install_from_env``), loading gpuwatch from the installation this
file belongs to. A process that never imports torch pays for the finder only. Which processes then
train (ranks) and which never do (the agent, DataLoader workers) is decided at their first optimizer
step. A sitecustomize this one shadows (a distribution's, a virtualenv's) runs afterwards.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(os.path.dirname(_HERE))  # .../gpuwatch


def _chain_shadowed_sitecustomize() -> None:
    """Run the sitecustomize that the one on PYTHONPATH hides, as site.py would have."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # site.py reports its own sitecustomize's errors and goes on: so do we
        print(f"gpuwatch: error in {spec.origin}: {exc!r}", file=sys.stderr)


class _AfterTorchImport:
    """Meta path finder for ``torch`` only: hands out torch's own spec with a wrapped loader, once."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.loader is not None:
            spec.loader = _InstallAfter(spec.loader)  # type: ignore[assignment]
        return spec


class _InstallAfter:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _install()

    def __getattr__(self, name: str) -> Any:  # is_package, get_resource_reader...: torch's own loader
        return getattr(self.inner, name)


def _install() -> None:
    if "gpuwatch.train.launch" in sys.modules:  # the launcher runs in this process and installs itself
        return
    try:
        if "gpuwatch" not in sys.modules:  # the gpuwatch this file belongs to, whatever the trainer's venv has
            spec = importlib.util.spec_from_file_location(
                "_gpuwatch_bootstrap", os.path.join(_PACKAGE_DIR, "train", "bootstrap.py"))
            assert spec is not None and spec.loader is not None
            bootstrap = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(bootstrap)
            bootstrap.own_gpuwatch()
        from gpuwatch.train.launch import install_from_env

        install_from_env()
    except Exception as exc:  # never stop the training: without hooks the supervisor pauses by SIGSTOP
        print(f"gpuwatch: training hooks not installed in pid {os.getpid()}: {exc!r}", file=sys.stderr)


if os.environ.get("GPUWATCH_INJECT") == "1":
    if "torch" in sys.modules:  # a .pth file imported it already
        _install()
    else:
        sys.meta_path.insert(0, _AfterTorchImport())
_chain_shadowed_sitecustomize()
