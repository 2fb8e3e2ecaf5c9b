"""Calls that may not hold their caller past a deadline: one worker thread per key (a GPU), waited on
with a deadline; a call that misses it goes on in its worker, and the caller gets ``Late`` instead.

Why: a sysfs read is a call into the kernel driver, and amdgpu can block one for as long as the SMU
or a reset takes (seconds, or for good). A blocked read in the daemon's loop stopped the ticks, and
with them the shutdown that hands the fans back (issue 24). Here the loop waits at most the
deadline; a key whose worker is still inside an earlier call gets ``Late`` at once, without a new
call queued behind the stuck one, so a stuck GPU costs the loop one deadline per episode, not one
per tick. Keys are independent: one stuck GPU never holds another's calls past the deadline.

One run's calls take turns (a lock per run, taken around each call): eight threads runnable at once
fought over the GIL at every syscall of their sysfs reads (each read releases it and wakes another
thread), 12-14 ms of CPU and 730 context switches to read 8 GPUs against 2.4 ms read one after the other
(docs/performance.md, round 3). A call waits for its turn at most ``TURN_SHARE`` of the deadline, then
runs beside the others: a call that hangs holding the turn delays the rest by that much, once; a later
run finds the turn still held (by a call that is late) and takes turns on a new lock.

Workers are daemon threads (a worker blocked in the kernel must not hold the process at exit; a
ThreadPoolExecutor's threads are joined at exit) and end after ``IDLE_EXIT_S`` without work.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

IDLE_EXIT_S = 30.0
TURN_SHARE = 0.25  # of the deadline: the longest a call waits for its turn before it runs regardless


@dataclass(frozen=True)
class Late:
    """A call that did not return within its deadline, or that could not start because its key's
    worker is still inside an earlier call (the one ``running_s`` counts)."""

    running_s: float


class _Job:
    """One call on a worker: its outcome, and the hand-off back to the ``run_all`` that waits for it."""

    __slots__ = ("call", "done", "result", "error", "tokens", "latch", "turn", "turn_wait_s")

    def __init__(self, call: Callable[[], object], tokens: list[int], latch: threading.Lock, turn: threading.Lock,
                 turn_wait_s: float) -> None:
        self.call = call
        self.done = False
        self.result: object = None
        self.error: BaseException | None = None
        self.tokens = tokens
        self.latch = latch
        self.turn = turn  # its run's: the calls of one run take turns (the module's docstring)
        self.turn_wait_s = turn_wait_s

    def finish(self) -> None:
        """Marks it done; the last call of its ``run_all`` to finish lets the waiting caller go.

        Each call takes one token (``list.pop`` is atomic); token 0 is the last one taken, by exactly one call,
        which releases the latch the caller holds: one lock per ``run_all`` and one release, where a
        ``Future`` per call and ``concurrent.futures.wait`` took a condition, a waiter and their locks per call
        (0.3 ms of CPU for 8 trivial calls, four times a tick; now 0.2 ms)."""
        self.done = True
        if self.tokens.pop() == 0:
            self.latch.release()


class _Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.job: _Job | None = None
        self.since = 0.0
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return self.job is not None and not self.job.done

    def submit(self, job: _Job, now: float) -> None:
        self.job, self.since = job, now
        with self._lock:
            self._jobs.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:  # submit() puts under the same lock: no job is left without a thread
                    if self._jobs.empty():
                        self._thread = None
                        return
                continue
            turn = job.turn.acquire(timeout=job.turn_wait_s)
            try:
                job.result = job.call()
            except BaseException as exc:
                job.error = exc
            finally:
                if turn:  # before finish(): the next run must not find it held by a call that returned
                    job.turn.release()
            job.finish()


class Workers:
    """Per-key workers named ``<prefix>-<key>``; ``run_all`` is the only way in."""

    def __init__(self, prefix: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.prefix = prefix
        self._mono = monotonic
        self._workers: dict[str, _Worker] = {}
        self._turn = threading.Lock()

    def busy(self, key: str) -> bool:
        """Whether ``key``'s worker is still inside a call (one that missed its deadline)."""
        worker = self._workers.get(key)
        return worker is not None and worker.busy

    def run_all(self, calls: Mapping[str, Callable[[], T]], deadline_s: float) -> dict[str, T | Late]:
        """Each call on its key's worker, all at once; what returned within ``deadline_s``, else ``Late``.

        A call's exception is raised here (after all calls were waited on). Calls must not share
        state with each other or with the caller while they run.
        """
        now = self._mono()
        idle = [key for key in calls if not self.busy(key)]
        tokens = list(range(len(idle)))
        latch = threading.Lock()
        latch.acquire()  # released by the last of the calls to finish
        if self._turn.locked():
            # Held by a late call of an earlier run (or by a run on another thread: then the two runs' calls
            # only lose their turns): this run's calls take turns on a lock of their own.
            self._turn = threading.Lock()
        turn, turn_wait_s = self._turn, max(deadline_s, 0.0) * TURN_SHARE
        started: dict[str, _Job] = {}
        for key in idle:
            worker = self._workers.get(key)
            if worker is None:
                worker = self._workers[key] = _Worker(f"{self.prefix}-{key}")
            started[key] = _Job(calls[key], tokens, latch, turn, turn_wait_s)
            worker.submit(started[key], now)
        if started:
            latch.acquire(timeout=max(deadline_s, 0.0))
        results: dict[str, T | Late] = {}
        now = self._mono()
        for key in calls:
            ran = started.get(key)
            if ran is not None and ran.done:
                if ran.error is not None:
                    raise ran.error
                results[key] = ran.result  # type: ignore[assignment]  # the call's own T
            else:
                results[key] = Late(now - self._workers[key].since)
        return results
