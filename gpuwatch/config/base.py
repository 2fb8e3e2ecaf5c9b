"""The configuration's shared vocabulary: its error, the strict pydantic base, the PCI slot form that names
a GPU everywhere, and where a daemon publishes (the runtime directory, its state file and socket)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

DEFAULT_HTTP_PORT = 9840

# A GPU's id everywhere in gpuwatch: its PCI slot as sysfs names it (domain:bus:device.function, lower
# case), e.g. 0000:28:00.0; lspci's short form 28:00.0 leaves out the domain.
PCI_SLOT = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

# The longest one GPU's sysfs reads (or its fan's writes) may hold a tick before the GPU counts as
# unresponsive (docs/robustness.md). A whole GPU reads in well under 10 ms (benchmarks/poll_cycle.py);
# only a driver that is really stuck (an SMU message that never completes, a reset) waits this out.
DEFAULT_SYSFS_DEADLINE_S = 1.0


class ConfigError(Exception):
    """The configuration file cannot be used; the message is meant for the user as is."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def pci_slot_problem(text: str) -> str | None:
    """Why ``text`` is not a PCI slot as gpuwatch names GPUs, or None when it is one."""
    if PCI_SLOT.match(text):
        return None
    if PCI_SLOT.match(f"0000:{text}".lower()):
        return f"{text!r} is a short PCI slot: write it with its domain, as 0000:{text.lower()}"
    if PCI_SLOT.match(text.lower()):
        return f"{text!r}: write the PCI slot in lower case, as {text.lower()}"
    return f"{text!r} is not a PCI slot (domain:bus:device.function, like 0000:28:00.0; see gpuwatch sensors)"


def _check_slot(text: str) -> str:
    problem = pci_slot_problem(text)
    if problem:
        raise ValueError(problem)
    return text


PciSlot = Annotated[str, AfterValidator(_check_slot)]

# The systemd unit's RuntimeDirectory=gpuwatch, and root's default runtime_dir.
SYSTEM_RUNTIME_DIR = Path("/run/gpuwatch")

# In the runtime directory: the published state (`gpuwatch status`) and the supervisor's control socket.
STATE_FILE_NAME = "state.json"

CONTROL_SOCKET_NAME = "control.sock"


def default_runtime_dir(environ: Mapping[str, str], euid: int) -> Path:
    """Where a daemon started this way publishes when the config sets no ``runtime_dir``: systemd's
    RuntimeDirectory, /run/gpuwatch for root, else a per-user directory."""
    if environ.get("RUNTIME_DIRECTORY"):
        return Path(environ["RUNTIME_DIRECTORY"].split(":")[0])
    if euid == 0:
        return SYSTEM_RUNTIME_DIR
    base = environ.get("XDG_RUNTIME_DIR") or f"/tmp/gpuwatch-{euid}"
    return Path(base) / "gpuwatch" if environ.get("XDG_RUNTIME_DIR") else Path(base)


def client_runtime_dir(environ: Mapping[str, str], euid: int, holds_daemon: Callable[[Path], bool]) -> Path:
    """Where `status`, `pause`, `resume` and `restart` look for the daemon when the config sets no
    ``runtime_dir``: where this user's own daemon would publish (``default_runtime_dir``) if one is
    there, else the system service's /run/gpuwatch if one is there (a non-root user on a machine with
    the installed unit), else the user's own directory (and "daemon not running" is the truth).

    ``holds_daemon(dir)`` says whether a daemon publishes in ``dir`` (``daemon_files_in``).
    """
    own = default_runtime_dir(environ, euid)
    if own != SYSTEM_RUNTIME_DIR and not holds_daemon(own) and holds_daemon(SYSTEM_RUNTIME_DIR):
        return SYSTEM_RUNTIME_DIR
    return own


def daemon_files_in(runtime_dir: Path) -> bool:
    """A daemon's state file or control socket is in ``runtime_dir`` (a clean stop removes both)."""
    return (runtime_dir / STATE_FILE_NAME).exists() or (runtime_dir / CONTROL_SOCKET_NAME).exists()
