"""The metric families of the clock rung (issue 36) and of the escalation ladder it completes.

* ``gpuwatch_clock_ceiling_mhz{gpu}``: the shader clock ceiling of ours in force (absent when none);
* ``gpuwatch_clock_ceiling_floor_mhz{gpu}``: the lowest ceiling the rung sets (still hot there: pause);
* ``gpuwatch_clock_limited_seconds_total{gpu}``: time with a ceiling of ours in force;
* ``gpuwatch_clock_state{gpu, state}``: the rung's mode, every known value 0 or 1;
* ``gpuwatch_clock_ceiling_writes_total``, ``..._write_errors_total``, ``..._resets_total`` (our ceiling
  found gone, a GPU reset or another tool, and taken again);
* ``gpuwatch_ladder_rung{gpu, rung}``: the highest rung of fan -> cap -> clock -> pause in use on the GPU
  (``PublishedState.ladder_rungs``: ``publish.live.rung_of``, as the live page shows it), 1 for that rung
  and 0 for the others.

Built from the PublishedState only (no I/O, no clock).
"""

from __future__ import annotations

from gpuwatch.model import ClockMode, PublishedState
from gpuwatch.publish.families import Family, counter, gauge
from gpuwatch.publish.live import RUNGS

# Each mode with its label value, listed once: a per-GPU series per mode every render (issue 52).
_CLOCK_MODES = tuple((known, known.value) for known in ClockMode)


def clock_families(state: PublishedState) -> list[Family]:
    ceiling = gauge("clock_ceiling", "Shader clock ceiling of gpuwatch's in force (absent: none).", unit="mhz")
    floor = gauge("clock_ceiling_floor", "Lowest shader clock ceiling the clock rung sets; still hot there: pause.",
                  unit="mhz")
    limited = counter("clock_limited_seconds", "Time with a shader clock ceiling of gpuwatch's in force.")
    mode = gauge("clock_state", "1 for the clock rung's current state of the GPU, 0 for the others.",
                 labels=("gpu", "state"))
    writes = counter("clock_ceiling_writes", "Shader clock ceiling writes (each read back).")
    errors = counter("clock_ceiling_write_errors", "Failed shader clock ceiling writes.")
    resets = counter("clock_ceiling_resets", "A ceiling of gpuwatch's found gone (GPU reset, another tool), set again.")
    rung = gauge("ladder_rung", "1 for the highest rung of fan -> cap -> clock -> pause in use on the GPU.",
                 labels=("gpu", "rung"))
    # Straight into the rows (label values as a tuple): an add_metric call per series was a tenth of the render.
    mode_rows, rung_rows = mode.rows, rung.rows
    for clock in state.clocks:
        labels = (clock.gpu_id,)
        if clock.ceiling_mhz is not None:
            ceiling.rows.append((labels, clock.ceiling_mhz))
        if clock.floor_mhz is not None:
            floor.rows.append((labels, clock.floor_mhz))
        limited.rows.append((labels, clock.limited_seconds_total))
        for known, label in _CLOCK_MODES:
            mode_rows.append(((clock.gpu_id, label), 1 if clock.mode == known else 0))
        writes.rows.append((labels, clock.writes_total))
        errors.rows.append((labels, clock.write_errors_total))
        resets.rows.append((labels, clock.resets_total))
    for gpu_id, used in state.ladder_rungs:  # publish.live.rung_of, per GPU that is up
        for name in RUNGS:
            rung_rows.append(((gpu_id, name), 1 if name == used else 0))
    return [ceiling, floor, limited, mode, writes, errors, resets, rung]
