"""Whether a job's ranks take part in the job-wide pause: all or none, agreed through the store, bounded in time.

Issue 38: after a torchrun restart (static rendezvous), one rank failed to join gpuwatch's side group
and trained on "without taking part in pauses" while the other waited in the first agreement
collective until the job's timeout killed the job. A failure to join is not the same on every rank,
so the ranks now agree on the outcome through the job's store, with no collective until all of them
said yes, and no rank waits longer than ``bound_s`` for another:

1. **Incarnation.** The store can outlive restarted workers (torchrun's static rendezvous keeps its
   agent's store, without a per-attempt prefix), so keys of a dead incarnation may be there. Each rank
   r > 0 writes a fresh random nonce to ``hello/<r>``; rank 0 draws the incarnation id ``T`` and echoes
   every nonce it sees as ``welcome/<r> = "<nonce> <T>"``; rank r, once its own nonce comes back,
   answers ``ack/<r> = "<nonce> <T> ok|fail"``. Only a live rank of this incarnation knows ``T``, so
   rank 0 counts only acks that carry it: stale hellos are echoed and never acknowledged.
2. **Readiness.** "ok" means the rank built its local gloo device (the part that fails on one rank
   alone: an interface, ``GLOO_SOCKET_IFNAME``), before any rank connects.
3. **Decision.** ``T/decision`` is written with ``compare_set`` (first writer wins): rank 0 writes
   ``connect`` once every rank acked ok, ``off`` as soon as one says fail or ``bound_s`` passes; a
   rank that waited ``bound_s`` for it writes ``off`` itself. Every rank then reads the same value.
4. **Connect.** On ``connect``, every rank builds the side group (a gloo group on the store under
   ``T``'s prefix, so no stale key can reach it) and reports ``built/<r>``; ``T/final`` is decided
   like ``T/decision``: ``on`` only when every rank built it.

The side group is host-only, so an NCCL job pays no device sync and its model collectives can never
pair with ours. ``join`` takes the store and the group builder as arguments; the tests run it on
threads sharing a ``HashStore``, with failures and stale keys of their choosing.
"""

from __future__ import annotations

import datetime
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

ROOT = "gpuwatch/join/"
POLL_S = 0.01
DEFAULT_BOUND_S = 30.0  # the longest a rank waits for another during the join; a failure is said at once


@dataclass(frozen=True)
class Joined:
    """The outcome, the same on every rank: ``group`` is None when the job's pause is off."""

    job: str  # the incarnation id (hex); "" when this rank never learned it
    group: Any | None
    why_off: str = ""


Device = Callable[[], Any]  # this rank's gloo device(s): raises when the rank cannot take part
Connect = Callable[[Any, Any], Any]  # (store under T's prefix, devices) -> the side group


def gloo_devices() -> list[Any]:
    """The gloo devices new_group would use: ``GLOO_SOCKET_IFNAME``'s interfaces, else the host's address."""
    names = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name]
    if names:
        return [dist.ProcessGroupGloo.create_device(interface=name) for name in names]
    return [dist.ProcessGroupGloo.create_default_device()]


def gloo_connect(rank: int, world: int, timeout: datetime.timedelta) -> Connect:
    def connect(store: Any, devices: Any) -> Any:
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._devices = devices
        options._timeout = timeout
        return dist.ProcessGroupGloo(store, rank, world, options)

    return connect


