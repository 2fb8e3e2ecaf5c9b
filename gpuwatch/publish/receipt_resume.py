"""Job receipts across a daemon restart (pure): what the previous daemon published, taken back when trustworthy,
and the time no daemon ran said on each receipt rather than silently merged.

A ten-day job outlives daemon upgrades, crashes and `systemctl restart gpuwatch`; its receipt must still
cover the whole job or say what it did not see. The previous daemon's last document (the state file a killed
daemon leaves, or the one a stopped daemon kept: publish/receipt_store.py) is parsed here: ``carried`` accepts it
only from this boot (``daemon.boot_id``: the GPUs' counters and the runtime directory are this boot's) and
well-formed throughout, else raises ``Untrusted`` with the one-line reason; the newest ``kept`` receipts only.

``resume`` then applies the gap at the new daemon's first tick: every job that was on a GPU at the previous
daemon's last tick gets the seconds between the two ticks as ``unobserved_s`` (and the gap in ``gaps``): its
temperatures, throttling, caps and pauses were not seen then. The gap's energy is the job's when the GPU's own
firmware counter tells it (``grew``: same boot, same GPU, the counter trusted before and not gone back, the job
on that GPU before and after, gpus/accounting.counter_grew); else the GPU's ``energy_unseen_s`` says it is
left out. A job that ended before the restart gets no gap; one first seen after it starts its receipt then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from gpuwatch.model import JobGpuReceipt, JobReceipt, JobStart, PublishedState
from gpuwatch.publish.decode import Invalid
from gpuwatch.publish.decode import need_dict as _dict
from gpuwatch.publish.decode import need_list as _list
from gpuwatch.publish.decode import need_number as _number
from gpuwatch.publish.decode import need_str as _str

# The gaps a receipt lists (its unobserved_s counts them all): a job restarted through often stays bounded.
GAPS_LISTED = 16


# The previous daemon's document is not one to take receipts back from; the message says why (one exception
# for the field checks of publish/decode.py and the ones here).
Untrusted = Invalid


@dataclass(frozen=True)
class GapCounter:
    """A GPU's firmware energy counter at the previous daemon's last tick, where it was the trusted source."""

    gpu_id: str
    unique_id: str | None
    energy_j: float


@dataclass(frozen=True)
class Carried:
    """What the next daemon takes back from the previous one's last document."""

    taken_unix: float  # its last tick
    jobs: tuple[JobReceipt, ...]
    on: frozenset[tuple[str, str]]  # (job_id, gpu_id): the jobs on each GPU at that tick
    counters: tuple[GapCounter, ...] = ()


def carried(document: object, boot_id: str | None, kept: int) -> Carried:
    """The receipts of ``document`` (a parsed state file) when it is this boot's (``boot_id``) and well-formed."""
    doc = _dict(document, "the document")
    daemon = _dict(doc.get("daemon"), "daemon")
    theirs = daemon.get("boot_id")
    if boot_id is None:
        raise Untrusted("this boot's id is unknown (no /proc/sys/kernel/random/boot_id)")
    if theirs != boot_id:
        raise Untrusted("written in another boot" if isinstance(theirs, str) else "it records no boot id")
    taken = _number(doc.get("taken_unix"), "taken_unix")
    jobs = tuple(_job(raw, f"jobs[{i}]") for i, raw in enumerate(_list(doc.get("jobs"), "jobs")))
    on = set()
    for i, raw in enumerate(_list(doc.get("processes"), "processes")):
        row = _dict(raw, f"processes[{i}]")
        if row.get("job_id") is not None:
            job_id = _str(row.get("job_id"), f"processes[{i}].job_id")
            on.add((job_id, _str(row.get("gpu_id"), f"processes[{i}].gpu_id")))
    counters = []
    for i, raw in enumerate(_list(doc.get("gpus"), "gpus")):
        gpu = _dict(raw, f"gpus[{i}]")
        if gpu.get("energy_source") == "accumulator" and gpu.get("energy_accumulator_j") is not None:
            unique = gpu.get("unique_id")
            counters.append(GapCounter(_str(gpu.get("gpu_id"), f"gpus[{i}].gpu_id"),
                                       unique if isinstance(unique, str) else None,
                                       _number(gpu.get("energy_accumulator_j"), f"gpus[{i}].energy_accumulator_j")))
    newest = sorted(jobs, key=lambda r: (not r.active, -r.last_seen_unix, r.job_id))[:kept]
    return Carried(taken, tuple(newest), frozenset(on), tuple(counters))


def resume(carried_: Carried, state: PublishedState,
           counter_grew: Callable[[float, float, float], float | None]) -> tuple[JobReceipt, ...]:
    """The taken-back receipts with the gap up to ``state`` (the new daemon's first tick) said on each job that
    was on a GPU at the previous daemon's last tick. ``counter_grew(before_j, after_j, seconds)``: the joules a
    trusted firmware counter grew by across the gap, None when not known (gpus/accounting.counter_grew)."""
    now = state.snapshot.taken_unix
    gap_s = max(0.0, now - carried_.taken_unix)
    on_now = {(row.job_id, row.gpu_id) for row in state.snapshot.processes if row.job_id is not None}
    grew = {}
    for before in carried_.counters:
        reading = state.snapshot.gpu(before.gpu_id)
        # The same GPU (its unique id, where it has one), up, its counter read: else the gap's energy is unknown.
        if reading is not None and reading.up and reading.energy_accumulator_j is not None \
                and reading.unique_id == before.unique_id:
            grew[before.gpu_id] = counter_grew(before.energy_j, reading.energy_accumulator_j, gap_s)
    out = []
    for receipt in carried_.jobs:
        if not receipt.active:
            out.append(receipt)
            continue
        gpus = tuple(_gpu_gap(gpu, gap_s, grew.get(gpu.gpu_id) if (receipt.job_id, gpu.gpu_id) in on_now else None)
                     if (receipt.job_id, gpu.gpu_id) in carried_.on else gpu for gpu in receipt.gpus)
        out.append(replace(receipt, gpus=gpus, unobserved_s=receipt.unobserved_s + gap_s,
                           gaps=(*receipt.gaps, (carried_.taken_unix, now))[-GAPS_LISTED:]))
    return tuple(out)


