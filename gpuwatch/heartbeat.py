"""The heartbeat/pause protocol between a supervised trainer and the daemon.

The supervisor gives each trainer two paths through its environment:

* ``GPUWATCH_HEARTBEAT_FILE``: the trainer (the launcher's optimizer-step hook, or any program that
  wants to) rewrites this JSON file atomically (tmp + rename) with its progress. The daemon only reads it.
  The ranks of a distributed job write one file each beside it (``rank_heartbeat_path``), with the
  job's view of the pause; the daemon aggregates them.
* ``GPUWATCH_PAUSE_FILE``: while this file exists the daemon asks for a cooperative pause: the trainer
  blocks at its next optimizer-step boundary and reports ``paused: true`` in its heartbeat until the
  file is gone. Its text is the reason (``pause_reason``), which a distributed job shows on every node.
  While it holds the file, the daemon refreshes its mtime every ``PAUSE_REFRESH_S``; a file not
  refreshed for ``PAUSE_STALE_S`` (``pause_age_s``) was left by a requester that is gone (the daemon
  killed): the trainer side and ``gpuwatch status`` say so.

``GPUWATCH_NODE`` names this machine in a job that spans several (default: the host name).

The daemon reads these files as root in a directory the trainer's user owns: every read goes through
``safefs.read_bounded`` (a regular file, never a link or a FIFO, at most ``HEARTBEAT_MAX_BYTES``), and at most
``MAX_RANK_FILES`` rank files are read per call, so nothing the user puts there can block or bloat a tick.

This module has no dependencies beyond the standard library so that both the daemon (which never
imports torch) and the torch launcher can use it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuwatch.safefs import SMALL_FILE_MAX_BYTES, read_bounded, write_atomic

HEARTBEAT_ENV = "GPUWATCH_HEARTBEAT_FILE"
PAUSE_ENV = "GPUWATCH_PAUSE_FILE"
NODE_ENV = "GPUWATCH_NODE"
# Set for every trainer unless the user set it (the supervisor, `gpuwatch train`): torch 2.13's torchrun
# shares its rendezvous TCPStore with the workers by default, and workers it restarts (--max-restarts)
# then read stale addresses and fail or hang in init_process_group (0 clean restarts in 6 trials, with
# or without gpuwatch; pytorch/pytorch#135712, #167288). A store of their own restarts cleanly.
TRAINER_ENV_DEFAULTS = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
_RANK_INFIX = ".rank-"
# The pause file's liveness: the daemon touches it this often while it asks for the pause, so a file
# older than PAUSE_STALE_S (several refreshes missed, a loaded box's stalls included) has no requester.
PAUSE_REFRESH_S = 10.0
PAUSE_STALE_S = 60.0
# A heartbeat is a few hundred bytes; a larger file is refused unread (a 300 MiB one once cost 650 MiB and the tick).
HEARTBEAT_MAX_BYTES = SMALL_FILE_MAX_BYTES
# Rank files read per call: more ranks than any node runs; a directory of a million names costs one bounded scan.
MAX_RANK_FILES = 1024


@dataclass(frozen=True)
class Heartbeat:
    """One progress report from a trainer; times are Unix seconds (the writer's clock).

    A rank of a distributed job also reports the job: every rank counts the same steps (lockstep
    optimizer steps only), ``pause_seq`` counts the pauses the whole job agreed on, and while held
    ``job_ranks_held`` / ``job_wanting`` are the job-wide counts of ranks holding and of ranks whose
    node asks for the pause (``wants``: this rank's node does); ``paused_by`` is "node: reason".
    """

    pid: int
    steps_total: int
    last_step_unix: float | None
    steps_per_s: float | None
    updated_unix: float
    paused: bool = False
    epoch: int | None = None
    rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node: str | None = None
    job: str | None = None  # the job incarnation's id, drawn when the ranks joined
    pause_seq: int = 0
    wants: bool = False
    job_ranks_held: int | None = None
    job_wanting: int | None = None
    paused_by: str | None = None
    pg_timeout_s: float | None = None
    backend: str | None = None
    restart_count: int | None = None


_OPTIONAL_INT = ("epoch", "rank", "world_size", "local_world_size", "job_ranks_held", "job_wanting", "restart_count")
_OPTIONAL_STR = ("node", "job", "paused_by", "backend")


def write_heartbeat(path: str | os.PathLike[str], heartbeat: Heartbeat) -> None:
    """Atomically replace ``path`` with ``heartbeat`` so a reader never sees half a file (``safefs.write_atomic``:
    an unpredictable temporary name, renamed over the target; 0600, as the training process's own file)."""
    write_atomic(path, json.dumps(asdict(heartbeat)).encode(), mode=0o600)


def read_heartbeat(path: str | os.PathLike[str], problems: list[str] | None = None) -> Heartbeat | None:
    """The last heartbeat, or None when there is none yet or it cannot be used. Why a file that is there
    could not be read (a link, a FIFO, too large, unparsable) is appended to ``problems``, one line each."""
    try:
        return heartbeat_from_json(json.loads(read_bounded(path, HEARTBEAT_MAX_BYTES)))
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = exc.strerror or str(exc)
    except ValueError as exc:
        why = f"{os.fspath(path)}: {exc}"
    if problems is not None:
        problems.append(why)
    return None


def heartbeat_from_json(raw: Any) -> Heartbeat:
    """A heartbeat's JSON object (a file's, or one an attached run's wrapper sent: attach.Beat); raises
    ValueError for anything else."""
    try:
        known: dict[str, Any] = {}
        for name in _OPTIONAL_INT:
            known[name] = None if raw.get(name) is None else int(raw[name])
        for name in _OPTIONAL_STR:
            known[name] = None if raw.get(name) is None else str(raw[name])
        return Heartbeat(
            pid=int(raw["pid"]),
            steps_total=int(raw["steps_total"]),
            last_step_unix=_opt_float(raw.get("last_step_unix")),
            steps_per_s=_opt_float(raw.get("steps_per_s")),
            updated_unix=float(raw["updated_unix"]),
            paused=bool(raw.get("paused", False)),
            pause_seq=int(raw.get("pause_seq", 0)),
            wants=bool(raw.get("wants", False)),
            pg_timeout_s=_opt_float(raw.get("pg_timeout_s")),
            **known,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a heartbeat: {exc!r}") from None


def rank_heartbeat_path(heartbeat_file: str | os.PathLike[str], rank: int) -> Path:
    """Where rank ``rank`` of a distributed job writes: ``heartbeat.json`` -> ``heartbeat.rank-3.json``."""
    path = Path(heartbeat_file)
    return path.with_name(f"{path.stem}{_RANK_INFIX}{rank}{path.suffix}")


def rank_files(heartbeat_file: str | os.PathLike[str]) -> list[Path]:
    """The rank heartbeat files beside ``heartbeat_file``, at most ``MAX_RANK_FILES``."""
    path = Path(heartbeat_file)
    prefix, suffix = f"{path.stem}{_RANK_INFIX}", path.suffix
    found: list[Path] = []
    try:
        with os.scandir(path.parent) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(suffix):
                    found.append(Path(entry.path))
                    if len(found) >= MAX_RANK_FILES:
                        break
    except OSError:
        return []
    return found


def read_rank_heartbeats(heartbeat_file: str | os.PathLike[str], problems: list[str] | None = None) -> list[Heartbeat]:
    """Every rank's last heartbeat beside ``heartbeat_file`` (files of ranks long gone included)."""
    beats = []
    for candidate in rank_files(heartbeat_file):
        beat = read_heartbeat(candidate, problems)
        if beat is not None and beat.rank is not None:
            beats.append(beat)
    return beats


def remove_heartbeats(heartbeat_file: str | os.PathLike[str]) -> None:
    """A new run starts without the previous run's heartbeats (its own and its ranks')."""
    for old in [Path(heartbeat_file), *rank_files(heartbeat_file)]:
        old.unlink(missing_ok=True)


def pause_requested(pause_file: str | os.PathLike[str] | None) -> bool:
    """True while the daemon asks the trainer to hold at its next step boundary."""
    return pause_file is not None and os.path.exists(pause_file)


def request_pause(pause_file: str | os.PathLike[str], reason: str) -> None:
    """Create the pause file atomically, with the reason as its text."""
    target = Path(pause_file)
    fd, tmp = tempfile.mkstemp(prefix=".pause-", dir=target.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(reason.strip()[:200] + "\n")
    os.replace(tmp, target)


def pause_age_s(pause_file: str | os.PathLike[str] | None, now_unix: float) -> float | None:
    """Seconds since the pause file was written or refreshed (None: there is none); at or over
    ``PAUSE_STALE_S`` its requester is gone. Never negative (another clock may run ahead)."""
    if pause_file is None:
        return None
    try:
        return max(0.0, now_unix - os.stat(pause_file).st_mtime)
    except OSError:
        return None


def refresh_pause(pause_file: str | os.PathLike[str], now_unix: float) -> bool:
    """The requester's side: touch the pause file when it is ``PAUSE_REFRESH_S`` old; whether it was touched."""
    age_s = pause_age_s(pause_file, now_unix)
    if age_s is None or age_s < PAUSE_REFRESH_S:
        return False
    try:
        os.utime(pause_file, (now_unix, now_unix), follow_symlinks=False)  # the trainer's user owns the dir
    except OSError:
        return False
    return True


def pause_reason(pause_file: str | os.PathLike[str] | None) -> str:
    """The reason written into the pause file ("pause requested" when it has none or is gone)."""
    if pause_file is None:
        return "pause requested"
    try:
        return read_bounded(pause_file)[:200].decode("utf-8", errors="replace").strip() or "pause requested"
    except OSError:
        return "pause requested"


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
