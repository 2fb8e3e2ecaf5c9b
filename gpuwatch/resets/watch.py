"""GPU reset detection within one tick: new devcoredumps and WEDGED uevents -> per-GPU reset state.

amdgpu has no reset counter in sysfs (only the kernel log's ``GPU reset(N) succeeded!`` and a per-context
ioctl), so gpuwatch counts what the kernel announces: a device coredump naming the GPU (devcoredump.py)
and, on 6.15+ kernels, the WEDGED uevent (uevent.py). ``dump_events`` and ``uevent_events`` find this
tick's events (two stages: one that raises costs the other nothing, daemon/sense.py), ``update`` steps
each GPU's recovery (recovery.py, pure) with the tick's readings and processes and logs what it says.

The same uevents tell when a DRM card node comes or goes (``add``/``remove`` of ``.../drm/cardN``: a GPU
re-probed after a reset or a rebind, perhaps under a new number): ``on_cards_changed`` is called then,
so the GPU source discovers again at its next read instead of at its periodic rediscovery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gpuwatch.model import GpuProcess, GpuResetState, Snapshot
from gpuwatch.resets.devcoredump import DevCoredumps
from gpuwatch.resets.recovery import Recovery, ResetEvent, step
from gpuwatch.resets.uevent import UeventFeed, card_changed, wedged

log = logging.getLogger("gpuwatch.resets")


class ResetWatch:
    def __init__(self, dumps: DevCoredumps | None, uevents: UeventFeed | None, answer_ticks: int = 3,
                 on_cards_changed: Callable[[], None] | None = None) -> None:
        self.dumps = dumps
        self.uevents = uevents
        self.answer_ticks = answer_ticks
        self.on_cards_changed = on_cards_changed
        self._gpus: dict[str, Recovery] = {}
        # Each GPU's published state with the Recovery it was made from: ``step`` hands back the same (frozen)
        # Recovery while nothing happens to the GPU, so the state is made again only for another Recovery.
        self._shown: dict[str, tuple[Recovery, GpuResetState]] = {}

    def recovering(self) -> frozenset[str]:
        return frozenset(gpu_id for gpu_id, r in self._gpus.items() if r.recovering)

    def detect(self, snapshot: Snapshot) -> list[ResetEvent]:
        """Both stages at once (one that raises costs the other; the daemon runs them apart)."""
        gpu_ids = {gpu.gpu_id for gpu in snapshot.gpus}
        return self.dump_events(gpu_ids) + self.uevent_events(gpu_ids)

    def dump_events(self, gpu_ids: set[str]) -> list[ResetEvent]:
        events = []
        for dump in self.dumps.poll(gpu_ids) if self.dumps is not None else ():
            summary = dump.summary.line() + (f" ({dump.problem})" if dump.problem else "")
            events.append(ResetEvent(dump.gpu_id, "devcoredump", summary, str(dump.path) if dump.path else None))
        return events

    def uevent_events(self, gpu_ids: set[str]) -> list[ResetEvent]:
        events = []
        changed = False
        for datagram in self.uevents() if self.uevents is not None else ():
            changed = changed or card_changed(datagram)
            event = wedged(datagram)
            if event is None or event.gpu_id not in gpu_ids:
                continue
            summary = f"WEDGED={event.methods}"
            if event.methods != "none":
                summary += " (the driver could not recover it: it needs a driver rebind or a bus reset)"
            if event.pid is not None:
                summary += f", process {event.task or '?'} (pid {event.pid})"
            events.append(ResetEvent(event.gpu_id, "wedged uevent", summary))
        if changed and self.on_cards_changed is not None:
            log.debug("a DRM card node came or went: discovering the GPUs again")
            self.on_cards_changed()
        return events

    def update(self, snapshot: Snapshot, events: Iterable[ResetEvent], processes: Iterable[GpuProcess],
               now: float, now_unix: float) -> tuple[GpuResetState, ...]:
        by_gpu: dict[str, list[ResetEvent]] = {}
        for event in events:
            by_gpu.setdefault(event.gpu_id, []).append(event)
        stuck: dict[str, set[int]] = {}
        for row in processes:
            if row.state == "D":
                stuck.setdefault(row.gpu_id, set()).add(row.pid)
        for gpu in snapshot.gpus:
            r = self._gpus.get(gpu.gpu_id) or Recovery(gpu.gpu_id)
            r, logs = step(r, by_gpu.get(gpu.gpu_id, []), gpu, tuple(sorted(stuck.get(gpu.gpu_id, ()))), now,
                           now_unix, self.answer_ticks)
            for level, message in logs:
                log.log(logging.getLevelName(level.upper()), "%s", message)
            self._gpus[gpu.gpu_id] = r
        return self.published(snapshot)

    def published(self, snapshot: Snapshot) -> tuple[GpuResetState, ...]:
        """Each GPU's reset state as last stepped (a GPU never stepped: none yet).

        A state is remade only when its GPU's Recovery is another object than the one it was made from (a frozen
        Recovery is its whole input): 8 GPUs' states rebuilt unchanged were most of the reset watch's tick."""
        shown: dict[str, tuple[Recovery, GpuResetState]] = {}
        states = []
        for gpu in snapshot.gpus:
            recovery = self._gpus.get(gpu.gpu_id) or Recovery(gpu.gpu_id)
            last = self._shown.get(gpu.gpu_id)
            if last is None or last[0] is not recovery:
                last = (recovery, recovery.published())
            shown[gpu.gpu_id] = last
            states.append(last[1])
        self._shown = shown
        return tuple(states)
