"""The configuration's shared vocabulary: its error, the strict pydantic base, the PCI slot type that names
a GPU everywhere, and where a daemon publishes (the runtime directory, its state file and socket)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from gpuwatch.config.quick import ConfigError as ConfigError  # its home: quick.py (no pydantic)
from gpuwatch.config.slots import canonical_pci_slot

DEFAULT_HTTP_PORT = 9840

# The longest one GPU's sysfs reads (or its fan's writes) may hold a tick before the GPU counts as
# unresponsive (docs/robustness.md). A whole GPU reads in well under 10 ms (benchmarks/poll_cycle.py);
# only a driver that is really stuck (an SMU message that never completes, a reset) waits this out.
DEFAULT_SYSFS_DEADLINE_S = 1.0


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def distinct_slots(slots: Iterable[object]) -> None:
    """Raise ValueError when two spellings name one GPU (``0000:2D:00.0`` and ``2d:00.0``): its settings or
    its trainers' would silently be one of them."""
    seen: dict[str, object] = {}
    for slot in slots:
        if not isinstance(slot, str):
            continue  # the type check's to say
        try:
            canonical = canonical_pci_slot(slot)
        except ValueError:
            continue  # the slot check's to say
        if canonical in seen:
            raise ValueError(f"{seen[canonical]!r} and {slot!r} are the same GPU ({canonical}): name it once")
        seen[canonical] = slot


# A slot in the config ([fan.gpus], [power.gpus], a trainer's gpus): any unambiguous spelling, kept as sysfs
# names it, so that it matches the GPU it names (a trainer's thermal limits watch the GPUs by this id).
PciSlot = Annotated[str, AfterValidator(canonical_pci_slot)]
