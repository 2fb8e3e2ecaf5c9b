"""The hardware misbehaviour the simulator injects: what (SimFaults), on which cards, and when each card gets it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuwatch.sim.driver import SimCard, remove, write

log = logging.getLogger("gpuwatch.simulator")


@dataclass(frozen=True)
class SimFaults:
    """Hardware misbehaviour to inject; times are simulated seconds since start."""

    fan_stuck_ratio: float | None = None
    sensor_garbage: bool = False
    firmware_reset_every_s: float | None = None
    disappear_after_s: float | None = None
    gpu_reset_at_s: tuple[float, ...] = ()
    gpu_reset_outage_s: float = 5.0
    gpu_reset_stuck_s: float | None = None
    power_cap_readonly: bool = False  # power1_cap 0444 and every write reverted (a firmware ignoring it)
    cards: tuple[int, ...] = ()  # card indexes the faults hit; empty: every card

    def hits(self, index: int) -> bool:
        return not self.cards or index in self.cards

    def stuck_ratio(self, index: int) -> float | None:
        """The duty card ``index``'s fan is stuck at, whatever is written; None: it obeys."""
        return self.fan_stuck_ratio if self.hits(index) else None

    def cap_readonly(self, index: int) -> bool:
        return self.power_cap_readonly and self.hits(index)

    def garbage(self, index: int) -> bool:
        return self.sensor_garbage and self.hits(index)


def schedule(faults: SimFaults, index: int) -> tuple[float | None, list[float]]:
    """Card ``index``'s first firmware reset and its GPU resets, in simulated seconds (none for a card spared)."""
    if not faults.hits(index):
        return None, []
    return faults.firmware_reset_every_s, sorted(faults.gpu_reset_at_s)


def arm(root: Path, card: SimCard, faults: SimFaults) -> None:
    """What a fault changes in the tree before the first step: a read-only power1_cap."""
    if faults.cap_readonly(card.index):
        (root / card.hwmon_dir / "power1_cap").chmod(0o444)


def apply_faults(root: Path, card: SimCard, faults: SimFaults, sim_now_s: float,
                 inject_reset: Callable[[str], object]) -> bool:
    """Inject the faults due by ``sim_now_s``; False when the card fell off the bus."""
    if not faults.hits(card.index):
        return True
    if card.next_reset_s is not None and faults.firmware_reset_every_s and sim_now_s >= card.next_reset_s:
        # The firmware took the fan back (a GPU reset, a resume from suspend, RDNA3's snap-back).
        write(root / card.hwmon_dir / "pwm1_enable", "2")
        card.next_reset_s += faults.firmware_reset_every_s
        log.info("simulated firmware reset of %s: pwm1_enable back to 2", card.gpu_id)
    while card.gpu_resets_at_s and sim_now_s >= card.gpu_resets_at_s[0]:
        card.gpu_resets_at_s.pop(0)
        inject_reset(card.gpu_id)
    if faults.disappear_after_s is not None and sim_now_s >= faults.disappear_after_s:
        remove(root, card)
        log.warning("simulated card %s fell off the bus", card.gpu_id)
        return False
    return True