def join(store: Any, rank: int, world: int, devices: Device, connect: Connect, bound_s: float = DEFAULT_BOUND_S,
         clock: Callable[[], float] = time.monotonic) -> Joined:
    """Run the agreement (see the module's docstring) and return its outcome."""
    try:
        local = devices()
        ready, why = True, ""
    except Exception as exc:  # noqa: BLE001 - any failure means this rank cannot take part
        local, ready, why = None, False, f"rank {rank}: {exc}"
    deadline = clock() + bound_s
    if rank == 0:
        job, failed = _coordinate(store, world, ready, deadline, clock)
        decision = _decide(store, job, "decision", "off" if failed else "connect")
        why = why or failed
    else:
        job = _greet(store, rank, ready, deadline, clock)
        if not job:
            return Joined("", None, why or f"rank {rank}: no word from rank 0 within {bound_s:g} s")
        decision = _await(store, job, "decision", deadline, clock)
    if decision != "connect":
        return Joined(job, None, why or "another rank cannot take part (see its output)")
    group, built = None, "1"
    try:
        group = connect(dist.PrefixStore(f"gpuwatch/{job}/gloo/", store), local)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - a connection that failed: the job's pause is off
        built, why = "0", f"rank {rank}: {exc}"
    store.set(f"{ROOT}{job}/built/{rank}", built)
    deadline = clock() + bound_s
    if rank == 0:
        keys = [f"{ROOT}{job}/built/{r}" for r in range(world)]
        while not store.check(keys) and clock() < deadline:
            time.sleep(POLL_S)
        all_built = store.check(keys) and all(store.get(key) == b"1" for key in keys)
        final = _decide(store, job, "final", "on" if all_built else "off")
    else:
        final = _await(store, job, "final", deadline, clock)
    if final != "on":
        return Joined(job, None, why or "another rank could not connect (see its output)")
    return Joined(job, group)


def _coordinate(store: Any, world: int, ready: bool, deadline: float,
                clock: Callable[[], float]) -> tuple[str, str]:
    """Rank 0: draw the id, echo every hello until each rank acknowledged it (or the bound passed), so
    that every live rank learns the id and then the decision; (id, why the pause is off, or "")."""
    job = secrets.token_hex(8)
    answered: dict[int, bytes] = {}
    acked: dict[int, bool] = {}
    while len(acked) < world - 1 and clock() < deadline:
        for r in set(range(1, world)) - set(acked):
            hello = f"{ROOT}hello/{r}"
            if store.check([hello]):
                nonce = store.get(hello)
                if answered.get(r) != nonce:
                    store.set(f"{ROOT}welcome/{r}", nonce + f" {job}".encode())
                    answered[r] = nonce
            ack = f"{ROOT}ack/{r}"
            if r in answered and store.check([ack]):
                words = store.get(ack).decode().split()
                if words[:2] == [answered[r].decode(), job]:
                    acked[r] = words[2:] == ["ok"]
        if len(acked) < world - 1:
            time.sleep(POLL_S)
    unready = sorted(r for r, ok in acked.items() if not ok)
    missing = sorted(set(range(1, world)) - set(acked))
    if not ready:
        return job, "rank 0 cannot take part"
    if unready:
        return job, f"rank(s) {unready} cannot take part (see their output)"
    if missing:
        return job, f"no word from rank(s) {missing} within the bound"
    return job, ""


def _greet(store: Any, rank: int, ready: bool, deadline: float, clock: Callable[[], float]) -> str:
    """Rank r > 0: say hello with a fresh nonce, learn the id from rank 0's echo, acknowledge; "" if none."""
    nonce = secrets.token_hex(8)
    store.set(f"{ROOT}hello/{rank}", nonce)
    welcome = f"{ROOT}welcome/{rank}"
    while clock() < deadline:
        if store.check([welcome]):
            words: list[str] = store.get(welcome).decode().split()
            if len(words) == 2 and words[0] == nonce:
                store.set(f"{ROOT}ack/{rank}", f"{nonce} {words[1]} {'ok' if ready else 'fail'}")
                return words[1]
        time.sleep(POLL_S)
    return ""


def _decide(store: Any, job: str, name: str, value: str) -> str:
    """Rank 0 proposes; the first value written wins (a waiting rank may have written ``off``)."""
    written: bytes = store.compare_set(f"{ROOT}{job}/{name}", "", value)
    return written.decode()


def _await(store: Any, job: str, name: str, deadline: float, clock: Callable[[], float]) -> str:
    """The value rank 0 wrote, or ``off`` written here once the bound passed (whichever came first)."""
    key = f"{ROOT}{job}/{name}"
    while not store.check([key]) and clock() < deadline:
        time.sleep(POLL_S)
    written: bytes = store.compare_set(key, "", "off")
    return written.decode()
