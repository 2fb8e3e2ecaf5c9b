"""The simulated cards: what differs between the RX 5600 XT (navi10.py) and the Navi 31-like card (navi31.py).

A profile is the card's files, its power cap range (the floor amdgpu enforces since Linux 6.7 is
``cap_min_uw``), its top shader clock and its physics; the driver (driver.py) and the cards (cards.py) read
everything card-specific from here, so the RX 5600 XT behaves exactly as before profiles existed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuwatch.sim import navi10, navi31
from gpuwatch.sim.physics import ThermalParams


@dataclass(frozen=True)
class CardProfile:
    name: str
    files: Callable[[bool], dict[str, str]]  # fan1_input -> every file of one card
    cap_uw: int
    cap_min_uw: int
    cap_max_uw: int
    sclk_max_mhz: float
    params: ThermalParams
    clock_files: bool  # the card has the OD table and the performance level the clock rung drives


PROFILES = {
    "rx5600xt": CardProfile("RX 5600 XT", navi10.card_files, navi10.POWER_CAP_UW, navi10.POWER_CAP_MIN_UW,
                            navi10.POWER_CAP_MAX_UW, navi10.SCLK_MAX_MHZ, ThermalParams(), clock_files=False),
    "navi31": CardProfile("Navi 31-like", navi31.card_files, navi31.POWER_CAP_UW, navi31.POWER_CAP_MIN_UW,
                          navi31.POWER_CAP_MAX_UW, navi31.SCLK_MAX_MHZ, navi31.PARAMS, clock_files=True),
}
