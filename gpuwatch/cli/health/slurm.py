"""`gpuwatch health --slurm`: drain the node after N unhealthy checks in a row, resume it after M healthy ones,
and only ever resume a drain gpuwatch made (its reason starts with ``gpuwatch:``, NHC's ``LEADER`` rule).

Slurm's HealthCheckProgram runs this every HealthCheckInterval, as root, and kills it after 60 s: every
``scontrol`` call has its own timeout (``SCONTROL_TIMEOUT_S``), three calls at most. The consecutive checks
are counted in a small JSON file in the runtime directory (``CHECKS_FILE_NAME``; /run/gpuwatch for the
service: a reboot starts the count again, which is what a reboot should do). The decision is pure
(``decide``); the node's state comes from ``scontrol show node`` (``parse_node``).

A full runtime directory (issue 46) is where a stuck daemon most needs draining: the count is a fixed-width
record (``RECORD_BYTES``) rewritten in place once it exists, which needs no new block even on a full tmpfs, and
when the count cannot be saved at all an unhealthy check drains at once (``gate``): a count that cannot be kept
must never keep a node in service.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuwatch.publish.health_codes import PREFIX

CHECKS_FILE_NAME = "slurm-checks.json"
RECORD_BYTES = 64  # the count's record, padded with spaces (JSON allows them): rewritten in place, same size
SCONTROL_TIMEOUT_S = 15.0
MAX_REASON_CHARS = 200
Action = Literal["drain", "resume"]


@dataclass(frozen=True)
class Checks:
    """Consecutive checks with the same outcome (one of the two is always 0)."""

    unhealthy: int = 0
    healthy: int = 0


@dataclass(frozen=True)
class Node:
    """What ``scontrol show node`` says: drained (or draining) and why."""

    drained: bool
    reason: str | None


def parse_node(text: str) -> Node:
    """``State=IDLE+DRAIN ...`` and ``Reason=gpuwatch:G006 ... [root@2026-11-27T00:10:02]`` of one node."""
    state, reason = "", None
    for line in text.splitlines():
        for token in line.split():
            if token.startswith("State="):
                state = token[len("State="):]
        stripped = line.strip()
        if stripped.startswith("Reason="):
            reason = stripped[len("Reason="):]
            if reason.endswith("]") and " [" in reason:  # the user and time Slurm appends
                reason = reason[: reason.rindex(" [")]
    return Node(drained="DRAIN" in state.upper(), reason=reason or None)


def decide(checks: Checks, healthy: bool, node: Node, drain_after: int,
           resume_after: int) -> tuple[Checks, Action | None]:
    """The next count and what to do: drain a node that is not drained after ``drain_after`` unhealthy checks;
    resume one drained by gpuwatch after ``resume_after`` healthy ones; never touch an admin's drain."""
    if not healthy:
        checks = Checks(unhealthy=checks.unhealthy + 1)
        return checks, "drain" if checks.unhealthy >= drain_after and not node.drained else None
    checks = Checks(healthy=checks.healthy + 1)
    ours = node.drained and (node.reason or "").startswith(PREFIX)
    return checks, "resume" if ours and checks.healthy >= resume_after else None


def node_name(environ: dict[str, str] | os._Environ[str]) -> str:
    """SLURMD_NODENAME (set in the HealthCheckProgram's environment), else the short host name."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def read_checks(path: Path) -> Checks:
    try:
        with open(path, "rb", opener=_nofollow) as handle:
            doc = json.loads(handle.read(RECORD_BYTES * 4))
        unhealthy, healthy = doc.get("unhealthy", 0), doc.get("healthy", 0)
        if all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 10**9 for n in (unhealthy, healthy)):
            return Checks(unhealthy=unhealthy, healthy=healthy)
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    return Checks()  # none yet, or garbage: count from the start


def write_checks(path: Path, checks: Checks) -> None:
    """The count as a ``RECORD_BYTES`` record: in place into the existing file (no new block: a full directory
    still takes it), else created whole with a rename. OSError when neither works."""
    record = json.dumps({"unhealthy": checks.unhealthy, "healthy": checks.healthy}).encode().ljust(RECORD_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            with open(tmp, "wb", opener=_exclusive) as handle:
                handle.write(record)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return
    try:
        # Over the old bytes, then cut to the record: a page the file already has is reused (tmpfs allocates per
        # page), so an older gpuwatch's shorter record is rewritten in a full directory too.
        if os.pwrite(fd, record, 0) != RECORD_BYTES:
            raise OSError(f"short write to {path}")
        os.ftruncate(fd, RECORD_BYTES)
    finally:
        os.close(fd)


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def _exclusive(path: str, flags: int) -> int:
    try:
        os.unlink(path)  # a leftover of a killed check
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


class ScontrolError(Exception):
    pass


def scontrol(*args: str) -> str:
    """Runs ``scontrol ARGS`` within SCONTROL_TIMEOUT_S; ScontrolError with one line when it fails."""
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S,
                              check=False)
    except FileNotFoundError:
        raise ScontrolError("scontrol not found (is this a Slurm node?)") from None
    except subprocess.TimeoutExpired:
        raise ScontrolError(f"scontrol {args[0]} did not answer within {SCONTROL_TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ScontrolError(f"scontrol {' '.join(args[:2])}: {said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout


def gate(checks_file: Path, healthy: bool, reason: str, drain_after: int, resume_after: int, name: str) -> str:
    """One HealthCheckProgram run: count, ask Slurm for the node, drain or resume it; what was done, one line."""
    node = parse_node(scontrol("show", "node", name))
    checks, action = decide(read_checks(checks_file), healthy, node, drain_after, resume_after)
    uncounted = ""
    try:
        write_checks(checks_file, checks)
    except OSError as exc:
        uncounted = f"the check count cannot be saved in {checks_file} ({exc.strerror or exc})"
        if not healthy and not node.drained:  # no count to wait for: the node must not stay in service
            action = "drain"
    if action == "drain":
        scontrol("update", f"nodename={name}", "state=drain", f"reason={reason[:MAX_REASON_CHARS]}")
    elif action == "resume":
        scontrol("update", f"nodename={name}", "state=resume")
    if action == "drain":
        return f"drained {name}: {reason}" + (f" (at once: {uncounted})" if uncounted else "")
    if action == "resume":
        return f"resumed {name} (drained by gpuwatch: {node.reason})"
    count = f"{checks.unhealthy} unhealthy" if checks.unhealthy else f"{checks.healthy} healthy"
    held = f"; drained by someone else ({node.reason}): left alone" if node.drained and not (
        node.reason or "").startswith(PREFIX) else ""
    return f"{name}: {count} check(s) in a row, nothing to do{held}" + (f" ({uncounted})" if uncounted else "")
