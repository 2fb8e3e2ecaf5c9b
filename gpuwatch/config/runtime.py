"""Where gpuwatch's files are: the config file, the runtime directory (the daemon's, and where a client finds
one), and the names in it. Plain paths, no pydantic: `gpuwatch health` finds the state file through this
module alone (it must answer in milliseconds; docs/cluster.md). ``config.base`` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

DEFAULT_CONFIG_PATH = Path("/etc/gpuwatch/gpuwatch.toml")

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
