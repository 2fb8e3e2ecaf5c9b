"""Calls that may not hold their caller past a deadline: a round of calls, one per key (a GPU), run one
after another on one runner thread and waited on with a deadline; a call that misses it goes on in its
thread, and the caller gets ``Late`` instead.

Why: a sysfs read is a call into the kernel driver, and amdgpu can block one for as long as the SMU
or a reset takes (seconds, or for good). A blocked read in the daemon's loop stopped the ticks, and
with them the shutdown that hands the fans back (issue 24). Here the loop waits at most the
deadline; a key whose call is still running (an earlier one, late) gets ``Late`` at once, without a
new call queued behind the stuck one, so a stuck GPU costs the loop one deadline per episode, not one
per tick. Keys are independent: one stuck GPU never holds another's calls past the deadline.

One round, one hand-off: eight threads runnable at once fought over the GIL at every syscall of their
sysfs reads (docs/performance.md, round 3), and one worker thread per GPU, even taking turns, still cost a
wake-up, a GIL hand-off and a context switch per call (round 4). A round's calls run on one runner, in
order: one wake-up to start it, one to say it is done. A call that runs longer than ``CALL_SHARE`` of the
deadline is left to its runner (abandoned there: it may be stuck in the driver) and the round's calls not
yet started go on at once on another runner, a spare of the pool or a new thread; so one hung key delays
the others by that allowance, once. When the deadline passes, the calls not yet started are not started
(a write decided for this tick must not land in a later one): they are ``Late``, and their keys free.

Runners are daemon threads (a runner blocked in the kernel must not hold the process at exit; a
ThreadPoolExecutor's threads are joined at exit). Each ``Workers`` keeps at most ``SPARE_RUNNERS`` idle;
an idle one ends after ``IDLE_EXIT_S`` without work. A runner is named ``<prefix>`` while idle and
``<prefix>-<key>`` while inside a key's call, so ``py-spy dump`` says whose a stuck thread is.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

IDLE_EXIT_S = 30.0
CALL_SHARE = 0.25  # of the deadline: the longest one call holds up the round's later calls
SPARE_RUNNERS = 2  # idle runners a Workers keeps (one runs each round; one more after a hang)



class _State(enum.Enum):
    """A call's: its key is busy (skipped by later rounds) while PENDING or RUNNING."""

    PENDING = "pending"  # in its round, not started yet
    RUNNING = "running"
    DONE = "done"  # returned or raised
    CANCELLED = "cancelled"  # not started by its round's deadline: never will be


# The members as module names: ``_State.DONE`` is a class attribute lookup through the enum's metaclass, 70 ns
# against 15 for a global on Python 3.11, four times per call of a round (docs/performance.md, round 7).
_PENDING, _RUNNING, _DONE, _CANCELLED = _State.PENDING, _State.RUNNING, _State.DONE, _State.CANCELLED
_BUSY = (_PENDING, _RUNNING)


@dataclass(frozen=True)
class Late:
    """A call that did not return within its deadline, or that could not start because its key's
    call of an earlier round is still running (the one ``running_s`` counts)."""

    running_s: float


class _Job:
    """One key's call in a round: its state and outcome."""

    __slots__ = ("name", "call", "state", "result", "error", "since")

    def __init__(self, name: str, call: Callable[[], object], since: float) -> None:
        self.name = name  # the runner's name while inside this call
        self.call = call
        self.state = _PENDING
        self.result: object = None
        self.error: BaseException | None = None
        self.since = since  # the caller's clock when its round began


class _Round:
    """One ``run_all``'s jobs, taken in order by the runner that owns the round; the caller gives the rest
    to another runner (``owner``) when the current call outlives its allowance, and closes the round at the
    deadline. ``lock`` guards ``next``, ``owner``, ``started`` and the jobs' PENDING -> RUNNING or CANCELLED."""

    __slots__ = ("jobs", "next", "owner", "started", "lock", "left", "latch")

    def __init__(self, jobs: list[_Job]) -> None:
        self.jobs = jobs
        self.next = 0
        self.owner: _Runner | None = None
        self.started = 0.0  # time.monotonic() when the owner's current call (or its ownership) began
        self.lock = threading.Lock()
        self.left = list(range(len(jobs)))  # one token per job; token 0, popped last, ends the caller's wait
        self.latch = threading.Lock()
        self.latch.acquire()  # released by the last of the jobs to finish

    def take(self, runner: _Runner) -> _Job | None:
        """The next job for ``runner``, marked RUNNING; None once the round is done or given to another."""
        with self.lock:
            if self.owner is not runner or self.next >= len(self.jobs):
                return None
            job = self.jobs[self.next]
            self.next += 1
            job.state = _RUNNING
            self.started = time.monotonic()
            return job

    def finish(self, job: _Job) -> None:
        """Marks the job done; the last one to finish lets the caller go (``list.pop`` is atomic: exactly one
        call pops token 0, so the latch is released once)."""
        job.state = _DONE
        if self.left.pop() == 0:
            self.latch.release()

    def hand_over(self, pool: _Pool, now: float) -> _Runner | None:
        """The calls not yet started given to a runner of ``pool`` (to be handed the round); None when there
        are none (nothing to move). Its allowance counts from ``now``."""
        with self.lock:
            if self.next >= len(self.jobs):
                return None
            self.owner, self.started = pool.get(), now
            return self.owner

    def close(self) -> None:
        """The deadline passed: the calls not yet started never start."""
        with self.lock:
            for job in self.jobs[self.next:]:
                job.state = _CANCELLED
            self.next = len(self.jobs)


