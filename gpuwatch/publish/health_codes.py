"""The health verdict's vocabulary: one stable code per fault class, what each means, its [health] switch, and
the one-line form every reader parses (``gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe``).

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

# code -> (the [health] switch that turns the class off, what it means)
CODES: dict[str, tuple[str, str]] = {
    STALE: ("daemon_down", "the daemon's state is stale: its loop is stuck, nothing guards the GPUs"),
    NO_DAEMON: ("daemon_down", "no daemon runs: nothing guards the GPUs"),
    UNUSABLE: ("daemon_down", "the daemon runs but its published state cannot be used (not its document, or "
                              "garbage): no verdict"),
    FUTURE: ("daemon_down", "the daemon's state is stamped in the future (a clock stepped, on another boot or with "
                            "no boot-time stamp): its freshness cannot be told"),
    GPU_DOWN: ("gpu_down", "a GPU is gone or does not answer"),
    FAN_UNCONTROLLED: ("fan_uncontrolled", "a fan should be driven and cannot be written"),
    FAN_FAILSAFE: ("fan_failsafe", "a fan in failsafe (full speed): temperature missing or frozen, GPU gone"),
    FAN_STALLED: ("fan_stalled", "a driven fan stopped"),
    OVER_CRIT: ("over_crit", "a sensor at or above the card's crit for longer than over_crit_s"),
    RESET_STUCK: ("reset_stuck", "processes stuck in D state hold a GPU after its reset"),
    RESET_RECOVERING: ("reset_recovering", "a GPU reset and is not usable yet"),
    PCIE_WIDTH: ("pcie_width", "the slot's PCIe link is narrower than both ends support"),
    PCIE_SPEED: ("pcie_speed", "the slot's PCIe link is slower than both ends support"),
    AER_FATAL: ("aer_fatal", "a fatal PCIe error (AER) on the path to the GPU"),
}

# The fault classes a remediation maps one to one (`gpuwatch health --class`, one NPD condition each:
# deploy/kubernetes). The daemon's own codes (DAEMON_CODES) belong to every class: without a fresh verdict no
# class can be said healthy.
DAEMON_CODES = (STALE, NO_DAEMON, UNUSABLE, FUTURE)
CLASSES: dict[str, tuple[str, ...]] = {
    "gpu": (GPU_DOWN,),
    "fan": (FAN_UNCONTROLLED, FAN_FAILSAFE, FAN_STALLED),
    "thermal": (OVER_CRIT,),
    "reset": (RESET_STUCK, RESET_RECOVERING),
    "pcie": (PCIE_WIDTH, PCIE_SPEED, AER_FATAL),
}


def fault_line(code: str, gpu_id: str | None, detail: str) -> str:
    """``gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe``; a node fault has no GPU."""
    return " ".join(part for part in (PREFIX + code, gpu_id, detail) if part)


def code_of(line: str) -> str:
    """``G006`` of ``gpuwatch:G006 0000:03:00.0 ...``."""
    return line[len(PREFIX):].split(" ", 1)[0]
