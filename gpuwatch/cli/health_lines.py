"""A GPU's own health reports in `gpuwatch status` (pure): a line only for what needs a look, none when all is well."""

from __future__ import annotations

from gpuwatch.cli.text import NA, RED, YELLOW, Paint, duration, num

TYPE_CHECKING = False  # the renderers read the light view (publish/light_view.py) or model's dataclasses (issue 52)
if TYPE_CHECKING:
    from gpuwatch.model import PublishedGpu


def health_lines(gpu: PublishedGpu, paint: Paint) -> list[str]:
    """Only what needs a look: the card throttling itself now, a slot link below its maximum, PCIe errors."""
    return [line for line in (_throttle_line(gpu, paint), _pcie_line(gpu, paint)) if line is not None]


def _throttle_line(gpu: PublishedGpu, paint: Paint) -> str | None:
    flags = gpu.throttle_flags
    if not flags:
        return None
    reasons = ", ".join(gpu.throttle_reasons or [])
    return "  thrtl  " + paint(f"THROTTLING {reasons} ({' '.join(flags)})", YELLOW) + _throttled_total(gpu)


def _throttled_total(gpu: PublishedGpu) -> str:
    """The time each reason held the card; one under a second is left out (it would read 0m00s)."""
    throttled = {reason: s for reason, s in gpu.throttled_s if s >= 1}
    if not throttled:
        return ""
    return "  throttled " + ", ".join(f"{r} {duration(s)}" for r, s in throttled.items())


def _pcie_line(gpu: PublishedGpu, paint: Paint) -> str | None:
    below = _link_below_max(gpu)
    counts = _aer_counts(gpu)
    replays = gpu.pcie_replays_total
    if not (below or any(counts) or replays):
        return None
    return (f"  pcie   {_link(gpu, below, paint)}" + _aer(counts, paint)
            + ("" if replays is None else f"  replays {replays}"))


def _link_below_max(gpu: PublishedGpu) -> bool:
    speed, width = gpu.pcie_slot_link_speed_gts, gpu.pcie_slot_link_width
    top_speed, top_width = gpu.pcie_slot_max_link_speed_gts, gpu.pcie_slot_max_link_width
    return (speed or 0) < (top_speed or 0) or (width or 0) < (top_width or 0)


def _link(gpu: PublishedGpu, below: bool, paint: Paint) -> str:
    """``16.0 GT/s x16``; a link below its maximum in yellow, with the maximum beside it."""
    width = gpu.pcie_slot_link_width
    link = f"{num(gpu.pcie_slot_link_speed_gts, 'GT/s', 1)} x{width if width is not None else NA}"
    if not below:
        return link
    top_speed, top_width = gpu.pcie_slot_max_link_speed_gts, gpu.pcie_slot_max_link_width
    return paint(link, YELLOW) + f" (below max {num(top_speed, 'GT/s', 1)} x{top_width})"


def _aer_counts(gpu: PublishedGpu) -> list[int | None]:
    """AER totals along the path: correctable, non-fatal, fatal."""
    return [gpu.pcie_aer_correctable_total, gpu.pcie_aer_nonfatal_total, gpu.pcie_aer_fatal_total]


def _aer(counts: list[int | None], paint: Paint) -> str:
    if all(c is None for c in counts):
        return ""
    text = "  aer cor/nonfatal/fatal " + "/".join(NA if c is None else str(c) for c in counts)
    # Correctable errors the hardware fixed by itself; a non-fatal or fatal one it could not: red.
    return paint(text, RED) if any(counts[1:]) else text
