"""The health checks as one table (code, `[health] off` name, class, on by default, meaning), and the one-line
form every reader parses (``gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe``).

Imports nothing, so `gpuwatch health` renders a verdict without loading the daemon's modules (it must answer
within milliseconds). The codes are never renumbered: drain reasons, NPD conditions and alert rules match them
(docs/cluster.md lists the same table).
"""

from __future__ import annotations

PREFIX = "gpuwatch:"  # a Slurm drain reason that starts with it is gpuwatch's own: only those are resumed
MAX_MESSAGE_CHARS = 80  # node-problem-detector's max_output_length in AMD's and the usual plugin configs

STALE, NO_DAEMON, UNUSABLE, FUTURE = "G001", "G002", "G014", "G015"
GPU_DOWN, FAN_UNCONTROLLED, FAN_FAILSAFE, FAN_STALLED, OVER_CRIT = "G004", "G005", "G006", "G007", "G008"
RESET_STUCK, RESET_RECOVERING, PCIE_WIDTH, PCIE_SPEED, AER_FATAL = "G009", "G010", "G011", "G012", "G013"
AER_NONFATAL = "G016"

# The health checks, one row each: (code, its name in `[health] off` (None: never off), its fault class (None: the
# daemon's own: every class), on by default, what it means). A new check is a row here and its predicate in
# publish/verdict.py's ``PREDICATES`` (docs/architecture.md "How to add a health check"); docs/cluster.md's table and
# deploy/kubernetes's NPD conditions are checked against it (tests/cluster/test_health_table.py).
# The daemon's own checks that guard the verdict itself cannot be turned off: a stale (G001), unusable (G014) or
# future-stamped (G015) state is no verdict at all, and `off` may not hide that nothing guards the GPUs. Only "no
# daemon" (G002) can: a node that runs gpuwatch as a check only, without its daemon.
CHECKS = (
    (STALE, None, None, True, "the daemon's state is stale: its loop is stuck, nothing guards the GPUs"),
    (NO_DAEMON, "daemon_down", None, True, "no daemon runs: nothing guards the GPUs"),
    (UNUSABLE, None, None, True, "the daemon runs but its published state cannot be used (not its document, or "
                                 "garbage): no verdict"),
    (FUTURE, None, None, True, "the daemon's state is stamped in the future (a clock stepped, on another boot or "
                               "with no boot-time stamp): its freshness cannot be told"),
    (GPU_DOWN, "gpu_down", "gpu", True, "a GPU is gone or does not answer"),
    (FAN_UNCONTROLLED, "fan_uncontrolled", "fan", True, "a fan should be driven and cannot be written"),
    (FAN_FAILSAFE, "fan_failsafe", "fan", True, "a fan in failsafe (full speed): temperature missing or frozen, "
                                                "GPU gone"),
    (FAN_STALLED, "fan_stalled", "fan", True, "a driven fan stopped"),
    (OVER_CRIT, "over_crit", "thermal", True, "a sensor at or above the card's crit for longer than over_crit_s"),
    (RESET_STUCK, "reset_stuck", "reset", True, "processes stuck in D state hold a GPU after its reset"),
    (RESET_RECOVERING, "reset_recovering", "reset", True, "a GPU reset and is not usable yet"),
    (PCIE_WIDTH, "pcie_width", "pcie", True, "the slot's PCIe link is narrower than both ends support"),
    # Off by default: amdgpu's PCIe DPM lowers the speed at idle, so a lower speed alone is normal; a lower width
    # is not (a badly seated card, a bad riser).
    (PCIE_SPEED, "pcie_speed", "pcie", False, "the slot's PCIe link is slower than both ends support"),
    (AER_FATAL, "aer_fatal", "pcie", True, "a fatal PCIe error (AER) on the path to the GPU"),
    # Off by default: the count is since boot, and a non-fatal error was recovered by the hardware; one alone would
    # keep a node drained until its reboot. For sites that retire a link on any uncorrectable error (DCGM's PCIe
    # watch, Primus-SaFE's monitor 308).
    (AER_NONFATAL, "aer_nonfatal", "pcie", False, "a non-fatal uncorrectable PCIe error (AER) on the path to the GPU"),
)

# code -> (its name in `[health] off`, what it means)
CODES: dict[str, tuple[str | None, str]] = {code: (name, meaning) for code, name, _, _, meaning in CHECKS}
NAMES = tuple(name for _, name, _, _, _ in CHECKS if name is not None)  # what `[health] off` may name
OFF_BY_DEFAULT = tuple(name for _, name, _, on, _ in CHECKS if name is not None and not on)

# The fault classes a remediation maps one to one (`gpuwatch health --class`, one NPD condition each:
# deploy/kubernetes). The daemon's own codes (DAEMON_CODES) belong to every class: without a fresh verdict no
# class can be said healthy.
DAEMON_CODES = tuple(code for code, _, fault_class, _, _ in CHECKS if fault_class is None)
_CLASS_NAMES = dict.fromkeys(fault_class for _, _, fault_class, _, _ in CHECKS if fault_class is not None)
CLASSES: dict[str, tuple[str, ...]] = {
    name: tuple(code for code, _, fault_class, _, _ in CHECKS if fault_class == name) for name in _CLASS_NAMES}


def fault_line(code: str, gpu_id: str | None, detail: str) -> str:
    """``gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe``; a node fault has no GPU."""
    return " ".join(part for part in (PREFIX + code, gpu_id, detail) if part)


def code_of(line: str) -> str:
    """``G006`` of ``gpuwatch:G006 0000:03:00.0 ...``."""
    return line[len(PREFIX):].split(" ", 1)[0]
