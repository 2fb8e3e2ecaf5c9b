"""Thermal limits per GPU sensor (pure): the line above which a trainer is paused and status fails.

A configured limit wins; otherwise junction and mem limits are derived from the card's own crit
temperature (crit minus a margin), since crit differs per board (SYSFS_FACTS.md §4.1: 94-120 °C).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import Config
from gpuwatch.model import GpuReading, SensorLimit, Snapshot, TempReading


@dataclass(frozen=True)
class LimitBreach:
    gpu_id: str
    sensor: str
    temp_c: float
    limit_c: float


def sensor_limit_c(temp: TempReading, thermal: ThermalConfig) -> float | None:
    """The pause/alarm limit for one sensor, or None when neither config nor crit gives one."""
    if temp.label == "edge":
        return thermal.edge_limit_c
    if temp.label == "junction":
        return _limit(thermal.junction_limit_c, temp.crit_c, thermal.junction_crit_margin_c)
    if temp.label == "mem":
        return _limit(thermal.mem_limit_c, temp.crit_c, thermal.mem_crit_margin_c)
    return None


def limits_in_force(snapshot: Snapshot, thermal: ThermalConfig) -> tuple[SensorLimit, ...]:
    """Every sensor's limit under ``thermal``, in the snapshot's order; a sensor without one is left out.

    Computed once per tick into the published state (``PublishedState.limits_c``), so /metrics and the
    status document show the limits in force at that tick instead of keeping their own ``[thermal]``.
    """
    found = []
    for gpu in snapshot.gpus:
        for temp in gpu.temps:
            limit_c = sensor_limit_c(temp, thermal)
            if limit_c is not None:
                found.append(SensorLimit(gpu.gpu_id, temp.label, limit_c))
    return tuple(found)


class LimitsInForce:
    """``limits_in_force``, the same tuple again while what it is made from is the same: the ``[thermal]`` object
    (a reload brings a new one, never an edited one) and each sensor's GPU, label and crit, in order. Made anew each
    tick it was 24 frozen ``SensorLimit``s at 8 GPUs, a quarter of ``published_state`` (issue 52); a crit changes
    rarely. A crit of 0 is told from -0 (equal, but their limits print differently when the margin is 0)."""

    def __init__(self) -> None:
        self._thermal: ThermalConfig | None = None
        self._sensors: tuple[tuple[str, str, object], ...] = ()
        self._limits: tuple[SensorLimit, ...] = ()

    def __call__(self, snapshot: Snapshot, thermal: ThermalConfig) -> tuple[SensorLimit, ...]:
        sensors = tuple((gpu.gpu_id, t.label, t.crit_c if t.crit_c else repr(t.crit_c))
                        for gpu in snapshot.gpus for t in gpu.temps)
        if thermal is not self._thermal or sensors != self._sensors:
            self._thermal, self._sensors, self._limits = thermal, sensors, limits_in_force(snapshot, thermal)
        return self._limits


def limits_by_sensor(limits: Iterable[SensorLimit]) -> dict[tuple[str, str], float]:
    """``limits`` (a state's ``limits_c``) by (gpu_id, sensor), the first of each as ``PublishedState.limit_c``
    answers: the status document and the live summary look up every sensor of every GPU, and ``limit_c``'s scan
    of every limit per sensor was a tenth of each (24 lookups of 24 limits at 8 GPUs)."""
    found: dict[tuple[str, str], float] = {}
    for limit in limits:
        found.setdefault((limit.gpu_id, limit.sensor), limit.limit_c)
    return found


def over_limit(temp_c: float | None, limit_c: float | None, margin_c: float = 0.0) -> bool | None:
    """At or above the limit minus ``margin_c``; None when the temperature or the limit is unknown.

    The one rule behind the supervisor's pauses, ``over_limit`` in the status document and
    ``gpuwatch_gpu_thermal_over_limit``.
    """
    if temp_c is None or limit_c is None:
        return None
    return temp_c >= limit_c - margin_c


def breaches(gpu: GpuReading, thermal: ThermalConfig, margin_c: float = 0.0) -> list[LimitBreach]:
    """Sensors at or above their limit minus ``margin_c`` (use the hysteresis for "still hot")."""
    found = []
    for temp in gpu.temps:
        limit = sensor_limit_c(temp, thermal)
        if over_limit(temp.temp_c, limit, margin_c):
            assert temp.temp_c is not None and limit is not None  # over_limit is None when either is
            found.append(LimitBreach(gpu.gpu_id, temp.label, temp.temp_c, limit))
    return found


def _limit(configured: float | None, crit_c: float | None, margin_c: float) -> float | None:
    if configured is not None:
        return configured
    return None if crit_c is None else crit_c - margin_c


def thermals_on(config: Config, gpu_id: str) -> list[ThermalConfig]:
    """[thermal] and the limits of every trainer on this GPU: the governor and the clock rung hold the strictest."""
    base = config.thermal
    return [base] + [t.thermal(base) for t in config.trainer if not t.gpus or gpu_id in t.gpus]


class ThermalsOn:
    """``thermals_on`` of each GPU, made once per configuration: the limit sets change only with it (a reload's new
    Config makes them again), while making them copies each trainer's limits, every GPU, every tick. The lists
    handed out are shared: read them, never change them."""

    def __init__(self) -> None:
        self._config: Config | None = None
        self._by_gpu: dict[str, list[ThermalConfig]] = {}

    def __call__(self, config: Config, gpu_id: str) -> list[ThermalConfig]:
        if config is not self._config:
            self._config, self._by_gpu = config, {}
        found = self._by_gpu.get(gpu_id)
        if found is None:
            found = self._by_gpu[gpu_id] = thermals_on(config, gpu_id)
        return found


def headroom_c(gpu: GpuReading, thermals: Iterable[ThermalConfig]) -> float | None:
    """The smallest (pause limit - reading) over the GPU's sensors and every limit set that applies to
    it ([thermal] and each trainer's on this GPU); None without a usable temperature."""
    room = [
        limit - temp.temp_c
        for thermal in thermals
        for temp in gpu.temps
        if temp.temp_c is not None and (limit := sensor_limit_c(temp, thermal)) is not None
    ]
    return min(room, default=None)
