"""Who may do what on the control socket (pure): the one rule, from the kernel's peer credentials.

The socket is connectable by every local user (mode 0666); the kernel tells who is asking (SO_PEERCRED:
pid, uid, gid; the supplementary groups from the peer's /proc/<pid>/status ``Groups:`` line), never the
request. Privileged: uid 0, the daemon's own uid, or a member of ``[control] admin_group``. Anyone may
attach a run of their own and read the status (redacted for the unprivileged, ``redacted``); a user may
pause, resume and stop only the attached runs they own (by NAME or any pid of the run's tree), never a
configured trainer or another user's run; everything else (restart, simulate-reset, a command for every
trainer at once) needs privilege. An unprivileged command without a NAME means the caller's own runs.
"""

from __future__ import annotations

from dataclasses import dataclass

# The verbs an unprivileged user may send for a run of their own.
OWN_RUN_VERBS = frozenset({"pause", "resume", "stop"})
# Anyone may send these (attach is validated on its own: attached_runs.py).
PUBLIC_VERBS = frozenset({"status", "attach"})
# Every refusal starts with this: `gpuwatch pause|resume|stop` exits 1 on it, as it did when the socket's
# permissions refused (2 stays for a command that names nothing to act on).
NOT_PERMITTED = "not permitted"


@dataclass(frozen=True)
class Peer:
    """A connected client as the kernel reports it."""

    pid: int
    uid: int
    gid: int
    groups: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Target:
    """A run a command names: its published name, whether it was attached, and its owner's uid and name."""

    name: str
    attached: bool
    uid: int | None  # None: a configured trainer
    user: str | None = None


def parse_groups(status: str) -> frozenset[int]:
    """The supplementary groups from ``/proc/<pid>/status``'s ``Groups:\\t4 24 27`` line (empty when absent)."""
    for line in status.splitlines():
        if line.startswith("Groups:"):
            return frozenset(int(part) for part in line.split()[1:] if part.isascii() and part.isdigit())
    return frozenset()


def privileged(peer: Peer, daemon_uid: int, admin_gid: int | None) -> bool:
    """Root, the daemon's own user, or a member of the admin group (primary or supplementary)."""
    if peer.uid in (0, daemon_uid):
        return True
    return admin_gid is not None and (peer.gid == admin_gid or admin_gid in peer.groups)


def refusal(verb: str, peer: Peer, is_privileged: bool, targets: list[Target]) -> str | None:
    """Why ``peer`` may not send ``verb`` for ``targets`` (the runs it names), None when it may. One line."""
    if is_privileged or verb in PUBLIC_VERBS:
        return None
    if verb not in OWN_RUN_VERBS:
        return f"{NOT_PERMITTED}: {verb} needs root or the daemon's admin group"
    for target in targets:
        if not target.attached:
            return f"{NOT_PERMITTED}: {target.name} is a configured trainer (root or the admin group only)"
        if target.uid != peer.uid:
            return f"{NOT_PERMITTED}: run {target.name} belongs to {target.user or target.uid}"
    return None


def redacted(verb: str, is_privileged: bool) -> bool:
    """Whether the status document given for ``verb`` drops the sensitive fields (contracts: commands, users,
    log paths): for every unprivileged peer."""
    return verb == "status" and not is_privileged
