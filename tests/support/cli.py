"""The real `gpuwatch` command, as a user types it: the console script pip installed next to this Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

GPUWATCH = str(Path(sys.executable).with_name("gpuwatch"))


def gpuwatch(*args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``gpuwatch ARGS`` to the end; its exit code, stdout and stderr as text."""
    return subprocess.run([GPUWATCH, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def gpuwatch_process(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``gpuwatch ARGS`` started with its stdout and stderr on pipes (text)."""
    return subprocess.Popen([GPUWATCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
