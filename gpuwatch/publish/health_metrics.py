"""The metric families of a GPU's own health reports: throttling, energy and PCIe (no I/O).

They come from what gpus/telemetry.py, gpus/pcie.py and gpus/accounting.py put into each reading;
metrics.py renders them after the gauges. Absent stays absent: a card whose table has no throttle
bits has no throttle series, a device path without AER files no AER series.
"""

from __future__ import annotations

from gpuwatch.model import THROTTLE_REASONS, GpuReading
from gpuwatch.publish.families import Family, GpuGauge, counter, gauge, gpu_gauges

# The PCIe link in the slot.
_SLOT_LINK: tuple[GpuGauge, ...] = (
    ("gpu_pcie_slot_link_speed_transfers_per_second",
     "Current speed of the link in the slot (above the card's own PCIe switch where it has one).",
     "pcie_slot_link_speed_gts", 1e9),
    ("gpu_pcie_slot_link_max_speed_transfers_per_second", "Highest speed both ends of the slot link support.",
     "pcie_slot_max_link_speed_gts", 1e9),
    ("gpu_pcie_slot_link_width_lanes", "Current width of the link in the slot.", "pcie_slot_link_width", 1.0),
    ("gpu_pcie_slot_link_max_width_lanes", "Widest both ends of the slot link support.", "pcie_slot_max_link_width",
     1.0),
)


def health(gpus: tuple[GpuReading, ...]) -> list[Family]:
    slot = gpu_gauges(_SLOT_LINK, gpus)
    active = gauge("gpu_throttle_active", "1 for each reason the card throttles itself for now (power, current, "
                   "thermal, other: gpu_metrics throttle bits), 0 for the others.", ["gpu", "reason"])
    throttled = counter("gpu_throttled_seconds", "Seconds the card throttled itself, by reason (sampled every tick).",
                        ["gpu", "reason"])
    energy = counter("gpu_energy_joules", "Energy the GPU used since the daemon started; source: the firmware's "
                     "accumulator or power integrated between ticks.", ["gpu", "source"])
    aer = counter("gpu_pcie_aer_errors", "PCIe errors (AER) detected on the path from the GPU to its slot, by kind "
                  "(correctable, nonfatal, fatal).", ["gpu", "kind"])
    replays = counter("gpu_pcie_replays", "PCIe replays (NAKs sent and received), amdgpu's pcie_replay_count.")
    # Straight into the rows (label values as a tuple): an add_metric call per series was a tenth of the render.
    for gpu in gpus:
        if not gpu.up:
            continue
        gpu_id = gpu.gpu_id
        if gpu.throttle_reasons is not None:
            for reason in THROTTLE_REASONS:
                active.rows.append(((gpu_id, reason), 1 if reason in gpu.throttle_reasons else 0))
        for reason, seconds in gpu.throttled_s:
            throttled.rows.append(((gpu_id, reason), seconds))
        if gpu.energy_joules is not None and gpu.energy_source is not None:
            energy.rows.append(((gpu_id, gpu.energy_source), gpu.energy_joules))
        for kind, count in (("correctable", gpu.pcie_aer_correctable_total),
                                ("nonfatal", gpu.pcie_aer_nonfatal_total), ("fatal", gpu.pcie_aer_fatal_total)):
            if count is not None:
                aer.rows.append(((gpu_id, kind), count))
        if gpu.pcie_replays_total is not None:
            replays.rows.append(((gpu_id,), gpu.pcie_replays_total))
    return [*slot, active, throttled, energy, aer, replays]
