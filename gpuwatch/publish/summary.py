"""One-line summary of a PublishedState for systemd's STATUS= (shown by `systemctl status gpuwatch`).

Pure: the daemon sends the line only when it changes, so values are rounded to whole degrees and
percent to keep the line from changing on every tick's noise.
"""

from __future__ import annotations

from gpuwatch.model import FanMode, PowerMode, PublishedState

MAX_TRAINERS_LISTED = 3


def status_line(state: PublishedState) -> str:
    """e.g. ``2 GPUs, hottest 0000:03:00.0 junction 78°C | fan target 60% duty 58% | trainer resnet: running``."""
    return " | ".join(part for part in (_gpus(state), _fans(state), _power(state), _trainers(state)) if part)


def _gpus(state: PublishedState) -> str:
    gpus = state.snapshot.gpus
    if not gpus:
        return "no GPU found"
    text = f"{len(gpus)} GPU" + ("s" if len(gpus) != 1 else "")
    down = sum(1 for gpu in gpus if not gpu.up)
    if down:
        text += f" ({down} down)"
    hottest = max(
        ((t.temp_c, gpu.gpu_id, t.label) for gpu in gpus if gpu.up for t in gpu.temps if t.temp_c is not None),
        default=None,
    )
    if hottest is None:
        return text + ", no temperature readable"
    temp_c, gpu_id, label = hottest
    return text + f", hottest {gpu_id} {label} {temp_c:.0f}°C"


def _fans(state: PublishedState) -> str:
    """``fan target 60% duty 58%``: the highest target and duty, then the controllers in trouble, then other modes."""
    duties = [gpu.pwm_ratio for gpu in state.snapshot.gpus if gpu.up and gpu.pwm_ratio is not None]
    duty = f"duty {max(duties) * 100:.0f}%" if duties else "duty n/a"
    if not state.fans:
        return f"fan {duty}" if duties else ""  # no fan controller: only what the cards report
    return _fan_target(state, duty) + _fan_troubles(state) + _fan_modes(state)


def _fan_target(state: PublishedState, duty: str) -> str:
    targets = [fan.target_ratio for fan in state.fans if fan.target_ratio is not None]
    return f"fan target {max(targets) * 100:.0f}% {duty}" if targets else f"fan {duty}"


def _fan_troubles(state: PublishedState) -> str:
    """How many fans are in each kind of trouble, in capitals: the words an operator must not miss."""
    counts = (
        ("FAILSAFE", sum(1 for fan in state.fans if fan.mode is FanMode.FAILSAFE)),
        ("UNCONTROLLED", sum(1 for fan in state.fans if fan.mode is FanMode.UNCONTROLLED)),
        ("STALLED", sum(1 for fan in state.fans if fan.stalled)),
    )
    return "".join(f", {word} on {count}" for word, count in counts if count)


def _fan_modes(state: PublishedState) -> str:
    """The modes besides the curve and the troubles above (monitor-only, dry-run...), e.g. `` (dry-run)``."""
    modes = {fan.mode for fan in state.fans} - {FanMode.CURVE, FanMode.FAILSAFE, FanMode.UNCONTROLLED}
    return " (" + ",".join(sorted(mode.value for mode in modes)) + ")" if modes else ""


def _power(state: PublishedState) -> str:
    """Only while a cap is lowered: e.g. ``power capped 112/150 W`` (the lowest of them)."""
    capped = [p for p in state.powers if p.mode in (PowerMode.GOVERNING, PowerMode.FLOOR) and p.cap_w is not None
              and p.original_cap_w is not None]
    if not capped:
        return ""
    low = min(capped, key=lambda p: (p.cap_w or 0) / (p.original_cap_w or 1))
    text = f"power capped {low.cap_w:.0f}/{low.original_cap_w:.0f} W"
    if len(capped) > 1:
        text += f" (on {len(capped)} GPUs)"
    return text + (" at the floor" if low.mode is PowerMode.FLOOR else "")


def _trainers(state: PublishedState) -> str:
    if not state.trainers:
        return ""
    listed = [f"{t.name}: {t.phase.value}" for t in state.trainers[:MAX_TRAINERS_LISTED]]
    more = len(state.trainers) - len(listed)
    if more > 0:
        listed.append(f"+{more} more")
    return ("trainer " if len(state.trainers) == 1 else "trainers ") + ", ".join(listed)
