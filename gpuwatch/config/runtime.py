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
# A simulator's runtime directory: beside a real one, this added to its name (``simulation_runtime_dir``).
SIMULATE_SUFFIX = "-simulate"
# Beside it, the same server for root, the daemon's user and ``[control] admin_group`` only (mode 0660): no other
# user's connections can fill its listen backlog (daemon/control.py).
CONTROL_ADMIN_SOCKET_NAME = "control-admin.sock"


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


def simulation_runtime_dir(environ: Mapping[str, str], euid: int) -> str:
    """Where a simulator publishes when its config sets no ``runtime_dir`` (`gpuwatch run --simulate`, with or without
    ``-c``): beside this user's own runtime directory, never in it, so no real run attaches to simulated heat:
    /run/gpuwatch-simulate for root, $XDG_RUNTIME_DIR/gpuwatch-simulate or /tmp/gpuwatch-<uid>-simulate else."""
    return os.path.normpath(default_runtime_dir(environ, euid)) + SIMULATE_SUFFIX


def simulator_runtime_dir(configured: str | None, environ: Mapping[str, str], euid: int) -> tuple[str, str | None]:
    """A simulating daemon's runtime directory and, when it is not the configured one, why (one line): none
    configured, ``simulation_runtime_dir``; one configured that is where real daemons publish and real runs attach
    (/run/gpuwatch, this user's own default), the same name with ``-simulate`` (a simulator there would govern every
    user's real `gpuwatch train` with its simulated heat); any other, as configured."""
    if configured is None:
        return simulation_runtime_dir(environ, euid), None
    real = {os.path.realpath(SYSTEM_RUNTIME_DIR), os.path.realpath(default_runtime_dir(environ, euid))}
    if os.path.realpath(configured) not in real:
        return configured, None
    moved = os.path.normpath(configured) + SIMULATE_SUFFIX
    return moved, (f"runtime_dir {configured} is where real daemons publish and real runs attach: the simulator "
                   f"publishes in {moved} instead")


def client_runtime_dir(environ: Mapping[str, str], euid: int, holds_daemon: Callable[[str], bool], *,
                       simulators: bool = False) -> str:
    """Where `status`, `pause`, `resume`, `train` and `logs` look for the daemon when the config sets no
    ``runtime_dir``: where this user's own daemon would publish (``default_runtime_dir``) if one is there, else
    the system service's /run/gpuwatch if one is there (a non-root user on a machine with the installed unit);
    with ``simulators``, then this user's own simulator's directory and root's (``simulation_runtime_dir``: a real
    daemon always wins); else the user's own directory (and "daemon not running" is the truth). `gpuwatch health`
    looks for real daemons only: a node's health gate never answers from simulated cards.

    ``holds_daemon(dir)`` says whether a daemon publishes in ``dir`` (``daemon_files_in``).
    """
    own = default_runtime_dir(environ, euid)
    candidates = [own, SYSTEM_RUNTIME_DIR]
    if simulators:
        candidates += [simulation_runtime_dir(environ, euid), SYSTEM_RUNTIME_DIR + SIMULATE_SUFFIX]
    for candidate in dict.fromkeys(candidates):
        if holds_daemon(candidate):
            return candidate
    return own


def simulator_notice(runtime_dir: str | os.PathLike[str]) -> str:
    """What a client says, on stderr, when the daemon it found is a simulator (``is_simulator_dir``)."""
    return (f"gpuwatch: no real gpuwatch daemon runs here: using the simulator's (gpuwatch run --simulate) in "
            f"{os.fspath(runtime_dir)}")


def is_simulator_dir(runtime_dir: str | os.PathLike[str]) -> bool:
    """A directory ``simulator_runtime_dir`` chose (its ``-simulate`` name): what a client says it found."""
    return os.path.basename(os.path.normpath(runtime_dir)).endswith(SIMULATE_SUFFIX)


def daemon_files_in(runtime_dir: str | os.PathLike[str]) -> bool:
    """A daemon's state file or control socket is in ``runtime_dir`` (a clean stop removes both)."""
    return (os.path.exists(os.path.join(runtime_dir, STATE_FILE_NAME))
            or os.path.exists(os.path.join(runtime_dir, CONTROL_SOCKET_NAME)))

