"""conv2d autotuning choices on disk, one JSON file per environment, so a long run measures once.

A choice is only as good as the environment it was measured in: the file's name is a digest of the
device's name and architecture, the kernel driver's version, the CUDA/ROCm and torch versions and
gpuwatch's own version (its paths may change), and the file repeats them in clear. Writes merge with
what is on disk and replace the file atomically, so several processes (one per GPU) may share it; a
lost race only means a signature is measured again. An unreadable file is ignored with one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from gpuwatch.train.conv2d.plan import Choice

_log = logging.getLogger("gpuwatch.train")
FORMAT = 1
ROUTES = ("function", "thnn", "pointwise", "forward")
# Where the kernel drivers report their version (amdgpu only when built out of tree, by DKMS).
_DRIVER_FILES = ("/sys/module/nvidia/version", "/sys/module/amdgpu/version")


def environment(device: torch.device) -> dict[str, str]:
    """What a measured choice depends on besides the call signature."""
    env = {
        "device_type": device.type,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "hip": str(getattr(torch.version, "hip", None)),
        "gpuwatch": _gpuwatch_version(),
        "driver": _driver_version(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["device"] = props.name
        env["arch"] = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
    else:
        env["device"] = platform.processor() or platform.machine()
    return env


def _gpuwatch_version() -> str:
    try:
        return metadata.version("gpuwatch")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "source"


def _driver_version() -> str:
    for path in _DRIVER_FILES:
        try:
            return f"{Path(path).parent.name} {Path(path).read_text().strip()}"
        except OSError:
            continue
    return f"kernel {platform.release()}"  # in-tree amdgpu: the kernel is the driver


class TuneStore:
    """The choices measured in one environment, kept in ``directory``."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.env = env
        digest = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]
        self.path = directory / f"conv2d-{digest}.json"
        self._entries: dict[str, Any] | None = None
        self._write_failed = False

    def get(self, signature: str) -> Choice | None:
        if self._entries is None:
            self._entries = self._read()
        entry = self._entries.get(signature)
        try:
            route, forward, input_grad, weight_grad = entry["choice"]  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return None
        if route not in ROUTES or not all(isinstance(v, str) for v in (forward, input_grad, weight_grad)):
            return None
        return Choice(route, forward, input_grad, weight_grad)

    def put(self, signature: str, choice: Choice, times: dict[str, float]) -> None:
        entry = {
            "choice": [choice.route, choice.forward, choice.input_grad, choice.weight_grad],
            "times_us": {label: round(seconds * 1e6, 1) for label, seconds in times.items()},
        }
        entries = self._read() if not self._write_failed else (self._entries or {})
        entries[signature] = entry
        self._entries = entries
        if self._write_failed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "w") as handle:
                json.dump({"format": FORMAT, "environment": self.env, "choices": entries}, handle, indent=1)
            os.replace(tmp, self.path)
        except OSError as exc:
            self._write_failed = True
            _log.warning("conv2d autotuning: cannot write %s (%s); choices stay in memory", self.path, exc)

    def _read(self) -> dict[str, Any]:
        try:
            document = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            _log.warning("conv2d autotuning: ignoring unreadable %s (%s)", self.path, exc)
            return {}
        if (not isinstance(document, dict) or document.get("format") != FORMAT
                or document.get("environment") != self.env):
            return {}
        choices = document.get("choices")
        return choices if isinstance(choices, dict) else {}