def unseen_before(jobs: tuple[JobReceipt, ...], started: Mapping[str, JobStart], daemon_started_unix: float,
                  now: float) -> tuple[JobReceipt, ...]:
    """At the first tick (``now``) of a daemon that took no receipts back (none kept, another boot's, unreadable):
    each job on a GPU then that started before this daemon did (``started``: where the scheduler gives it, its
    cgroup's creation, else the earliest start of its processes: procs/jobs.job_start) gets the time from its
    start to ``now`` as a gap it did not see, that time's energy left out on each of its GPUs, and which start it
    was (``unseen_from``): its receipt never reads as the whole job when it is not. A start not known adds nothing
    (the journal says the receipts started empty)."""
    out = []
    for receipt in jobs:
        start = started.get(receipt.job_id)
        if not receipt.active or receipt.first_seen_unix != now or start is None \
                or not 0 < start.start_unix < daemon_started_unix <= now:
            out.append(receipt)
            continue
        gap_s = now - start.start_unix
        gpus = tuple(replace(gpu, energy_unseen_s=gpu.energy_unseen_s + gap_s) for gpu in receipt.gpus)
        out.append(replace(receipt, gpus=gpus, unobserved_s=receipt.unobserved_s + gap_s,
                           gaps=((start.start_unix, now), *receipt.gaps)[-GAPS_LISTED:], unseen_from=start.source))
    return tuple(out)


def _gpu_gap(gpu: JobGpuReceipt, gap_s: float, grew_j: float | None) -> JobGpuReceipt:
    if grew_j is None:
        return replace(gpu, energy_unseen_s=gpu.energy_unseen_s + gap_s)
    return replace(gpu, energy_j=gpu.energy_j + grew_j, gap_energy_j=gpu.gap_energy_j + grew_j)


def _job(raw: object, where: str) -> JobReceipt:
    job = _dict(raw, where)
    user = job.get("user")
    if user is not None:
        user = _str(user, f"{where}.user")
    active = job.get("active")
    if not isinstance(active, bool):
        raise Untrusted(f"{where}.active is not true or false")
    unseen_from = job.get("unseen_from")
    if unseen_from not in (None, "scheduler", "processes"):
        raise Untrusted(f"{where}.unseen_from is not scheduler, processes or null")
    return JobReceipt(job_id=_str(job.get("job_id"), f"{where}.job_id"), user=user,
                      first_seen_unix=_number(job.get("first_seen_unix"), f"{where}.first_seen_unix"),
                      last_seen_unix=_number(job.get("last_seen_unix"), f"{where}.last_seen_unix"),
                      active=active, paused_s=_number(job.get("paused_s"), f"{where}.paused_s"),
                      gpus=tuple(_gpu(g, f"{where}.gpus[{i}]") for i, g in enumerate(_list(job.get("gpus"),
                                                                                            f"{where}.gpus"))),
                      unobserved_s=_number(job.get("unobserved_s", 0.0), f"{where}.unobserved_s"),
                      gaps=_gaps(job.get("gaps", []), f"{where}.gaps"), unseen_from=unseen_from)


def _gpu(raw: object, where: str) -> JobGpuReceipt:
    gpu = _dict(raw, where)
    resets = gpu.get("resets")
    if not isinstance(resets, int) or isinstance(resets, bool) or resets < 0:
        raise Untrusted(f"{where}.resets is not a count")
    return JobGpuReceipt(
        gpu_id=_str(gpu.get("gpu_id"), f"{where}.gpu_id"), energy_j=_number(gpu.get("energy_j"), f"{where}.energy_j"),
        max_temps_c=_table(gpu.get("max_temps_c"), f"{where}.max_temps_c", signed=True),
        governed_s=_number(gpu.get("governed_s"), f"{where}.governed_s"),
        throttled_s=_table(gpu.get("throttled_s"), f"{where}.throttled_s"), resets=resets,
        gap_energy_j=_number(gpu.get("gap_energy_j", 0.0), f"{where}.gap_energy_j"),
        energy_unseen_s=_number(gpu.get("energy_unseen_s", 0.0), f"{where}.energy_unseen_s"))


def _gaps(raw: object, where: str) -> tuple[tuple[float, float], ...]:
    gaps = []
    for pair in _list(raw, where):
        if not isinstance(pair, list) or len(pair) != 2:
            raise Untrusted(f"{where} is not a list of [from_unix, to_unix]")
        gaps.append((_number(pair[0], where), _number(pair[1], where)))
    return tuple(gaps)


def _table(raw: object, where: str, signed: bool = False) -> tuple[tuple[str, float], ...]:
    table = _dict(raw, where)
    return tuple(sorted((key, _number(value, f"{where}.{key}", signed)) for key, value in table.items()))