class _Runner:
    """One thread that runs rounds handed to it (``_inbox``), returning to its pool between them."""

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool
        self._inbox: queue.SimpleQueue[_Round] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=pool.prefix, daemon=True)
        self._thread.start()

    def give(self, round_: _Round) -> None:
        self._inbox.put(round_)

    def _run(self) -> None:
        thread = self._thread
        while True:
            try:
                round_ = self._inbox.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                if self._pool.retire(self):
                    return
                continue  # taken from the pool meanwhile: its round is on the way
            job = round_.take(self)
            while job is not None:
                thread.name = job.name
                try:
                    job.result = job.call()
                except BaseException as exc:  # the caller's to see, per call
                    job.error = exc
                following = round_.take(self)
                if following is None:
                    thread.name = self._pool.prefix  # idle again (between two calls of a round it is not)
                    break
                round_.finish(job)
                job = following
            # Back in the pool before the round's last finish lets the caller go, so that the caller's next round
            # finds this runner idle rather than starting a thread.
            stay = self._pool.put_back(self)
            if job is not None:
                round_.finish(job)
            if not stay:
                return  # enough spares idle: this thread ends


class _Pool:
    """A ``Workers``' idle runners, the last one back first."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._idle: list[_Runner] = []
        self._lock = threading.Lock()

    def get(self) -> _Runner:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Runner(self)

    def put_back(self, runner: _Runner) -> bool:
        """Idle again; False when ``SPARE_RUNNERS`` are idle already (the runner's thread ends)."""
        with self._lock:
            if len(self._idle) >= SPARE_RUNNERS:
                return False
            self._idle.append(runner)
            return True

    def retire(self, runner: _Runner) -> bool:
        """An idle runner that waited ``IDLE_EXIT_S`` for nothing ends, unless just taken for a round."""
        with self._lock:
            if runner in self._idle:
                self._idle.remove(runner)
                return True
            return False


class Workers:
    """Rounds of per-key calls on a small pool of runner threads named ``<prefix>``; ``run_all`` is the only
    way in."""

    def __init__(self, prefix: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.prefix = prefix
        self._mono = monotonic
        self._pool = _Pool(prefix)
        self._last: dict[str, _Job] = {}  # each key's latest call
        self._names: dict[str, str] = {}  # each key's runner name, made once (the same keys every round)

    def busy(self, key: str) -> bool:
        """Whether ``key``'s call of an earlier round is still running (one that missed its deadline)."""
        job = self._last.get(key)
        return job is not None and job.state in _BUSY

    def _name(self, key: str) -> str:
        name = self._names[key] = f"{self.prefix}-{key}"
        return name

    def run_all(self, calls: Mapping[str, Callable[[], T]], deadline_s: float) -> dict[str, T | Late]:
        """Each key's call, one after another on a runner, within ``deadline_s``; what returned in time,
        else ``Late``. A key still inside an earlier round's call is not called again (``Late`` at once).

        A call's exception is raised here (after all calls were waited on; the others still ran). Calls must
        not share state with each other or with the caller while they run.
        """
        since = self._mono()
        last, names = self._last, self._names
        jobs = {key: _Job(names.get(key) or self._name(key), call, since) for key, call in calls.items()
                if (job := last.get(key)) is None or job.state not in _BUSY}  # not busy(key): a call less a key
        self._last.update(jobs)
        if jobs:
            self._wait(_Round(list(jobs.values())), max(deadline_s, 0.0))
        results: dict[str, T | Late] = {}
        now = self._mono()
        for key in calls:
            job = jobs.get(key)
            if job is not None and job.state is _DONE:
                if job.error is not None:
                    raise job.error
                results[key] = job.result  # type: ignore[assignment]  # the call's own T
            else:  # late, not started by the deadline, or its key's earlier call still running
                results[key] = Late(now - self._last[key].since)
        return results

    def _wait(self, round_: _Round, deadline_s: float) -> None:
        """Hands the round to a runner and waits for it, moving the calls not yet started to another runner
        when one outlives its allowance; at the deadline, the rest never start."""
        allowance_s = deadline_s * CALL_SHARE
        runner = round_.owner = self._pool.get()
        start = round_.started = time.monotonic()
        end = start + deadline_s
        runner.give(round_)
        wake = min(end, start + allowance_s)
        while not round_.latch.acquire(timeout=max(wake - time.monotonic(), 0.0)):
            now = time.monotonic()
            if now >= end:
                break
            if now >= round_.started + allowance_s:  # the current call is slow or stuck: the rest go on
                moved = round_.hand_over(self._pool, now)
                if moved is not None:
                    moved.give(round_)
            wake = min(end, round_.started + allowance_s)
            if wake <= now:  # the slow call is the round's last: only the deadline is left to wait for
                wake = end
        round_.close()
