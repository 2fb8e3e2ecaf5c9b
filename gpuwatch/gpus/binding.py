"""Rebinding after rediscovery: the one place where every per-GPU part learns that a GPU it drives moved.

A GPU's identity is its PCI slot; where its files are (cardN, hwmonM) can change when the driver
re-probes it after a reset, a bus rescan or an unbind/bind (SYSFS_FACTS §7.1: the hwmon index is not
stable). A part that keeps a path (the fan controller's backend; a power governor) would otherwise
write to a directory that no longer exists for good. The amdgpu source hands each discovery to
``Bindings.update``; a GPU found somewhere new is announced with its new location to every part
that subscribed (compose.build wires them), on the loop's thread, before the tick's consumers run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("gpuwatch")


class Located(Protocol):
    @property
    def gpu_id(self) -> str: ...


C = TypeVar("C", bound=Located)


def moved(known: Mapping[str, C], found: Iterable[C]) -> list[tuple[C, C]]:
    """(old, new) for every GPU of ``found`` known before at another location (pure)."""
    return [(known[card.gpu_id], card) for card in found if card.gpu_id in known and known[card.gpu_id] != card]


class Bindings(Generic[C]):
    """Where each GPU was last found, and who must hear when that changes."""

    def __init__(self) -> None:
        self._known: dict[str, C] = {}
        self._listeners: list[Callable[[C], None]] = []

    def subscribe(self, rebind: Callable[[C], None]) -> None:
        """``rebind(new_location)`` is called for every GPU that moved, from the next discovery on."""
        self._listeners.append(rebind)

    def update(self, found: Iterable[C]) -> list[tuple[C, C]]:
        cards = list(found)
        changes = moved(self._known, cards)
        self._known.update((card.gpu_id, card) for card in cards)
        for old, new in changes:
            log.warning("GPU %s moved (%s -> %s): rebinding the parts that drive it", new.gpu_id, old, new)
            for rebind in self._listeners:
                try:
                    rebind(new)
                except Exception:  # one part's bug must not keep the others on the old paths
                    log.exception("GPU %s: rebinding %r failed", new.gpu_id, rebind)
        return changes
