"""Where gpuwatch's files are: the config file, the runtime directory (the daemon's, and where a client finds
one), and the names in it. Plain paths, no pydantic: `gpuwatch health` finds the state file through this
module alone (it must answer in milliseconds; docs/cluster.md). Every caller imports it directly.

The paths are ``str`` and built with ``os.path``, not ``pathlib.Path``: pathlib's import (with urllib.parse and
ipaddress under it) was 3-4 ms of every check (tests/cluster/test_health_imports.py). A caller that works in
``Path`` wraps what it gets here where it uses it (``Path(default_runtime_dir(...))``); the rules stay here.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # collections' import is a tenth of `gpuwatch health`'s own time: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DEFAULT_CONFIG_PATH = "/etc/gpuwatch/gpuwatch.toml"

# The systemd unit's RuntimeDirectory=gpuwatch, and root's default runtime_dir.
SYSTEM_RUNTIME_DIR = "/run/gpuwatch"

# The systemd unit's StateDirectory=gpuwatch: what the system daemon keeps across reboots (its history).
SYSTEM_STATE_DIR = "/var/lib/gpuwatch"

# In the runtime directory: the published state (`gpuwatch status`) and the supervisor's control socket.
STATE_FILE_NAME = "state.json"
# A cleanly stopped daemon's last state file, kept for the next one's job receipts (publish/receipt_store.py).
LAST_STATE_FILE_NAME = "state.last.json"

CONTROL_SOCKET_NAME = "control.sock"
# Beside it, the same server for root, the daemon's user and ``[control] admin_group`` only (mode 0660): no other
# user's connections can fill its listen backlog (daemon/control.py).
CONTROL_ADMIN_SOCKET_NAME = "control-admin.sock"


def configured_runtime_dir(data: bytes) -> str | None:
    """The top-level ``runtime_dir`` a config file's bytes set, read tolerantly (issue 49): `gpuwatch restore`
    falls back to the defaults when the file is broken (ExecStopPost after a rejected reload), and must still
    look where the daemon kept its records. Valid TOML: its key; TOML that does not parse: a plain
    ``runtime_dir = "<path>"`` line above the first table. None: not set, or not an absolute path."""
    import tomllib

    try:
        value = tomllib.loads(data.decode()).get("runtime_dir")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        value = None
        for line in data.decode(errors="replace").splitlines():
            if line.lstrip().startswith("["):
                break  # a key under a table is not the top-level one
            key, equals, rest = line.partition("=")
            text = rest.split("#", 1)[0].strip()
            if equals and key.strip() == "runtime_dir" and len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
                value = text[1:-1]
    return value if isinstance(value, str) and os.path.isabs(value) else None


def default_runtime_dir(environ: Mapping[str, str], euid: int) -> str:
    """Where a daemon started this way publishes when the config sets no ``runtime_dir``: systemd's
    RuntimeDirectory, /run/gpuwatch for root, else a per-user directory."""
    if environ.get("RUNTIME_DIRECTORY"):
        return environ["RUNTIME_DIRECTORY"].split(":")[0]
    if euid == 0:
        return SYSTEM_RUNTIME_DIR
    xdg = environ.get("XDG_RUNTIME_DIR")
    return os.path.join(xdg, "gpuwatch") if xdg else f"/tmp/gpuwatch-{euid}"


def default_state_dir(environ: Mapping[str, str], runtime_dir: str) -> str:
    """Where a daemon publishing in ``runtime_dir`` keeps what survives it: systemd's StateDirectory, else
    /var/lib/gpuwatch for the system daemon (runtime directory /run/gpuwatch), else its runtime directory. A
    client (`status --history`) finds the same from the runtime directory it found (``client_runtime_dir``)."""
    if environ.get("STATE_DIRECTORY"):
        return environ["STATE_DIRECTORY"].split(":")[0]
    return SYSTEM_STATE_DIR if runtime_dir == SYSTEM_RUNTIME_DIR else runtime_dir


def client_runtime_dir(environ: Mapping[str, str], euid: int, holds_daemon: Callable[[str], bool]) -> str:
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


def daemon_files_in(runtime_dir: str | os.PathLike[str]) -> bool:
    """A daemon's state file or control socket is in ``runtime_dir`` (a clean stop removes both)."""
    return (os.path.exists(os.path.join(runtime_dir, STATE_FILE_NAME))
            or os.path.exists(os.path.join(runtime_dir, CONTROL_SOCKET_NAME)))

