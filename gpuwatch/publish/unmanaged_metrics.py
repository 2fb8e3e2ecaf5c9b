"""The families of GPU processes not run under gpuwatch that the daemon stops past crit (``[unmanaged]``,
supervise/unmanaged.py), from the PublishedState only. Per GPU, never per pid (docs/metrics.md)."""

from __future__ import annotations

from gpuwatch.model import PublishedState
from gpuwatch.publish.families import Family, counter, gauge


def unmanaged_families(state: PublishedState) -> list[Family]:
    stopped = gauge("unmanaged_stopped_processes", "Processes not run under gpuwatch held SIGSTOPped now because "
                    "the GPU is past crit and neither fan nor power cap can do more ([unmanaged] on_hot = \"stop\").",
                    ["gpu"])
    stops = counter("unmanaged_stops", "Processes not run under gpuwatch SIGSTOPped past crit since the daemon "
                    "started.", ["gpu"])
    for gpu in state.unmanaged:  # straight into the rows, label values as a tuple (issue 52)
        labels = (gpu.gpu_id,)
        stopped.rows.append((labels, len(gpu.stopped_pids)))
        stops.rows.append((labels, gpu.stops_total))
    return [stopped, stops]
