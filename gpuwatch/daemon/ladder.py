"""One tick's decide-and-act: the ladder's rungs in their order, each part in a guard of its own.

The order is the ladder (docs/power.md): the fans first; the power caps next (they need to know whether
the fans can still rise); the clock ceiling once a cap is at its floor; the training runs, which pause
only where the caps and the clock cannot hold the limit; last, the processes not run under gpuwatch,
stopped only past crit with every other rung spent. A part that raises costs its own rung for this tick
(``Guard``), never the others or the loop. On every exit path ``hand_back`` gives each rung back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from gpuwatch.actuation.actuator import RestoreFailed
from gpuwatch.config.file import Config
from gpuwatch.daemon.compose import Parts
from gpuwatch.model import Acted, Snapshot

log = logging.getLogger("gpuwatch")
T = TypeVar("T")


@dataclass
class Guard:
    """Runs one part of the daemon: what it raises is logged once per episode and kept in ``failures``
    (published with every tick while it lasts), and the fallback stands in for its result."""

    failures: dict[str, str] = field(default_factory=dict)

    def __call__(self, part: str, action: Callable[[], T], fallback: T) -> T:
        try:
            result = action()
        except (OSError, RestoreFailed) as exc:
            # What the environment does (a full or read-only disk, a hung or refusing device): one line,
            # once per episode; the published failure says it on every tick while it lasts.
            if part not in self.failures:
                log.error("%s failed: %s", part, exc)
            self.failures[part] = f"{type(exc).__name__}: {exc}"
            return fallback
        except Exception as exc:
            if part not in self.failures:
                log.exception("%s failed", part)  # a defect: the traceback is for whoever fixes it
            self.failures[part] = f"{type(exc).__name__}: {exc}"
            return fallback
        self.failures.pop(part, None)
        return result


def act(parts: Parts, snapshot: Snapshot, config: Config, guard: Guard) -> Acted:
    """Every rung on this tick's snapshot and the live ``config``, in the ladder's order; each sees the rungs
    below it (``Acted``, filled as the ladder climbs)."""
    acted = Acted()
    fan_part, power_part, clock_part, trainer_part = parts.fans, parts.power, parts.clock, parts.trainers
    unmanaged_part = parts.unmanaged
    if fan_part is not None:
        acted = replace(acted, fans=guard("fan controller", lambda: fan_part.tick(snapshot, config), ()))
    if power_part is not None:
        below = acted
        acted = replace(acted, powers=guard("power governor", lambda: power_part.tick(snapshot, below, config), ()))
    if clock_part is not None:
        below = acted
        acted = replace(acted, clocks=guard("clock ceiling", lambda: clock_part.tick(snapshot, below, config), ()))
    if trainer_part is not None:
        below = acted
        acted = replace(acted, trainers=guard("supervisor", lambda: trainer_part.tick(snapshot, below, config), ()))
    if unmanaged_part is not None:
        below = acted
        acted = replace(acted, unmanaged=guard("unmanaged processes",
                                               lambda: unmanaged_part.tick(snapshot, below, config), ()))
    return acted


def hand_back(parts: Parts, guard: Guard) -> None:
    """Every exit path of the daemon: the runs first (they get their checkpoint time), then the processes
    stopped past crit continued, then the fans back to the firmware, the caps and the clock ceilings to
    what was found (each through its actuator's restore-all, on the GPUs' workers)."""
    if parts.trainers is not None:
        guard("supervisor stop", parts.trainers.stop, None)
    if parts.unmanaged is not None:
        guard("unmanaged processes resume", parts.unmanaged.stop, None)
    if parts.fans is not None:
        guard("fan restore", parts.fans.restore, None)
    if parts.power is not None:
        guard("power cap restore", parts.power.restore, None)
    if parts.clock is not None:
        guard("clock ceiling restore", parts.clock.restore, None)
